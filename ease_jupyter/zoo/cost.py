"""Cost estimates and descriptors of candidates (cost-aware GP-UCB, arXiv §4.1).

Torch models: forward FLOPs of one example, counted by
``torch.utils.flop_counter.FlopCounterMode`` on a 1-example batch, times 3
for forward + backward (the backward pass costs about twice the forward).

scikit-learn models: a documented complexity proxy of one ``fit`` on n
examples (see the ``*_cost`` functions below), in "FLOP-like" units so that
torch and scikit-learn candidates can be ranked on one scale. They are proxies
for ranking, not predictions of seconds.

Descriptor (for the GP fallback kernel when no other user has history): a
fixed-length tuple, the same layout for every candidate of every workload::

    (log10 flops_per_example, log10 parameters, is_torch, *one_hot(kind))

with ``kind`` from :data:`FAMILY_KINDS`.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

#: The family kinds that the descriptor one-hot encodes, in a fixed order.
FAMILY_KINDS: tuple[str, ...] = (
    "cnn",  # LeNet, VGG
    "resnet",
    "mobilenet",
    "cnn1d",
    "rnn",  # GRU, LSTM, bi-LSTM
    "seq2seq",
    "autoencoder",
    "unet",
    "linear",  # logistic regression, ridge
    "kernel",  # SVM / SVR
    "trees",  # random forest, gradient boosting
    "neighbors",
    "mlp",
)

#: forward + backward is about three forward passes
BACKWARD_FACTOR = 3.0

#: FLOPs charged per input element for scaling / pooling the input
INPUT_ELEMENT_FLOPS = 4.0

#: n used for the per-example figure and the descriptor of scikit-learn models
NOMINAL_N = 1000


def descriptor(flops_per_example: float, n_params: float, torch_engine: bool, kind: str) -> tuple[float, ...]:
    """The candidate descriptor; see the module docstring."""
    if kind not in FAMILY_KINDS:
        raise ValueError(f"family kind: found {kind!r}, expected one of {FAMILY_KINDS}")
    one_hot = tuple(1.0 if k == kind else 0.0 for k in FAMILY_KINDS)
    return (
        math.log10(max(float(flops_per_example), 1.0)),
        math.log10(max(float(n_params), 1.0)),
        1.0 if torch_engine else 0.0,
        *one_hot,
    )


# ---------------------------------------------------------------------------
# torch
# ---------------------------------------------------------------------------


def _lstm_flops(m: Any, steps: int) -> float:
    """Multiply-adds of an LSTM as 2 FLOPs each: per step and direction,
    4 gates x hidden x (input + hidden), plus the bias adds."""
    per_layer = 0.0
    h = m.hidden_size
    dirs = 2 if m.bidirectional else 1
    for layer in range(m.num_layers):
        inp = m.input_size if layer == 0 else h * dirs
        per_layer += dirs * steps * (2.0 * 4 * h * (inp + h) + 8 * h)
    return per_layer


def forward_flops(module: Any, example_shape: Sequence[int], **forward_kwargs: Any) -> float:
    """Forward FLOPs of ``module`` on one example of ``example_shape``.

    Matrix products and convolutions are counted by ``FlopCounterMode``. Its
    table has no entry for the fused CPU LSTM kernel, so each ``nn.LSTM`` the
    forward pass runs is checked on its own and, if the counter saw nothing,
    counted analytically (:func:`_lstm_flops`). Elementwise work is not
    counted, except :data:`INPUT_ELEMENT_FLOPS` per input element for input
    scaling and pooling, so that a larger input never looks cheaper. The
    example is made on the device of ``module``'s parameters: a net already
    on a GPU is counted where it is, to the same count.
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    seen: list[tuple[Any, tuple[int, ...]]] = []

    def hook(mod: Any, args: tuple[Any, ...]) -> None:
        seen.append((mod, tuple(args[0].shape)))

    handles = [m.register_forward_pre_hook(hook) for m in module.modules() if isinstance(m, torch.nn.LSTM)]
    was_training = module.training
    module.eval()
    try:
        device = next((p.device for p in module.parameters()), torch.device("cpu"))
        x = torch.zeros((1, *example_shape), dtype=torch.float32, device=device)
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            module(x, **forward_kwargs)
        total = float(counter.get_total_flops()) + INPUT_ELEMENT_FLOPS * math.prod(example_shape)
        for h in handles:
            h.remove()
        handles = []
        for lstm, shape in seen:
            with torch.no_grad(), FlopCounterMode(display=False) as sub:
                lstm(torch.zeros(shape, device=device))
            if sub.get_total_flops() == 0:
                steps = shape[1] if lstm.batch_first else shape[0]
                total += _lstm_flops(lstm, steps)
    finally:
        for h in handles:
            h.remove()
        module.train(was_training)
    return total


def torch_train_flops(module: Any, example_shape: Sequence[int], **forward_kwargs: Any) -> float:
    """Training FLOPs per example per epoch: 3 x forward."""
    return BACKWARD_FACTOR * forward_flops(module, example_shape, **forward_kwargs)


# ---------------------------------------------------------------------------
# scikit-learn proxies: cost of one fit on n examples with d features and
# K outputs (classes; 1 for single-output regression).
# ---------------------------------------------------------------------------

LOGREG_ITERS = 100  # typical L-BFGS iterations on standardised features
MLP_EPOCHS = 100  # max_iter of the MLPs (Adam epochs)
MLP_HIDDEN = 100


def linear_cost(n: int, d: int, k: int, iters: int = LOGREG_ITERS) -> float:
    """Logistic regression / ridge: ``iters`` gradient evaluations of
    2 n d K FLOPs each (ridge's one Cholesky solve is below that)."""
    return 2.0 * iters * n * d * max(k, 1)


def kernel_cost(n: int, d: int, k: int, regression: bool = False) -> float:
    """RBF SVM/SVR (libsvm SMO): kernel evaluations dominate, ~n^2 of 3d
    FLOPs each. One-vs-one over K classes trains K(K-1)/2 problems on 2n/K
    examples, which sums to 2(K-1)/K n^2; SVR with k outputs trains k
    problems on all n."""
    if regression:
        factor = float(max(k, 1))
    else:
        factor = 2.0 * (k - 1) / k if k >= 2 else 1.0
    return 3.0 * d * factor * float(n) ** 2


def forest_cost(n: int, d: int, k: int, trees: int) -> float:
    """Random forest: per tree, each of ~log2 n levels scans n examples on
    max_features ~ sqrt(d) features (sorted splits: x log2 n)."""
    lg = math.log2(max(n, 2))
    return float(trees) * n * lg * lg * math.sqrt(d) * max(1.0, math.log2(max(k, 2)))


def boosting_cost(n: int, d: int, k: int, iters: int, leaves: int = 15, bins: int = 255) -> float:
    """Histogram gradient boosting: binning (n d log2 bins) once, then per
    iteration and class a histogram pass over n d plus split search over
    d x bins per leaf (``leaves``)."""
    per_tree = n * d + float(leaves) * d * bins
    return n * d * math.log2(bins) + float(iters) * max(k, 1) * per_tree


def neighbors_cost(n: int, d: int, k: int, val_fraction: float = 0.25) -> float:
    """Brute-force kNN: fitting stores the data (n d); the work is scoring,
    ``val_fraction * n`` queries against n stored points of d features."""
    return n * d + 2.0 * val_fraction * float(n) * n * d


def mlp_cost(n: int, d: int, k: int, hidden: int = MLP_HIDDEN, epochs: int = MLP_EPOCHS) -> float:
    """One-hidden-layer MLP: 3 x 2 (d h + h K) FLOPs per example per epoch."""
    return BACKWARD_FACTOR * 2.0 * (d * hidden + hidden * max(k, 1)) * n * epochs


def sklearn_params(kind: str, n: int, d: int, k: int, trees: int = 100) -> float:
    """A parameter-count proxy for the descriptor (fitted-model size)."""
    k = max(k, 1)
    if kind == "linear":
        return (d + 1) * k
    if kind == "kernel":
        return 0.5 * n * (d + 1)  # about half the examples end up support vectors
    if kind == "trees":
        return trees * 2.0 * max(n / 5.0, 1.0)  # nodes with ~5 examples per leaf
    if kind == "neighbors":
        return float(n * d)
    if kind == "mlp":
        return d * MLP_HIDDEN + MLP_HIDDEN + MLP_HIDDEN * k + k
    raise ValueError(f"scikit-learn kind: found {kind!r}")


def sklearn_fit_cost(proxy: Any, d: int, k: int, n_examples: int, epochs: int) -> float:
    """``cost_fn`` of scikit-learn candidates: one fit per "epoch"."""
    return float(proxy(int(n_examples), d, k)) * int(epochs)
