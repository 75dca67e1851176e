"""A task's best model out of the service, as files its own runtime loads.

Formats, by the engine of the model (``FORMATS``):

* scikit-learn: ``joblib``, the fitted estimator as plain scikit-learn
  objects (``joblib.load`` with scikit-learn installed, no ease_jupyter),
  and ``onnx`` (skl2onnx; per-column inputs for a table task);
* torch: ``torchscript`` (``torch.jit.trace``), ``onnx`` (``torch.onnx``'s
  ``torch.export``-based exporter, the one torch recommends and the one that
  works alike on CPU and CUDA builds) and ``state_dict`` (``torch.save`` of
  the net's weights, for ``load_state_dict`` into the same architecture).

The conversions ask only for a fitted estimator or an ``nn.Module`` and an
example input (``sklearn_artifact``, ``torch_artifact``), so any model a
task trains, zoo or not, exports the same way. ``export_best`` finds the
task's best model, converts it and packs it with its model card
(``model_card.py``, ``export_bundle.py``). A torch model is converted where
the torch jobs run (the torch executor's ``call``, as ``infer`` does): it
needs the net, and building and tracing it is seconds of CPU that the
service process, which answers every user, should not spend. A user's own
net is built, traced and saved in a child killed at her model's time limit
(``own_model_calls.own_net_artifact_of``), as her estimator is converted.
A zoo scikit-learn model is unpickled and converted in the service's export
processes (``export_processes.py``, given the model's bytes): skl2onnx takes
seconds and many times the model's size in memory for a large forest, and
the training workers would make an export wait for a job to end.

Our one-thread wrappers (``zoo/_sk_wrappers.py``) only pin BLAS/OpenMP to
one thread around their parents' methods; ``plain_sklearn`` swaps each for
its scikit-learn parent with the fitted state as it is.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import copy
import copyreg
import inspect
import io
import logging
import math
import os
import pickle
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import DataError, UserModelCallError, UserModelCallTimeout
from ..zoo import Engine
from .export_bundle import MEDIA_TYPE, SUFFIXES, pack
from .export_processes import ExportProcessDied, ExportProcessTimeout

__all__ = ["ALL_FORMATS", "FORMATS", "MEDIA_TYPE", "Artifact", "SklearnInputs", "check_format", "export_best",
           "plain_pickle", "plain_sklearn", "sklearn_artifact", "sklearn_artifact_from", "torch_artifact",
           "torch_artifact_of"]

FORMATS: dict[Engine, tuple[str, ...]] = {
    Engine.SKLEARN: ("joblib", "onnx"),
    Engine.TORCH: ("torchscript", "onnx", "state_dict"),
}
ALL_FORMATS = ("joblib", "onnx", "torchscript", "state_dict")
ENGINE_WORDS = {Engine.SKLEARN: "a scikit-learn model", Engine.TORCH: "a torch model"}
INPUT_NAME = "X"  # the ONNX input of an array task (a table task has one per column)
_PACKAGE = __name__.split(".")[0]


@dataclass(frozen=True)
class Artifact:
    """An exported model: its bytes, and what the card says about its files'
    inputs and outputs and the preprocessing inside it."""

    format: str
    data: bytes
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    preprocessing: list[dict[str, Any]] = field(default_factory=list)

    @property
    def file_name(self) -> str:
        return "model" + SUFFIXES[self.format]


def check_format(fmt: Any, engine: Engine | None = None, what: str = "") -> str:
    """``fmt`` if it is a format, and one ``engine``'s models export to
    (DataError naming ``format`` and listing the valid ones otherwise)."""
    if not isinstance(fmt, str) or fmt not in ALL_FORMATS:
        found = repr(fmt)[:80] if isinstance(fmt, str) else f"a {type(fmt).__name__}"
        valid = "; ".join(f"{' or '.join(FORMATS[e])} for {ENGINE_WORDS[e]}" for e in FORMATS)
        raise DataError("format", found, f"one of {', '.join(ALL_FORMATS)} ({valid})")
    if engine is not None and fmt not in FORMATS[engine]:
        raise DataError("format", f"{fmt!r}, which does not fit {what or ENGINE_WORDS[engine]}",
                        f"{' or '.join(FORMATS[engine])} for {ENGINE_WORDS[engine]}")
    return fmt


# ---------------------------------------------------------------- scikit-learn


def _ours(module: Any) -> bool:
    return isinstance(module, str) and (module == _PACKAGE or module.startswith(_PACKAGE + "."))


def plain_parent(cls: type) -> type | None:
    """The scikit-learn class one of our wrapper classes stands for, or None
    when ``cls`` is not such a wrapper: a wrapper keeps its parent's
    constructor (so the same parameters and fitted attributes) and only
    overrides methods the parent has."""
    parent = next((base for base in cls.__mro__ if not _ours(base.__module__)), object)
    if parent is object or cls.__init__ is not parent.__init__:
        return None
    overridden = {name for klass in cls.__mro__ if _ours(klass.__module__)
                  for name, value in vars(klass).items() if not name.startswith("__") and callable(value)}
    return parent if all(hasattr(parent, name) for name in overridden) else None


def _plain_reduce(pickler: Any, obj: Any) -> Any:
    """A ``reducer_override`` that writes each of our wrappers as its plain
    parent and notes anything else of this package in ``pickler.leftovers``."""
    if isinstance(obj, type) or inspect.isroutine(obj):  # classes and functions are pickled by name
        if _ours(getattr(obj, "__module__", None)):
            pickler.leftovers.append(f"{obj.__module__}.{getattr(obj, '__qualname__', obj)}")
        return NotImplemented
    cls = type(obj)
    if not _ours(cls.__module__):
        return NotImplemented
    parent = plain_parent(cls)
    if parent is None:
        pickler.leftovers.append(f"{cls.__module__}.{cls.__qualname__}")
        return NotImplemented
    reduced = obj.__reduce_ex__(pickler.protocol)  # (copyreg.__newobj__, (cls,), state, ...)
    if not (isinstance(reduced, tuple) and len(reduced) >= 3 and tuple(reduced[1]) == (cls,)):
        pickler.leftovers.append(f"{cls.__module__}.{cls.__qualname__}")
        return NotImplemented
    state = reduced[2]
    if isinstance(state, dict) and parent.__module__.startswith("sklearn."):
        # what scikit-learn records for its own classes only (BaseEstimator.__getstate__)
        import sklearn

        state = {**state, "_sklearn_version": sklearn.__version__}
    # An empty parent, then the wrapper's state (parameters and fitted attributes) set on it.
    return (copyreg._reconstructor, (parent, object, None), state, *reduced[3:])


class _PlainPickler(pickle.Pickler):
    """Pickles an estimator with each of our wrappers written as its plain
    parent, classes and functions by name."""

    def __init__(self, file: Any) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.protocol = pickle.HIGHEST_PROTOCOL
        self.leftovers: list[str] = []

    def reducer_override(self, obj: Any) -> Any:
        return _plain_reduce(self, obj)


def _plain_cloudpickler(file: Any) -> Any:
    """``_PlainPickler``'s swaps, with cloudpickle's pickling of classes and
    functions that cannot be imported where the model loads (defined in a
    notebook's ``__main__``, or sent by value from a module beside it) by value."""
    import cloudpickle

    class _PlainCloudPickler(cloudpickle.Pickler):
        def __init__(self, out: Any) -> None:
            super().__init__(out, protocol=pickle.HIGHEST_PROTOCOL)
            self.protocol = pickle.HIGHEST_PROTOCOL
            self.leftovers: list[str] = []

        def reducer_override(self, obj: Any) -> Any:
            plain = _plain_reduce(self, obj)
            return plain if plain is not NotImplemented else super().reducer_override(obj)

    return _PlainCloudPickler(file)


def plain_pickle(estimator: Any) -> tuple[bytes, bool]:
    """A pickle of a fitted estimator made of scikit-learn's own classes (our
    one-thread wrappers replaced by their parents, fitted state carried
    over), and whether loading it needs cloudpickle: only a model holding a
    class or function that cannot be imported by name (a user's class
    defined in her notebook) is written with cloudpickle, by value.
    DataError naming ``format`` if it holds anything else of this package."""
    failure: BaseException | None = None
    for make, needs_cloudpickle in ((_PlainPickler, False), (_plain_cloudpickler, True)):
        buffer = io.BytesIO()
        pickler = make(buffer)
        try:
            pickler.dump(estimator)
        except (pickle.PicklingError, TypeError, AttributeError) as error:
            failure = error
        else:
            failure = None
        if pickler.leftovers:
            raise DataError("format", f"'joblib' for a model that holds {pickler.leftovers[0]}",
                            "a model made of scikit-learn (or other importable) classes, loadable without "
                            "ease_jupyter")
        if failure is None:
            return buffer.getvalue(), needs_cloudpickle
    raise DataError("format", f"'joblib' for a model that cannot be pickled ({failure})",
                    "a model whose classes are importable where it is loaded")


def plain_sklearn(estimator: Any) -> Any:
    """A copy of a fitted estimator made of scikit-learn's own classes
    (``plain_pickle``)."""
    return pickle.loads(plain_pickle(estimator)[0])


def _describe_steps(estimator: Any) -> list[dict[str, Any]]:
    """The preprocessing inside a (plain) pipeline: each step before the
    final estimator, with a ColumnTransformer's column groups."""
    steps = getattr(estimator, "steps", None)
    if not steps:
        regressor = getattr(estimator, "regressor_", None)  # TransformedTargetRegressor
        inner = _describe_steps(regressor) if regressor is not None else []
        transformer = getattr(estimator, "transformer_", None)
        if transformer is not None:
            inner.append({"step": "target", "class": _class_path(transformer),
                          "applies_to": "the target (predictions are transformed back)"})
        return inner
    out = []
    for name, step in steps[:-1]:
        row: dict[str, Any] = {"step": name, "class": _class_path(step)}
        transformers = getattr(step, "transformers_", None)
        if transformers is not None:
            row["columns"] = [{"name": t_name, "class": _class_path(t) if not isinstance(t, str) else t,
                               "columns": [str(c) for c in np.atleast_1d(np.asarray(cols, dtype=object)).tolist()]}
                              for t_name, t, cols in transformers]
        out.append(row)
    return out + _describe_steps(steps[-1][1])


def _class_path(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__.split('._')[0]}.{cls.__qualname__}"


@dataclass(frozen=True)
class SklearnInputs:
    """What a scikit-learn model takes: ``n_features`` float columns (an
    array task), or a table's columns (``columns``: (name, kind) pairs, kind
    one of numeric, boolean, categorical, text)."""

    n_features: int = 0
    columns: tuple[tuple[str, str], ...] = ()


def _onnx_types(inputs: SklearnInputs) -> list[tuple[str, Any]]:
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType

    if not inputs.columns:
        return [(INPUT_NAME, FloatTensorType([None, inputs.n_features]))]
    return [(name, StringTensorType([None, 1]) if kind in ("categorical", "text") else FloatTensorType([None, 1]))
            for name, kind in inputs.columns]


def _classes(plain: Any) -> list[Any] | None:
    """The classes of a classifier's score columns (``classes_``: those its
    training rows held, a subset of the task's where one never reached
    training), as JSON values; None where the model does not say."""
    classes = getattr(plain, "classes_", None)
    if classes is None:
        return None
    return [c.item() if isinstance(c, np.generic) else c for c in np.asarray(classes, dtype=object).tolist()]


def _score_output(plain: Any, name: str, n_columns: int | None = None) -> dict[str, Any]:
    """The card's row of a classifier's per-class output: probabilities, or
    the decision scores ONNX gives under that name for a model without
    ``predict_proba`` (an SVC without probabilities)."""
    classes = _classes(plain)
    if hasattr(plain, "predict_proba"):
        row: dict[str, Any] = {"name": name, "returns": "class probabilities, one column per class in columns "
                               "(the class indices that training saw, in order)"}
        if classes is not None:
            row["columns"] = classes
        return row
    row = {"name": name, "holds": "decision scores", "returns": (
        "decision scores, not probabilities (the model has no predict_proba): use label for the class")}
    if classes is not None and len(classes) > 2 and n_columns in (None, len(classes)):
        row["columns"] = classes  # (a binary model's two columns are one score and its negative)
    return row


def sklearn_artifact(estimator: Any, fmt: str, inputs: SklearnInputs, classification: bool) -> Artifact:
    """``estimator`` (fitted) as a joblib or an ONNX file."""
    check_format(fmt, Engine.SKLEARN)
    if fmt == "joblib" and inputs.columns:
        # A table's file takes the DataFrame as its owner has it, as task.infer does:
        # int column names, numbers in a categorical column (ONNX takes strings: the card spells them).
        from ..zoo.preprocess import exported

        estimator = exported(estimator)
    data, needs_cloudpickle = plain_pickle(estimator)
    plain = pickle.loads(data)
    steps = _describe_steps(plain)
    if fmt == "joblib":
        import joblib

        buffer = io.BytesIO()
        if needs_cloudpickle:  # her notebook's classes, by value: a pickle file, which joblib.load reads
            buffer.write(data)
        else:
            joblib.dump(plain, buffer)
        table = bool(inputs.columns)
        taking = ("a pandas DataFrame with the task's columns (card: task.table_schema)" if table
                  else f"a float array of shape (n, {inputs.n_features})")
        loads_with = ("joblib.load, with scikit-learn and cloudpickle installed (classes defined in the notebook "
                      "are inside the file)" if needs_cloudpickle else "joblib.load, with scikit-learn installed")
        outputs = [{"name": "predict", "takes": taking, "loads_with": loads_with,
                    "returns": "class indices into class_names" if classification else "predicted values"}]
        if classification and hasattr(plain, "predict_proba"):
            outputs.append(_score_output(plain, "predict_proba"))
        rows = ([{"name": INPUT_NAME, "dtype": "float32", "shape": [None, inputs.n_features]}] if not table
                else [{"name": n, "kind": k} for n, k in inputs.columns])
        return Artifact(fmt, buffer.getvalue(), rows, outputs, steps)
    model = _sklearn_onnx(plain, inputs, classification)
    renamed = _name_inputs(model.graph, [n for n, _ in inputs.columns] if inputs.columns else [INPUT_NAME])
    kinds = dict(inputs.columns)
    rows = [{"name": row["name"], **({"kind": kinds[row["name"]]} if kinds else {}),
             "dtype": row["dtype"], "shape": row["shape"]} for row in _tensor_rows(model.graph.input)]
    outputs = []
    for row in _tensor_rows(model.graph.output):  # (with_onnx_outputs keeps what is added here)
        name = renamed.get(row["name"], row["name"])
        if name == "label" and classification:
            row["returns"] = "class indices into class_names"
        elif name == "variable" and not classification:
            row["returns"] = "predicted values"
        elif name == "probabilities" and classification:
            row.update(_score_output(plain, row["name"], row["shape"][-1] if row["shape"] else None))
        if row["name"] != name:
            row["renamed_from"] = name
            row["why"] = f"a column of the table is named {name!r}, and a graph's names are unique"
        outputs.append(row)
    return Artifact(fmt, model.SerializeToString(), rows, outputs, steps)


def _sklearn_onnx(plain: Any, inputs: SklearnInputs, classification: bool) -> Any:
    try:
        from skl2onnx import to_onnx
    except ImportError:
        raise DataError("format", "'onnx' on a service without skl2onnx",
                        "joblib, or skl2onnx installed (pip install 'ease_jupyter[export]')") from None
    from .onnx_converters import onnx_text_vectorizers, register

    register()
    plain = copy.deepcopy(plain)  # the text steps and string imputers are adjusted for ONNX below
    try:
        options: dict[int, dict[str, Any]] = onnx_text_vectorizers(plain)
    except ValueError as error:
        raise DataError("format", f"'onnx' for a model with the {error}", "joblib for this model") from None
    if classification:
        options[id(plain)] = {"zipmap": False}  # probabilities as a plain (n, k) array
    if inputs.columns:
        _refuse_empty_categories(plain)
        plain = _strings_missing_as_empty(plain)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = to_onnx(plain, initial_types=_onnx_types(inputs), options=options or None)
    except Exception as error:  # noqa: BLE001 - skl2onnx raises many kinds; the user needs its reason
        reason = _reason(error)
        raise DataError("format", f"'onnx' for {_class_path(plain)}, which skl2onnx cannot convert ({reason})",
                        "joblib for this model") from None
    return model


def _refuse_empty_categories(estimator: Any, columns: list[str] | None = None) -> None:
    """DataError naming the column where a fitted encoder's categories hold
    the empty string: the ONNX model reads "" as missing, so that category
    would predict as a missing value does."""
    for _, step in getattr(estimator, "steps", ()):
        _refuse_empty_categories(step, columns)
    for _, transformer, cols in getattr(estimator, "transformers_", ()):
        if not isinstance(transformer, str):
            _refuse_empty_categories(transformer, [str(c) for c in np.atleast_1d(np.asarray(cols, dtype=object))])
    for i, categories in enumerate(getattr(estimator, "categories_", None) or ()):
        if any(isinstance(c, str) and c == "" for c in categories):
            column = columns[i] if columns is not None and i < len(columns) else f"feature {i}"
            raise DataError("format", f"'onnx' for a model whose categorical column {column!r} has the empty "
                                      "string as a category", "joblib for this model (an ONNX string input has no "
                                      "missing value: the empty string stands for one)")


def _tensor_rows(values: Any) -> list[dict[str, Any]]:
    """The card's rows of a graph's inputs or outputs: name, dtype, shape (None for a free dimension)."""
    import onnx

    rows = []
    for value in values:
        tensor = value.type.tensor_type
        dtype = ("string" if tensor.elem_type == onnx.TensorProto.STRING else
                 onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name if tensor.elem_type else None)
        rows.append({"name": value.name, "dtype": dtype,
                     "shape": [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]})
    return rows


def _name_inputs(graph: Any, names: list[str]) -> dict[str, str]:
    """Give the graph's inputs the names the card promises (a table's column
    names, which skl2onnx changes where they are no identifiers or clash
    with an output, e.g. "bill length (mm)", "label"); a tensor already
    holding such a name is renamed first. Returns {new name: old name} of
    the graph outputs so renamed."""
    if len(graph.input) != len(names):
        raise DataError("format", f"'onnx' whose graph has {len(graph.input)} inputs for {len(names)} columns",
                        "joblib for this model")
    renamed: dict[str, str] = {}
    for position, name in enumerate(names):
        current = graph.input[position].name
        if current == name:
            continue
        used = _tensor_names(graph)
        if name in used:  # an output or inner tensor: it moves aside, under a name no column takes
            fresh, n = f"{name}_output", 1
            while fresh in used or fresh in names:
                fresh, n = f"{name}_output{n}", n + 1
            if any(out.name == name for out in graph.output):
                renamed[fresh] = renamed.pop(name, name)
            _rename(graph, name, fresh)
        _rename(graph, current, name)
    return renamed


def _subgraphs(node: Any) -> list[Any]:
    import onnx

    out = []
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            out.append(attribute.g)
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            out.extend(attribute.graphs)
    return out


def _tensor_names(graph: Any) -> set[str]:
    names = {v.name for v in (*graph.input, *graph.output, *graph.value_info, *graph.initializer)}
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
        for inner in _subgraphs(node):
            names |= _tensor_names(inner)
    return names


def _rename(graph: Any, old: str, new: str) -> None:
    """Rename tensor ``old`` to ``new`` everywhere in ``graph`` (subgraphs
    included: they may read the outer graph's tensors)."""
    for value in (*graph.input, *graph.output, *graph.value_info, *graph.initializer):
        if value.name == old:
            value.name = new
    for node in graph.node:
        node.input[:] = [new if name == old else name for name in node.input]
        node.output[:] = [new if name == old else name for name in node.output]
        for inner in _subgraphs(node):
            _rename(inner, old, new)


def _strings_missing_as_empty(estimator: Any) -> Any:
    """ONNX string tensors have no missing value, so a table's ONNX model
    takes the empty string for a missing category or text: its string
    imputers (fitted for NaN) are told to look for "" instead. Their fitted
    fill values stay, so a row predicts as it does with NaN in scikit-learn."""
    from sklearn.impute import SimpleImputer

    if isinstance(estimator, SimpleImputer):
        statistics = getattr(estimator, "statistics_", None)
        if statistics is not None and statistics.dtype == object and _is_nan(estimator.missing_values):
            estimator.missing_values = ""
        return estimator
    for _, step in getattr(estimator, "steps", ()):
        _strings_missing_as_empty(step)
    for _, transformer, _ in getattr(estimator, "transformers_", ()):
        if not isinstance(transformer, str):
            _strings_missing_as_empty(transformer)
    return estimator


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _reason(error: BaseException) -> str:
    """A converter's failure in one line: the innermost cause (the converters
    wrap it in messages that dump whole node attributes)."""
    while (error.__cause__ or error.__context__) is not None:
        error = error.__cause__ or error.__context__
    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(error).__name__}: {first[:200]}" if first else type(error).__name__


# ---------------------------------------------------------------- torch


def torch_artifact(net: Any, example: Any, fmt: str) -> Artifact:
    """An ``nn.Module`` as TorchScript, ONNX or its state dict. ``example``:
    input rows (at least two) of the shape and dtype the net takes, best the
    task's own rows (``task_rows``): the first ``TRACE_ROWS`` are traced, and
    the file is checked against the net on all of them and on batches of
    other sizes (``CHECK_BATCHES``). Tracing records one run of ``forward``:
    a size read with ``len(x)`` becomes a constant, and a branch on the
    input's values keeps the one taken; a file that would answer other
    batches differently is refused (``_check_export``), not shipped."""
    import torch

    check_format(fmt, Engine.TORCH)
    net = net.cpu().eval()
    example = torch.as_tensor(np.asarray(example, dtype=np.float32)).cpu()
    traced_rows = example[:TRACE_ROWS]
    inputs = [{"name": INPUT_NAME, "dtype": "float32", "shape": [None, *example.shape[1:]]}]
    if fmt == "state_dict":
        buffer = io.BytesIO()
        torch.save(net.state_dict(), buffer)
        return Artifact(fmt, buffer.getvalue(), inputs, [{"name": "state_dict",
                        "returns": "the net's parameters and buffers (torch.load(..., weights_only=True))"}])
    if fmt == "torchscript":
        with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # kept: a TracerWarning says why a file may answer wrongly
            traced = torch.jit.trace(net, traced_rows)
            buffer = io.BytesIO()
            torch.jit.save(traced, buffer)
        said = _tracer_warnings(caught)
        _check_export(fmt, net, traced, example, said)
        output = {"name": "output", "shape": _output_shape(net, traced_rows)}
        return Artifact(fmt, buffer.getvalue(), inputs, [{**output, "tracer_warnings": said} if said else output])
    data = _torch_onnx(net, traced_rows)
    inputs = _onnx_batch_free(net, data)
    runner = _onnx_runner(data)
    if runner is not None:
        _check_export(fmt, net, runner, example, [])
    return Artifact(fmt, data, inputs, [])


TRACE_ROWS = 4  # rows traced; torch.export specialises a batch of 1, so at least 2 keep the batch dimension free
CHECK_BATCHES = (3, 1)  # batch sizes besides the traced one (and all the example rows) a file must answer alike
_ADVICE = ("a forward that keeps the batch dimension free and branches on no input value (x.flatten(1) or "
           "x.reshape(x.shape[0], -1), not len(x); torch.where, not if), or the state_dict format")


def _tracer_warnings(caught: list[Any]) -> list[str]:
    """The distinct TracerWarnings of a trace, first lines (the others, such
    as torch.jit's own deprecation notice, say nothing of this net)."""
    import torch

    said = [str(w.message).splitlines()[0] for w in caught if issubclass(w.category, torch.jit.TracerWarning)]
    return list(dict.fromkeys(said))[:5]


def _check_export(fmt: str, net: Any, exported: Any, example: Any, said: list[str]) -> None:
    """Refuse (DataError on ``format``) a file that answers a batch unlike
    the eager net: the traced rows, all ``example`` rows, and batches of
    ``CHECK_BATCHES`` rows. A batch the eager net itself cannot take is not
    the file's fault and is skipped."""
    import torch

    traced = len(example[:TRACE_ROWS])
    sizes = dict.fromkeys(k for k in (traced, len(example), *CHECK_BATCHES) if k <= len(example))
    for size in sizes:
        rows = example[:size]
        with torch.no_grad():
            try:
                want = net(rows).cpu().numpy()
            except Exception:  # noqa: BLE001 - her forward's own limits; infer would fail alike
                continue
            try:
                got = np.asarray(exported(rows))
                problem = None if got.shape == want.shape else f"answers shape {list(got.shape)}"
            except Exception as error:  # noqa: BLE001 - a size baked in fails in many ways
                lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [""]
                cause = lines[-1].removeprefix(f"{type(error).__name__}: ")[:200]  # TorchScript's cause is last
                problem = f"fails ({type(error).__name__}: {cause})"
        if problem is None and not _close(got, want):
            worst = float(np.abs(got - want).max())
            problem = f"answers other outputs than the net (by up to {worst:.3g})"
        if problem is not None:
            what = ("the batch size is fixed: " if size != traced and not problem.startswith("answers other")
                    else "outputs differ: ")
            warned = f"; TracerWarning: {' | '.join(said)}" if said else ""
            raise DataError("format", (
                f"{fmt!r} of {type(net).__name__}: {what}traced on a batch of {traced}, its file {problem} on a "
                f"batch of {size} of the task's rows where the net answers shape {list(want.shape)}{warned}"),
                _ADVICE)


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal up to float32 rounding of a differently fused graph, relative to the outputs' scale."""
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    return bool(np.allclose(got, want, rtol=1e-3, atol=1e-4 * scale))


def _onnx_batch_free(net: Any, data: bytes) -> list[dict[str, Any]]:
    """The card's inputs of an ONNX file, read from its graph; a graph whose
    batch dimension is a number (torch.export made it one where ``forward``
    read it as a Python int, ``len(x)``) is refused."""
    import onnx

    inputs = _tensor_rows(onnx.load_from_string(data).graph.input)
    fixed = [row for row in inputs if row["shape"] and row["shape"][0] is not None]
    if fixed:
        raise DataError("format", (
            f"'onnx' of {type(net).__name__}: the batch size is fixed: the graph's input {fixed[0]['name']!r} has "
            f"shape {fixed[0]['shape']}"), _ADVICE)
    return inputs


def _onnx_runner(data: bytes) -> Any:
    """A function of a batch that runs the ONNX file with onnxruntime; None
    where the service has no onnxruntime (it needs only onnx to export):
    its graph's free batch dimension is then all that is checked."""
    try:
        import onnxruntime
    except ImportError:
        return None
    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda rows: session.run(None, {name: rows.numpy()})[0]


def _output_shape(net: Any, example: Any) -> list[Any]:
    import torch

    with torch.no_grad():
        out = net(example)
    return [None, *out.shape[1:]]


def _torch_onnx(net: Any, example: Any) -> bytes:
    import torch

    batch = torch.export.Dim("batch")
    try:
        with warnings.catch_warnings(), _quiet():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(net, (example,), dynamo=True, input_names=[INPUT_NAME],
                                        output_names=["output"], dynamic_shapes=({0: batch},), verbose=False)
    except Exception as error:  # noqa: BLE001 - torch.export's failures are many; the user needs the reason
        reason = _reason(error)
        raise DataError("format", f"'onnx' for {type(net).__name__}, which torch.onnx cannot export ({reason})",
                        "torchscript or state_dict for this model") from None
    return program.model_proto.SerializeToString()


@contextlib.contextmanager
def _quiet():
    """torch.onnx prints its progress to stdout and logs what it skips (the
    operators of libraries not installed); a worker's output is the service's log."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
            yield
    finally:
        logger.setLevel(level)


def with_onnx_outputs(artifact: Artifact) -> Artifact:
    """The card's outputs of an ONNX file, read from its graph, with what
    the conversion said of each."""
    if artifact.format != "onnx":
        return artifact
    import onnx

    graph = onnx.load_from_string(artifact.data).graph
    said = {row["name"]: row for row in artifact.outputs}  # what the conversion added (what a column holds)
    outputs = [{**said.get(row["name"], {}), **row} for row in _tensor_rows(graph.output)]
    return Artifact(artifact.format, artifact.data, artifact.inputs, outputs, artifact.preprocessing)


# ---------------------------------------------------------------- a task's best model


EXAMPLE_ROWS = 64  # the task's rows a torch export is traced on (the first TRACE_ROWS) and checked against
MIN_EXAMPLE_ROWS = 8  # fewer real rows are topped up with random ones in their range
READ_ROWS = 8 * EXAMPLE_ROWS  # rows read for them: enough for EXAMPLE_ROWS validation rows, as a rule


def torch_example(program: Any, X: Any = None) -> np.ndarray:
    """Rows to trace a net of a task whose input is one tensor on, and to
    check its file against: up to ``EXAMPLE_ROWS`` of the task's own rows
    ``X`` (a forward that branches on its input's values takes the branch
    it takes on real data, which zeros may not), topped up to
    ``MIN_EXAMPLE_ROWS`` with random rows in their range ([0, 1] without rows)."""
    tensors = program.input.tensors
    if len(tensors) != 1 or program.input.recursive:
        raise DataError("format", "a torch format for a task whose input is not one tensor",
                        "a task with one input tensor (export the state_dict of others)")
    shape = tuple(tensors[0].shape)
    rows = np.zeros((0, *shape), dtype=np.float32) if X is None else np.asarray(X, dtype=np.float32)[:EXAMPLE_ROWS]
    if len(rows) >= MIN_EXAMPLE_ROWS:
        return rows
    finite = rows[np.isfinite(rows)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    extra = np.random.default_rng(0).uniform(low, high, (MIN_EXAMPLE_ROWS - len(rows), *shape))
    return np.concatenate([rows, extra.astype(np.float32)])


def task_rows(store: Any, blobs: Any, job: Any) -> Any:
    """Input rows of the dataset version ``job`` trained on, validation rows
    first, read from its first feed chunks only (``READ_ROWS`` rows or more:
    about a fifth of them are validation rows); None where they are no one
    array or cannot be read."""
    from ..datasets import load_first
    from ..errors import StorageError
    from ..execution.holdout import validation_mask

    try:
        data = load_first(store, blobs, store.get_dataset_version(job.dataset_version_id), READ_ROWS)
    except StorageError:
        return None
    if not isinstance(data.X, np.ndarray) or not len(data.X):
        return None
    held_out = validation_mask(data.split_keys)
    return np.concatenate([data.X[held_out][:EXAMPLE_ROWS], data.X[~held_out][:EXAMPLE_ROWS]])


def torch_artifact_of(store: Any, blobs: Any, task_id: int, job_id: int, fmt: str,
                      deadline: Any = None) -> Artifact:
    """``torch_artifact`` of a torch job's best checkpoint, by ids, traced on
    and checked against the rows it trained on: what the torch executor's
    ``call`` runs where the torch jobs run (a user's own net by
    ``deadline``, ``own_model_calls.request_deadline``)."""
    from ..datasets import program_of
    from ..jobspec import parse_job
    from . import models, user_models

    task, job = store.get_task(task_id), store.get_job(job_id)
    program = program_of(task)
    example = (_state_dict_example(program) if fmt == "state_dict" else
               torch_example(program, task_rows(store, blobs, job)))
    if parse_job(job.model, job.config).is_user_model:  # her module, built and traced in a child within her limit
        from .own_model_calls import own_net_artifact_of

        return own_net_artifact_of(store, blobs, task_id, job_id, fmt, example, deadline)
    net = user_models.plain_module(models.torch_net(store, blobs, task, job))
    return with_onnx_outputs(torch_artifact(net, example, fmt))


def _state_dict_example(program: Any) -> np.ndarray:
    """The card's input shape of a state dict (any task input: no tracing)."""
    tensors = program.input.tensors
    shape = tensors[0].shape if len(tensors) == 1 and not program.input.recursive else ()
    return np.zeros((2, *shape), dtype=np.float32)


def sklearn_inputs(store: Any, task: Any) -> SklearnInputs:
    """The inputs of a task's scikit-learn models: its table's columns, or
    its input tensor flattened."""
    from ..datasets import program_of
    from .task_schema import table_schema

    schema = table_schema(store, task)
    if schema is not None:
        return SklearnInputs(columns=tuple((c.name, c.kind.value) for c in schema.columns))
    return SklearnInputs(n_features=int(np.prod(program_of(task).input.tensors[0].shape)))


def sklearn_artifact_from(data: bytes, fmt: str, inputs: SklearnInputs, classification: bool) -> Artifact:
    """``sklearn_artifact`` of a zoo job's stored model (``data``, its pickle):
    what an export process runs (``export_processes.py``), given the bytes,
    so that it opens no store."""
    return with_onnx_outputs(sklearn_artifact(pickle.loads(data), fmt, inputs, classification))


def sklearn_artifact_of(store: Any, blobs: Any, task_id: int, job_id: int, fmt: str,
                        processes: Any = None, wait: float | None = None) -> Artifact:
    """``sklearn_artifact`` of a zoo scikit-learn job's fitted model, by ids,
    unpickled and converted in one of ``processes``
    (``export_processes.ExportProcesses``) within ``wait`` seconds, or here
    where there are none. Her own models go to ``own_model_calls.own_artifact_of``."""
    from ..datasets import program_of
    from . import models

    task, job = store.get_task(task_id), store.get_job(job_id)
    args = (models.read_model(blobs, task, job), fmt, sklearn_inputs(store, task),
            program_of(task).num_classes is not None)
    if processes is None:
        return sklearn_artifact_from(*args)
    try:
        return processes.run(sklearn_artifact_from, *args, wait=wait)
    except ExportProcessTimeout as error:
        what = (f"was still converting after the {wait:g} s the service waits; the conversion was stopped and "
                "its process ended" if error.started else f"found no free export process within the {wait:g} s "
                "the service waits (other exports were converting); it did not start")
        raise UserModelCallTimeout(f"{job.model}.export", (
            f"task {task.name!r}: exporting as {fmt} its best model (job {job.id}, {job.model}) {what}; try "
            "again")) from None
    except ExportProcessDied as error:
        raise UserModelCallError(f"{job.model}.export", (
            f"task {task.name!r}: exporting as {fmt} its best model (job {job.id}, {job.model}): the process "
            f"converting it ended before it answered ({error.how}); a fresh process takes "
            "the next export; try again")) from None


def waited_where_jobs_run(future: Any, task: Any, job: Any, doing: str, wait_seconds: float | None) -> Any:
    """What a call where the jobs run gives, waited for at most
    ``wait_seconds`` (``doing``: what it does with the job's model, in words).
    A wait that runs out (every worker busy, or slow work) is the request's
    typed timeout naming the task and the wait, not the service's error; the
    call is cancelled, so that if still queued it never runs."""
    try:
        return future.result(wait_seconds)
    except concurrent.futures.TimeoutError:  # the builtin TimeoutError from Python 3.11 on
        future.cancel()
        raise UserModelCallTimeout(f"{job.model}.{doing.split()[0]}", (
            f"task {task.name!r}: {doing} with its best model (job {job.id}, {job.model}) got no answer from "
            f"where the jobs run within the {wait_seconds:g} s the service waits; the call was cancelled if it "
            "had not started (the workers may be busy); try again")) from None


def export_best(store: Any, blobs: Any, task: Any, fmt: str | None, torch_executor: Any = None,
                timeout: float | None = None, sklearn_executor: Any = None,
                export_processes: Any = None) -> tuple[str, bytes]:
    """(file name, zip bundle) of the task's best model in ``fmt`` (default:
    its engine's first format), with its model card. A torch model is
    converted on ``torch_executor`` (its ``call``) when there is one, and a
    user's own scikit-learn model on ``sklearn_executor``: her code is
    unpickled where the jobs run, not here. A zoo scikit-learn model is
    converted in ``export_processes`` (``export_processes.ExportProcesses``)
    when there are some, not on the training workers, where it would wait
    for a job to end.

    Raises DataError (``format``), NoModelError (no finished model),
    UserModelCallTimeout (no artifact from where the jobs run, or from the
    export processes, within ``timeout``), UserModelCallError (the export
    process converting it died)."""
    from ..jobspec import parse_job
    from . import models
    from .model_card import model_card
    from .suspicion import NoModelError

    if fmt is not None:
        check_format(fmt)
    job = models.best_job(store, task)
    if job is None or job.artifact_blob is None:
        raise NoModelError(f"task {task.name!r} has no trained model to export yet; wait for a job to finish "
                           f"(task.wait()) and export again")
    from .own_model_calls import own_artifact_of, request_deadline, waited

    spec = parse_job(job.model, job.config)
    engine = spec.engine
    fmt = check_format(FORMATS[engine][0] if fmt is None else fmt, engine, f"{ENGINE_WORDS[engine]} ({job.model})")
    # her code's deadline, fixed as the request arrives and ending before the wait for it does
    deadline = request_deadline(job, timeout if torch_executor or sklearn_executor else None)
    if engine is Engine.TORCH:
        if torch_executor is None:
            artifact = torch_artifact_of(store, blobs, task.id, job.id, fmt, deadline)
        elif spec.is_user_model:
            artifact = waited(torch_executor.call(torch_artifact_of, task.id, job.id, fmt, deadline), job, timeout)
        else:
            artifact = waited_where_jobs_run(torch_executor.call(torch_artifact_of, task.id, job.id, fmt), task, job,
                                             f"exporting as {fmt}", timeout)
    elif spec.is_user_model:  # her code: in a child killed at her model's time limit (``own_model_calls``)
        if sklearn_executor is None:
            artifact = own_artifact_of(store, blobs, task.id, job.id, fmt, deadline)
        else:
            artifact = waited(sklearn_executor.call(own_artifact_of, task.id, job.id, fmt, deadline), job, timeout)
    else:  # a zoo model: unpickled and converted in an export process, when the service has them
        artifact = sklearn_artifact_of(store, blobs, task.id, job.id, fmt, export_processes, timeout)
    card = model_card(store, blobs, task, job, artifact)
    name = f"{task.name}-job{job.id}{SUFFIXES[fmt]}"
    return name, pack(artifact.file_name, artifact.data, card)
