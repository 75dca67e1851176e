"""skl2onnx converters for what the zoo builds and skl2onnx lacks.

The zoo's ridge, SVR, k-NN and MLP regressors standardise their target
(``TransformedTargetRegressor`` with a ``StandardScaler``: ``zoo/estimators.py``).
Its prediction is the inner regressor's, scaled back: ``y * scale + mean``,
so the ONNX graph is the inner regressor's graph followed by a Mul and an Add.
Any other target transformer stays unconverted (a named error in ``export``).

skl2onnx's histogram gradient boosting converter passes the trees'
missing-value directions as booleans where ONNX wants an integer list
(``nodes_missing_value_tracks_true``), which onnx refuses with scikit-learn
1.9's trees; :func:`_ints_for_bools` turns such lists into the 0/1 integers
they stand for.

A table's categorical and text columns first go through the zoo's
``missing_as_nan`` (``FunctionTransformer``: None as NaN in a DataFrame);
an ONNX string tensor holds neither, so its graph is the identity.

A table's text column is imputed, flattened (``FunctionTransformer(np.ravel)``,
which skl2onnx converts only without a function: here the identity on the
one-column string input its TF-IDF converter takes) and vectorised with the
zoo's rules (``zoo/preprocess.py``): ASCII-only lowercasing and a token
pattern whose RE2 reading equals Python's. skl2onnx refuses a vectorizer's
custom preprocessor, so :func:`onnx_text_vectorizers` swaps the zoo's
ASCII lowercaser for ``lowercase=True`` with onnxruntime's ``StringNormalizer``
in the "C" locale, which lowercases A-Z only and leaves other bytes as they
are: the same function. Any other vectorizer would tokenise or fold case
differently in onnxruntime, and is refused by name.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_registered = False


def _shape(operator: Any) -> None:
    from skl2onnx.common.data_types import FloatTensorType

    n = operator.inputs[0].get_first_dimension()
    targets = getattr(operator.raw_operator.transformer_, "n_features_in_", 1)
    operator.outputs[0].type = FloatTensorType([n, targets])


def _convert(scope: Any, operator: Any, container: Any) -> None:
    from sklearn.preprocessing import StandardScaler
    from skl2onnx.algebra.onnx_ops import OnnxAdd, OnnxMul, OnnxReshape
    from skl2onnx.algebra.onnx_operator import OnnxSubEstimator

    model, opv = operator.raw_operator, container.target_opset
    scaler = model.transformer_
    if type(scaler) is not StandardScaler:
        raise NotImplementedError(f"a target transformer {type(scaler).__name__}, not a StandardScaler")
    scale = (scaler.scale_ if scaler.scale_ is not None else np.ones(scaler.n_features_in_)).astype(np.float32)
    mean = (scaler.mean_ if scaler.mean_ is not None else np.zeros(scaler.n_features_in_)).astype(np.float32)
    inner = OnnxSubEstimator(model.regressor_, operator.inputs[0], op_version=opv)
    flat = OnnxReshape(inner, np.array([-1, scale.size], dtype=np.int64), op_version=opv)
    out = OnnxAdd(OnnxMul(flat, scale, op_version=opv), mean, op_version=opv,
                  output_names=operator.outputs[:1])
    out.add_to(scope, container)


def _ints_for_bools(add_node: Any) -> Any:
    """``ModelComponentContainer.add_node`` with boolean (or mixed 0/1 and
    boolean) list attributes given as integers."""

    def add(self: Any, op_type: str, inputs: Any, outputs: Any, *args: Any, **attrs: Any) -> Any:
        for key, value in attrs.items():
            values = value.tolist() if isinstance(value, np.ndarray) else value
            if (isinstance(values, list) and any(isinstance(v, (bool, np.bool_)) for v in values)
                    and all(isinstance(v, (bool, int, np.bool_, np.integer)) for v in values)):
                attrs[key] = [int(v) for v in values]
        return add_node(self, op_type, inputs, outputs, *args, **attrs)

    return add


# skl2onnx's own FunctionTransformer converter (the identity, func=None), kept for that case
_identity: dict[str, Any] = {}


def _is_missing_as_nan(func: Any) -> bool:
    """One of the string groups' missing-value steps (``as_objects``,
    ``missing_as_nan``): no-ops on the ONNX graph's string inputs."""
    from ease_jupyter.zoo.preprocess import as_objects, missing_as_nan

    return repr(func) in (repr(missing_as_nan()), repr(as_objects()))


def _flatten_shape(operator: Any) -> None:
    if operator.raw_operator.func is None:
        return _identity["shape"](operator)
    source = operator.inputs[0].type
    if _is_missing_as_nan(operator.raw_operator.func):
        operator.outputs[0].type = type(source)(list(source.shape))
        return None
    if len(source.shape) != 2 or source.shape[1] != 1:
        raise NotImplementedError(f"FunctionTransformer(np.ravel) of a {source.shape} input, not one column")
    operator.outputs[0].type = type(source)(list(source.shape))


def _flatten_parser(scope: Any, model: Any, inputs: Any, custom_parsers: Any = None) -> Any:
    """skl2onnx's parse of a FunctionTransformer, but with the output of
    ``missing_as_nan`` declared of its input's type (strings): the steps
    after it declare theirs from it before any shape is computed."""
    from skl2onnx._parse import _get_sklearn_operator_name, _parse_sklearn_simple_model

    if not _is_missing_as_nan(model.func):
        return _parse_sklearn_simple_model(scope, model, inputs, custom_parsers=custom_parsers)
    operator = scope.declare_local_operator(_get_sklearn_operator_name(type(model)), model)
    operator.inputs = inputs
    operator.outputs.append(scope.declare_local_variable("variable", type(inputs[0].type)()))
    return operator.outputs


def _flatten_convert(scope: Any, operator: Any, container: Any) -> None:
    from skl2onnx.common._apply_operation import apply_identity

    func = operator.raw_operator.func
    if func is None:
        return _identity["convert"](scope, operator, container)
    if func is not np.ravel and not _is_missing_as_nan(func):
        raise NotImplementedError(f"FunctionTransformer({getattr(func, '__name__', func)!r}), which has no ONNX form")
    apply_identity(scope, operator.inputs[0].full_name, operator.outputs[0].full_name, container)


def onnx_text_vectorizers(estimator: Any) -> dict[int, dict[str, str]]:
    """Make ``estimator``'s (a copy's) text vectorizers convertible, in
    place: each must be the zoo's (ASCII lowercasing, ``TEXT_TOKEN_PATTERN``,
    single words); its lowercaser becomes ``lowercase=True``. Returns the
    skl2onnx options that put their ``StringNormalizer`` in the "C" locale.
    ``ValueError`` naming the step and what differs for any other."""
    from sklearn.feature_extraction.text import CountVectorizer

    from ease_jupyter.zoo.preprocess import TEXT_TOKEN_PATTERN, ascii_lowercase

    options: dict[int, dict[str, str]] = {}
    for name, step in _steps(estimator, "model"):
        if not isinstance(step, CountVectorizer):
            continue
        ascii_lower = repr(step.preprocessor) == repr(ascii_lowercase())
        found = {"preprocessor": "ascii_lowercase" if ascii_lower else repr(step.preprocessor)[:60],
                 "lowercase": step.lowercase,
                 "token_pattern": step.token_pattern, "analyzer": step.analyzer, "tokenizer": step.tokenizer,
                 "ngram_range": tuple(step.ngram_range), "strip_accents": step.strip_accents,
                 "stop_words": step.stop_words}
        wanted = {"preprocessor": "ascii_lowercase", "lowercase": False, "token_pattern": TEXT_TOKEN_PATTERN,
                  "analyzer": "word", "tokenizer": None, "ngram_range": (1, 1), "strip_accents": None,
                  "stop_words": None}
        differs = [key for key in wanted if found[key] != wanted[key]]
        if differs:
            key = differs[0]
            raise ValueError(f"text step {name!r} ({key}={found[key]!r}, not the zoo's {wanted[key]!r}: "
                             "onnxruntime would split or lowercase its text differently)")
        step.preprocessor, step.lowercase = None, True
        options[id(step)] = {"locale": "C"}
    return options


def _steps(estimator: Any, name: str) -> Any:
    """(name, step) for ``estimator`` and every step inside it (pipelines, column transformers)."""
    yield name, estimator
    for inner_name, step in getattr(estimator, "steps", ()):
        yield from _steps(step, inner_name)
    for inner_name, transformer, _ in getattr(estimator, "transformers_", ()):
        if not isinstance(transformer, str):
            yield from _steps(transformer, inner_name)


def register() -> None:
    """Teach skl2onnx the converters above, and mend its boolean attributes (once per process)."""
    global _registered
    if _registered:
        return
    from skl2onnx import update_registered_converter
    from skl2onnx.common._container import ModelComponentContainer
    from skl2onnx.common._registration import get_converter, get_shape_calculator
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.preprocessing import FunctionTransformer

    update_registered_converter(TransformedTargetRegressor, "EasemlTransformedTargetRegressor", _shape, _convert)
    _identity.update(shape=get_shape_calculator("SklearnFunctionTransformer"),
                     convert=get_converter("SklearnFunctionTransformer"))
    update_registered_converter(FunctionTransformer, "EasemlFunctionTransformer", _flatten_shape, _flatten_convert,
                                parser=_flatten_parser)
    ModelComponentContainer.add_node = _ints_for_bools(ModelComponentContainer.add_node)
    _registered = True
