"""How many epochs a task's torch picks train: the task's own ``max_epochs``
if its owner set one, else the service's ``--torch-epochs`` if the operator
set one, else the zoo's rule by data size (``zoo.default_max_epochs``).

It is the most epochs of the pick's successive halving
(``execution.automl.pick_procedure``): the pick's best config trains that
many, the others stop at a rung. The task's setting is its tag
``easeml.max_epochs`` (the ``easeml.`` prefix is reserved, so only
:func:`set_max_epochs` writes it).
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any

from ..errors import DataError
from ..jobspec import JobSpec, TorchWorkload
from ..store import Store
from ..zoo.templates import LARGEST_EPOCHS as LARGEST
from ..zoo.templates import default_max_epochs

MAX_EPOCHS_TAG = "easeml.max_epochs"


def check_max_epochs(value: Any, field: str = "max_epochs") -> int | None:
    """An integer from 1 to :data:`LARGEST`, or None (the default rule)."""
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON has one number type: 12.0 is the integer 12
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 1 <= value <= LARGEST:
        raise DataError(field, f"{value!r} ({type(value).__name__})",
                        f"an integer from 1 to {LARGEST}, or null for the default by data size")
    return int(value)


def task_max_epochs(store: Store, task_id: int) -> int | None:
    """The task's own setting, or None."""
    text = store.tags("task", task_id).get(MAX_EPOCHS_TAG, "")
    return int(text) if text else None


def set_max_epochs(store: Store, task_id: int, value: Any) -> int | None:
    """Check and store the task's ``max_epochs`` (None: back to the default)."""
    value = check_max_epochs(value)
    store.set_tag("task", task_id, MAX_EPOCHS_TAG, "" if value is None else str(value))
    return value


def pick_epochs(own: int | None, service_default: int | None, n_examples: int) -> int:
    """The epochs a pick trains (see the module docstring)."""
    if own is not None:
        return own
    if service_default is not None:
        return service_default
    return default_max_epochs(max(1, int(n_examples)))


def describe(own: int | None, service_default: int | None, n_examples: int | None) -> dict[str, Any]:
    """What ``GET /tasks/{name}/budget`` says: the setting, the epochs a pick
    would train now (None before any data, with no setting) and where they come from."""
    source = "task" if own is not None else "service" if service_default is not None else "data size"
    epochs = None
    if own is not None or service_default is not None or n_examples:
        epochs = pick_epochs(own, service_default, n_examples or 1)
    return {"max_epochs": own, "epochs": epochs, "source": source, "examples": n_examples}


def with_epochs(spec: JobSpec, epochs: int) -> JobSpec:
    """A torch pick's spec with its epochs; other specs as they are."""
    if isinstance(spec, TorchWorkload) and spec.epochs != epochs:
        return dataclasses.replace(spec, epochs=int(epochs))
    return spec
