"""The client's half of a user's own model (``task.add_model``): what it
is, its grid and name checked where the object is, and the object pickled
with cloudpickle for ``POST /api/v1/tasks/{name}/models``.

What can be added (``service/user_models.py`` runs it):

* a scikit-learn-compatible estimator or pipeline (anything with ``fit`` and
  ``predict``); the grid's keys are its own options (``C``, ``svc__C`` for a
  pipeline step), set with ``set_params``;
* a function (or class) ``factory(input_shape, output_shape, **options)``
  that returns a torch ``nn.Module`` for one example's shapes (the task's,
  without the batch axis): the module maps a float32 batch ``(n, *input_shape)``
  to ``(n, *output_shape)``, logits for classification. The grid's ``lr``
  (default 0.1, 0.01, 0.001) is SGD's rate; its other keys are passed to the
  factory, except the training options ``batch_size``, ``momentum``,
  ``weight_decay`` and ``clip``.

Classes and functions defined in the notebook (``__main__``) or in a module
that is not installed (a ``.py`` file beside the notebook) are pickled by
value (``cloudpickle.register_pickle_by_value``): the workers need only the
installed packages.
"""

from __future__ import annotations

import base64
import re
import sys
import sysconfig
from pathlib import Path
from typing import Any, Mapping

from .errors import DataError
from .jobspec import check_user_grid

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def kind_of(model: Any) -> str:
    """``"estimator"`` or ``"factory"``; a ``DataError`` naming ``model`` for anything else."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(model, torch.nn.Module):
        raise DataError("model", f"a {type(model).__name__} instance",
                        "a function that builds it: factory(input_shape, output_shape, **options)")
    if hasattr(model, "fit") and hasattr(model, "predict") and not isinstance(model, type):
        return "estimator"
    if callable(model):
        return "factory"
    raise DataError("model", type(model).__name__, "a scikit-learn estimator (fit and predict) or a function "
                    "that builds a torch nn.Module: factory(input_shape, output_shape, **options)")


def default_name(model: Any, kind: str) -> str:
    """The object's own name, made to fit the name rule: ``pipeline``, ``make_net``."""
    raw = getattr(model, "__name__", None) if kind == "factory" else type(model).__name__
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(raw or "model")).strip("._")[:64].lower()
    return name or "model"


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name or name == ".":
        raise DataError("name", repr(name), "1-64 characters from A-Z a-z 0-9 _ . - (and no '..')")
    return name


def _installed(module_name: str) -> bool:
    """Whether workers can import the module by name: the standard library
    and installed packages (site-packages), ease_jupyter included."""
    module = sys.modules.get(module_name.split(".")[0])
    path = getattr(module, "__file__", None)
    if module is None or path is None:
        return module is not None  # built-in
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    root_pkg = module_name.split(".")[0]
    if root_pkg == "ease_jupyter":
        return True
    resolved = Path(path).resolve()
    return any(resolved.is_relative_to(Path(r).resolve()) for r in roots)


def _local_modules(model: Any) -> set[str]:
    """Modules of the object's classes and functions that workers could not import."""
    seen: set[str] = set()
    parts = [model]
    get_params = getattr(model, "get_params", None)
    if callable(get_params):
        try:
            parts += list(get_params(deep=True).values())
        except Exception:  # noqa: BLE001 - an estimator whose params cannot be listed: its own class only
            pass
    for part in parts:
        for owner in (part, type(part)):
            name = getattr(owner, "__module__", None)
            if isinstance(name, str) and name != "__main__" and name in sys.modules and not _installed(name):
                seen.add(name.split(".")[0])
    return seen


def dumps(model: Any) -> bytes:
    """cloudpickle of ``model``, with its local modules by value."""
    import cloudpickle

    local = [sys.modules[m] for m in _local_modules(model)]
    for module in local:
        cloudpickle.register_pickle_by_value(module)
    try:
        return cloudpickle.dumps(model)
    finally:
        for module in local:
            cloudpickle.unregister_pickle_by_value(module)


def request_body(model: Any, grid: Mapping[str, Any] | None, name: str | None, limit: float | None) -> dict[str, Any]:
    """The JSON body of ``POST /tasks/{name}/models``; a ``DataError`` naming the field on bad input."""
    kind = kind_of(model)
    checked = check_user_grid(grid, kind)
    name = check_name(name if name is not None else default_name(model, kind))
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float)) or not limit > 0):
        raise DataError("limit", repr(limit), "a positive number of seconds")
    owner = model if kind == "factory" else type(model)
    described = f"{getattr(owner, '__module__', '?')}.{getattr(owner, '__qualname__', type(model).__name__)}"
    body: dict[str, Any] = {"name": name, "kind": kind, "grid": checked, "described": described,
                            "code": base64.b64encode(dumps(model)).decode("ascii")}
    if limit is not None:
        body["limit"] = float(limit)
    return body
