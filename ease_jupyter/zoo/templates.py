"""Template matching and template augmentation (pvldb §3.1, Fig. 6).

Matching goes from top to bottom, from the more specific template to the more
general, and the first row that matches decides the workload:

====  ==========================================  ==================================  ===========================
row   input                                       output                              workload
====  ==========================================  ==================================  ===========================
1     {[Tensor[A,B,C]], []}  (or [A,B], C = 1)    {[Tensor[D]], []}, D >= 2           TENSOR_CLASSIFICATION
2     {[Tensor[A,B,C]], []}  (or [A,B])           {[Tensor[D,E,F]], []} (or [D,E])    TENSOR_RECOVERY
3     {[Tensor[A], *], [a]}                       {[Tensor[D]], []}, D >= 2           TIME_SERIES_CLASSIFICATION
4     {[Tensor[A], *], [a]}                       {[Tensor[B], *], [b]}               TIME_SERIES_TRANSLATION
5     {[Tensor[A], *], [a, c]}                    {[Tensor[B]], []}                   TREE_CLASSIFICATION
6     {[Tensor[A]], []}                           {[Tensor[D]], []}, D >= 2           FLAT_CLASSIFICATION
7     {[Tensor[A]], []}                           {[Tensor[...]], []}, not a class    FLAT_REGRESSION
                                                  vector (Tensor[1], or any rank)
8     {[*], [*]}                                  {[Tensor[B]], []}                   GENERAL_CLASSIFICATION
9     {[*], [*]}                                  {[*], [*]}                          GENERAL_AUTOENCODER
====  ==========================================  ==================================  ===========================

Rows 6-7 are ours: Fig. 6 folds flat feature vectors into row 8 (bit-level
RNN); we give them scikit-learn estimators instead. A class vector has
D >= 2 entries (``Program.num_classes``); an image or sequence with a
``Tensor[1]`` output therefore falls through to row 8.

"*" is an arbitrary tail: a sequence element may carry more tensors after
the leading ``Tensor[A]``. The nets see one feature vector per step, all the
element's tensors flattened and concatenated in declaration order, so the
data layout is (n, T, sum of sizes); likewise for translated outputs.

Template augmentation expands each candidate into configs: the SGD learning
rate {0.1, 0.01, 0.001} for torch models (ease.ml's one tuned hyperparameter,
pvldb §3.1 "Discussion: Hyperparameter Tuning"), crossed with the
normalisation f_k, k in {1, 2, 3}, for image recovery; a small grid of the key
option for scikit-learn models.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable

from ease_jupyter.errors import EaseMLError
from ease_jupyter.schema.types import DataType, Program
from ease_jupyter.zoo import cost as _cost
from ease_jupyter.zoo.base import Candidate, Engine, ModelConfig, Workload
from ease_jupyter.zoo.normalization import NORMALIZATION_KS

__all__ = [
    "LEARNING_RATES",
    "TORCH_EPOCHS",
    "MIN_TORCH_EPOCHS",
    "LARGEST_EPOCHS",
    "MAX_TORCH_EPOCHS",
    "EXAMPLES_PER_CONFIG",
    "default_max_epochs",
    "DEFAULT_SEQ_LEN",
    "TEMPLATES",
    "Template",
    "NoCandidatesError",
    "match_workload",
    "candidates",
]

#: The learning rates every torch candidate is tried with (pvldb §3.1).
LEARNING_RATES: tuple[float, ...] = (0.1, 0.01, 0.001)
#: Default training epochs of torch candidates (what ``Candidate.cost`` assumes).
TORCH_EPOCHS = 10
#: Bounds and target of :func:`default_max_epochs`.
MIN_TORCH_EPOCHS = 3  # ease.ml's fixed budget: large data never trains less than before
MAX_TORCH_EPOCHS = 12  # tiny data: more passes mostly memorise it, and the pick's cost stays bounded
EXAMPLES_PER_CONFIG = 50_000  # training examples the best config of a pick sees, about
#: The most epochs a torch workload may train: the MOP runner's default
#: bound (``MOPRunner(max_epochs=...)``) and the largest ``max_epochs`` a task may set.
LARGEST_EPOCHS = 1000


def default_max_epochs(n_examples: int) -> int:
    """The epochs a torch pick's best config trains when the task sets none.

    What a net needs to converge is a number of SGD steps, not of passes
    over the data (Bottou, Curtis & Nocedal, "Optimization Methods for
    Large-Scale Machine Learning", SIAM Review 60(2), 2018, §4: the
    guarantees of SGD are in iterations); with a fixed batch size an epoch
    over ``n`` examples is ``n / B`` steps, so a small data set needs more
    epochs for the same steps. The rule keeps the examples the surviving
    config sees near :data:`EXAMPLES_PER_CONFIG`, that is
    ``ceil(EXAMPLES_PER_CONFIG / n)`` epochs, bounded to
    [:data:`MIN_TORCH_EPOCHS`, :data:`MAX_TORCH_EPOCHS`]. This is R, the
    most epochs of successive halving (Li et al., "Hyperband", JMLR 18(185),
    2017; Cerebro §4.2): the configs of a pick that rank poorly at a rung
    stop early, so a longer R costs little more than one config's R.

    >>> [default_max_epochs(n) for n in (100, 5_000, 10_000, 60_000)]
    [12, 10, 5, 3]
    """
    if isinstance(n_examples, bool) or not isinstance(n_examples, numbers.Integral) or n_examples < 1:
        raise EaseMLError(f"n_examples: found {n_examples!r}, expected a positive integer")
    return max(MIN_TORCH_EPOCHS, min(MAX_TORCH_EPOCHS, -(-EXAMPLES_PER_CONFIG // int(n_examples))))
#: Sequence length assumed for the cost of time-series candidates when the
#: program cannot say (a chain's length is data, not type).
DEFAULT_SEQ_LEN = 32


class NoCandidatesError(EaseMLError, NotImplementedError):
    """Template matching found a workload for which the zoo has no models."""

    def __init__(self, workload: Workload, reason: str = ""):
        self.workload = workload
        msg = f"no candidate models for workload {workload.value} yet"
        super().__init__(f"{msg}: {reason}" if reason else msg)


# ---------------------------------------------------------------------------
# matching
# ---------------------------------------------------------------------------


def _rank(dt: DataType, i: int = 0) -> int:
    return len(dt.tensors[i].shape)


def _single(dt: DataType, ranks: tuple[int, ...]) -> bool:
    """{[Tensor[...]], []} with one tensor of one of ``ranks``."""
    return not dt.recursive and len(dt.tensors) == 1 and _rank(dt) in ranks


def _class_vector(dt: DataType) -> bool:
    """{[Tensor[D]], []} with D >= 2."""
    return _single(dt, (1,)) and dt.tensors[0].shape[0] >= 2


def _chain(dt: DataType, n_rec: int) -> bool:
    """{[Tensor[A], *], [n_rec fields]}."""
    return len(dt.recursive) == n_rec and len(dt.tensors) >= 1 and _rank(dt) == 1


@dataclass(frozen=True)
class Template:
    """One row of Fig. 6 (plus our flat rows)."""

    workload: Workload
    input: str
    output: str
    models: str
    matches: Callable[[Program], bool]


TEMPLATES: tuple[Template, ...] = (
    Template(
        Workload.TENSOR_CLASSIFICATION, "{[Tensor[A,B,C]], []}", "{[Tensor[D]], []}",
        "LeNet, ResNet, VGG, MobileNet",
        lambda p: _single(p.input, (2, 3)) and _class_vector(p.output),
    ),
    Template(
        Workload.TENSOR_RECOVERY, "{[Tensor[A,B,C]], []}", "{[Tensor[D,E,F]], []}",
        "conv auto-encoder, U-Net",
        lambda p: _single(p.input, (2, 3)) and _single(p.output, (2, 3)),
    ),
    Template(
        Workload.TIME_SERIES_CLASSIFICATION, "{[Tensor[A], *], [a]}", "{[Tensor[D]], []}",
        "1-D CNN, GRU, LSTM, bi-LSTM",
        lambda p: _chain(p.input, 1) and _class_vector(p.output),
    ),
    Template(
        Workload.TIME_SERIES_TRANSLATION, "{[Tensor[A], *], [a]}", "{[Tensor[B], *], [b]}",
        "seq2seq (GRU, LSTM)",
        lambda p: _chain(p.input, 1) and _chain(p.output, 1),
    ),
    Template(
        Workload.TREE_CLASSIFICATION, "{[Tensor[A], *], [a, c]}", "{[Tensor[B]], []}",
        "Tree-RNN, tree kernel SVM (none in the zoo yet)",
        lambda p: _chain(p.input, 2) and _single(p.output, (1,)),
    ),
    Template(
        Workload.FLAT_CLASSIFICATION, "{[Tensor[A]], []}", "{[Tensor[D]], []}, D >= 2",
        "logistic regression, SVM, random forest, gradient boosting, kNN, MLP",
        lambda p: _single(p.input, (1,)) and _class_vector(p.output),
    ),
    Template(
        Workload.FLAT_REGRESSION, "{[Tensor[A]], []}", "{[Tensor[...]], []}, not a class vector",
        "ridge, SVR, random forest, gradient boosting, kNN, MLP",
        lambda p: _single(p.input, (1,)) and not p.output.recursive and len(p.output.tensors) == 1,
    ),
    Template(
        Workload.GENERAL_CLASSIFICATION, "{[*], [*]}", "{[Tensor[B]], []}",
        "bit-level RNN (none in the zoo yet)",
        lambda p: _single(p.output, (1,)),
    ),
    Template(
        Workload.GENERAL_AUTOENCODER, "{[*], [*]}", "{[*], [*]}",
        "bit-level auto-encoder (none in the zoo yet)",
        lambda p: True,
    ),
)


def _check_program(program: Program) -> None:
    if not isinstance(program, Program):
        raise EaseMLError(f"program: found {type(program).__name__}, expected ease_jupyter.schema.types.Program")
    for side in ("input", "output"):
        dt = getattr(program, side)
        for i, t in enumerate(dt.tensors):
            if len(t.shape) == 0 or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in t.shape):
                raise EaseMLError(
                    f"program.{side}.tensors[{i}].shape: found {list(t.shape)}, "
                    "expected a non-empty list of positive integers"
                )


def match_workload(program: Program) -> Workload:
    """The workload of the first template (top to bottom) that ``program`` matches.

    Raises:
        EaseMLError: if ``program`` is not a Program or has a non-positive or
            empty tensor shape.
    """
    _check_program(program)
    for template in TEMPLATES:
        if template.matches(program):
            return template.workload
    raise AssertionError("unreachable: the last template matches every program")  # pragma: no cover


def template_for(workload: Workload) -> Template:
    return next(t for t in TEMPLATES if t.workload is workload)


# ---------------------------------------------------------------------------
# candidates
# ---------------------------------------------------------------------------


def _step_size(dt: DataType) -> int:
    """Features per sequence element: all its tensors flattened and concatenated."""
    return sum(math.prod(t.shape) for t in dt.tensors)


@functools.lru_cache(maxsize=256)
def _torch_stats(cls_name: str, args: tuple[Any, ...], kwargs: tuple[tuple[str, Any], ...],
                 example_shape: tuple[int, ...]) -> tuple[float, int]:
    """(training FLOPs per example, parameters) of a default-config net."""
    from ease_jupyter.zoo import nets

    module = getattr(nets, cls_name)(*args, **dict(kwargs))
    return _cost.torch_train_flops(module, example_shape), module.n_params()


@dataclass(frozen=True)
class TorchBuilder:
    """``Candidate.build`` of torch candidates: ``builder(config)`` returns a
    fresh, untrained net. A value (not a closure), so candidates compare
    equal across calls and pickle for remote workers.

    ``lr`` is not a constructor argument; execution reads it
    (``net.make_optimizer(config.options["lr"])``). Constructor options
    (``norm_k``) come from the config.
    """

    name: str
    cls_name: str
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...] = ()
    allowed: tuple[str, ...] = ("lr",)
    ctor_options: tuple[str, ...] = ()

    def __call__(self, config: ModelConfig) -> Any:
        from ease_jupyter.zoo import nets

        if not isinstance(config, ModelConfig) or config.model != self.name:
            found = config.model if isinstance(config, ModelConfig) else type(config).__name__
            raise EaseMLError(f"config.model: found {found!r}, expected {self.name!r}")
        opts = config.options
        unknown = set(opts) - set(self.allowed)
        if unknown:
            raise EaseMLError(f"config {config.key}: unknown option(s) {sorted(unknown)}, expected {list(self.allowed)}")
        kw = dict(self.kwargs)
        kw.update({k: opts[k] for k in self.ctor_options if k in opts})
        return getattr(nets, self.cls_name)(*self.args, **kw)


def _torch_candidate(name: str, family: str, kind: str, workload: Workload, cls_name: str,
                     args: tuple[Any, ...], example_shape: tuple[int, ...], *,
                     kwargs: tuple[tuple[str, Any], ...] = (), norm: bool = False) -> Candidate:
    flops, params = _torch_stats(cls_name, args, kwargs, example_shape)
    if norm:
        configs = tuple(ModelConfig.of(name, {"lr": lr, "norm_k": k}) for k in NORMALIZATION_KS for lr in LEARNING_RATES)
        allowed, ctor = ("lr", "norm_k"), ("norm_k",)
    else:
        configs = tuple(ModelConfig.of(name, {"lr": lr}) for lr in LEARNING_RATES)
        allowed, ctor = ("lr",), ()
    return Candidate(
        name=name,
        family=family,
        workload=workload,
        engine=Engine.TORCH,
        configs=configs,
        flops_per_example=flops,
        descriptor=_cost.descriptor(flops, params, True, kind),
        build=TorchBuilder(name, cls_name, args, kwargs, allowed, ctor),
        epochs=TORCH_EPOCHS,
    )


def _sklearn_candidates(program: Program, workload: Workload) -> list[Candidate]:
    from ease_jupyter.zoo import estimators

    d = program.input.tensors[0].shape[0]
    if workload is Workload.FLAT_CLASSIFICATION:
        specs, k, n_outputs = estimators.CLASSIFIERS, int(program.num_classes or 2), 1
    else:
        specs = estimators.REGRESSORS
        k = n_outputs = math.prod(program.output.tensors[0].shape)
    out = []
    for spec in specs:
        cost_fn = functools.partial(_cost.sklearn_fit_cost, spec.proxy, d, k)
        flops = cost_fn(_cost.NOMINAL_N, 1) / _cost.NOMINAL_N
        out.append(
            Candidate(
                name=spec.name,
                family=spec.family,
                workload=workload,
                engine=Engine.SKLEARN,
                configs=tuple(ModelConfig.of(spec.name, {spec.option: v}) for v in spec.grid),
                flops_per_example=flops,
                descriptor=_cost.descriptor(flops, _cost.sklearn_params(spec.kind, _cost.NOMINAL_N, d, k), False, spec.kind),
                build=estimators.EstimatorBuilder(spec.factory, spec.name, spec.option, spec.grid, n_outputs),
                epochs=1,
                cost_fn=cost_fn,
            )
        )
    return out


def candidates(program: Program, *, seq_len: int = DEFAULT_SEQ_LEN) -> list[Candidate]:
    """The candidate models consistent with ``program``, each with its configs.

    Args:
        program: the task's ease.ml program.
        seq_len: sequence length assumed by the cost of time-series models.

    Returns:
        A non-empty list, in a stable order.

    Raises:
        NoCandidatesError: the program matches a workload with no models yet
            (tree classification, general classification, general auto-encoder).
        EaseMLError: a malformed program or ``seq_len``.
    """
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise EaseMLError(f"seq_len: found {seq_len!r}, expected a positive integer")
    w = match_workload(program)
    inp, outp = program.input, program.output

    if w is Workload.TENSOR_CLASSIFICATION:
        shape = inp.tensors[0].shape
        d = int(program.num_classes or 2)
        spec = [
            ("lenet", "LeNet", "cnn", "LeNet"),
            ("resnet_small", "ResNet", "resnet", "SmallResNet"),
            ("vgg_small", "VGG", "cnn", "SmallVGG"),
            ("mobilenet_small", "MobileNet", "mobilenet", "MobileNetLite"),
        ]
        return [_torch_candidate(n, f, k, w, c, (shape, d), shape) for n, f, k, c in spec]

    if w is Workload.TENSOR_RECOVERY:
        ishape, oshape = inp.tensors[0].shape, outp.tensors[0].shape
        return [
            _torch_candidate("conv_autoencoder", "auto-encoder", "autoencoder", w, "ConvAutoencoder", (ishape, oshape), ishape, norm=True),
            _torch_candidate("unet", "U-Net", "unet", w, "UNet", (ishape, oshape), ishape, norm=True),
        ]

    if w is Workload.TIME_SERIES_CLASSIFICATION:
        a, d = _step_size(inp), int(program.num_classes or 2)
        ex = (seq_len, a)
        return [
            _torch_candidate("cnn1d", "1-D CNN", "cnn1d", w, "Conv1DNet", (a, d), ex),
            _torch_candidate("gru", "GRU", "rnn", w, "RNNClassifier", (a, d), ex, kwargs=(("cell", "gru"),)),
            _torch_candidate("lstm", "LSTM", "rnn", w, "RNNClassifier", (a, d), ex, kwargs=(("cell", "lstm"),)),
            _torch_candidate("bilstm", "bi-LSTM", "rnn", w, "RNNClassifier", (a, d), ex,
                             kwargs=(("cell", "lstm"), ("bidirectional", True))),
        ]

    if w is Workload.TIME_SERIES_TRANSLATION:
        a, b = _step_size(inp), _step_size(outp)
        ex = (seq_len, a)
        return [
            _torch_candidate("seq2seq_gru", "seq2seq", "seq2seq", w, "Seq2Seq", (a, b), ex, kwargs=(("cell", "gru"),)),
            _torch_candidate("seq2seq_lstm", "seq2seq", "seq2seq", w, "Seq2Seq", (a, b), ex, kwargs=(("cell", "lstm"),)),
        ]

    if w in (Workload.FLAT_CLASSIFICATION, Workload.FLAT_REGRESSION):
        return _sklearn_candidates(program, w)

    t = template_for(w)
    hint = ""
    if w is Workload.GENERAL_CLASSIFICATION and len(outp.tensors[0].shape) == 1 and outp.tensors[0].shape[0] == 1:
        hint = (" (an output Tensor[1] is not a class vector, which needs D >= 2 classes;"
                " regression targets are supported for flat Tensor[A] inputs)")
    raise NoCandidatesError(w, f"template input {t.input} -> output {t.output}; Fig. 6 lists {t.models}{hint}")
