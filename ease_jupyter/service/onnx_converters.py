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


def register() -> None:
    """Teach skl2onnx the converters above, and mend its boolean attributes (once per process)."""
    global _registered
    if _registered:
        return
    from sklearn.compose import TransformedTargetRegressor
    from skl2onnx import update_registered_converter
    from skl2onnx.common._container import ModelComponentContainer

    update_registered_converter(TransformedTargetRegressor, "EasemlTransformedTargetRegressor", _shape, _convert)
    ModelComponentContainer.add_node = _ints_for_bools(ModelComponentContainer.add_node)
    _registered = True
