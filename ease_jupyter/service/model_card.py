"""The model card that travels with every exported model (JSON).

After Mitchell et al., "Model Cards for Model Reporting" (FAT* 2019): what
the model takes and returns, what data it was trained and validated on, how
well it did, and where it came from. Here that is the task's schema (its
ease.ml program, and its table schema for a table task), the class names,
the preprocessing inside the model and what is done to inputs before the
model sees them (how the client reads image files, for a task fed them;
the range of values trained on, how it spells a table's categories), the
job's metrics with the size of the validation split they were measured
on, the dataset version, the training config, and the provenance ids
(the job, the dataset version, and the feed/refine/train edges that lead
to the model), so that the model can be traced back to its rows in the
service's store.
"""

from __future__ import annotations

import datetime
import json
from typing import Any, Iterable, Mapping

import numpy as np

from ..datasets import load, program_of
from ..errors import StoreCorruptError
from ..jobspec import best_point, parse_job, recorded_point
from ..schema.scores import TITLES, score_key
from ..store import BlobStore, Job, Metric, Node, NodeKind, Store, Task
from .validation import validation_size

CARD_VERSION = 1
# The most input numbers the card reads for its "values seen in training":
# the card is made in the service's process, which must not load a large
# dataset version whole for one line of it (2**25 float32 values: 128 MiB).
RANGE_MAX_VALUES = 2**25


def model_card(store: Store, blobs: BlobStore, task: Task, job: Job, artifact: Any) -> dict[str, Any]:
    """The card of ``job``'s model exported as ``artifact`` (``export.Artifact``)."""
    from .task_schema import class_names, table_schema

    program = program_of(task)
    version = store.get_dataset_version(job.dataset_version_id)
    schema = table_schema(store, task)
    classification = program.num_classes is not None
    names = class_names(store, task) if classification else None
    metrics = store.list_metrics(job.id)
    return {
        "card_version": CARD_VERSION,
        "created_at": _now(),
        "format": artifact.format,
        "file": artifact.file_name,
        "engine": parse_job(job.model, job.config).engine.value,
        "task": {"name": task.name, "id": task.id, "program": task.program,
                 "table_schema": None if schema is None else schema.to_dict()},
        "kind": "classification" if classification else "regression",
        "class_names": names,
        "num_classes": program.num_classes,
        "inputs": artifact.inputs,
        "outputs": _named_columns(artifact.outputs, names),
        "preprocessing": artifact.preprocessing,
        "input_preprocessing": (table_input_preprocessing(schema, artifact.format) if schema is not None
                                else input_preprocessing(store, blobs, task, version)),
        "metrics": {
            "name": TITLES[score_key(program)],
            "value": job.accuracy,
            "on": "validation",
            "validation_size": validation_size(store, blobs, version),
            "last": _last_epoch(metrics),
        },
        "dataset": {"version": version.number, "version_id": version.id, "kind": version.kind.value,
                    "n_examples": version.n_examples, "created_at": _iso(version.created_at)},
        "training": {"model": job.model, "config": dict(job.config),
                     "best_config": best_config(store.tags("job", job.id), metrics),
                     "cost_seconds": job.cost_seconds, "attempts": job.attempts,
                     "started_at": _iso(job.started_at), "finished_at": _iso(job.finished_at)},
        "provenance": {"job_id": job.id, "dataset_version_id": version.id,
                       "edge_ids": [e.id for e in store.lineage(Node(NodeKind.MODEL, job.id), direction="backward")]},
    }


IMAGE_FILES = {
    "step": "image files",
    "where": "the client, before the service (task.feed of an image folder, task.infer of image files)",
    "does": ("Pillow: turned upright (EXIF orientation); an image with transparency laid on opaque white; "
             "RGB for an input [H, W, 3], grey (mode 'L') for [H, W] or [H, W, 1]; resized to W x H; float32 "
             "scaled to [0, 1] (8-bit pixels / 255, deeper images by their format's white)"),
    "feed_the_file": "the same: values in [0, 1], not raw 0-255 pixels",
}


def table_input_preprocessing(schema: Any, fmt: str) -> list[dict[str, Any]]:
    """How the client spells a table's categorical and text values before
    the model sees them (``zoo.preprocess.category_text``, and NFC): a file
    fed a number where it learnt its text answers as for an unseen category,
    without an error. A joblib file spells numbers so itself; an ONNX graph
    takes strings, which must be spelled so."""
    from ..schema.table import ColumnKind

    columns = [c.name for c in schema.columns if c.kind in (ColumnKind.CATEGORICAL, ColumnKind.TEXT)]
    if not columns:
        return []
    joblib = fmt == "joblib"
    return [{
        "step": "category text",
        "where": ("the client, before the service (task.feed, task.infer); the file's own first step of each "
                  "categorical or text column group (category_text) spells numbers so too" if joblib
                  else "the client, before the service (task.feed, task.infer)"),
        "applies_to": columns,
        "does": ("each value as the text it stands for: a whole number as its integer's digits ('8000' for 8000 "
                 "and for 8000.0, in an int, float, category or object column alike), any other value as "
                 "Python's str ('0.5', 'True', text as it is), in Unicode NFC; a missing value stays missing"),
        "feed_the_file": ("the DataFrame as you have it (numbers too): the file spells them itself; text as given, "
                          "so in NFC (unicodedata.normalize('NFC', s))" if joblib
                          else "strings spelled so: '8000', not '8000.0'; '0.5'; 'True'; '' for a missing value; "
                               "text in NFC (unicodedata.normalize('NFC', s))"),
    }]


def input_preprocessing(store: Store, blobs: BlobStore, task: Task, version: Any) -> list[dict[str, Any]]:
    """What happens to inputs before they reach the model, outside its file
    (the card's ``preprocessing`` is what is inside): a user feeding the
    file must do the same, or it answers wrongly without an error. For a
    task fed image files (an image folder: the service recorded it,
    ``task_schema.fed_image_files``), how the client reads them; a task of
    an image's shape fed arrays gets no such step, its file takes what
    the arrays held. For every array task, the range of the values the
    model was trained on, so that a file fed raw pixels where it saw
    [0, 1] can be told from the card."""
    from .task_schema import fed_image_files

    program = program_of(task)
    tensors = program.input.tensors
    if len(tensors) != 1 or program.input.recursive:
        return []
    shape = tuple(tensors[0].shape)
    steps = [IMAGE_FILES] if fed_image_files(store.tags("task", task.id)) else []
    if version.n_examples * int(np.prod(shape)) > RANGE_MAX_VALUES:
        steps.append({"step": "values seen in training", "min": None, "max": None,
                      "note": f"not read: more than {RANGE_MAX_VALUES} input values"})
        return steps
    try:
        X = load(store, blobs, version).X
    except StoreCorruptError:  # a lost or damaged blob (``easeml fsck``): the model itself is intact
        steps.append({"step": "values seen in training", "min": None, "max": None,
                      "note": "not read: examples of this version are missing or damaged"})
        return steps
    finite = X[np.isfinite(X)] if isinstance(X, np.ndarray) and np.issubdtype(X.dtype, np.number) else ()
    if len(finite):
        steps.append({"step": "values seen in training", "min": float(finite.min()), "max": float(finite.max())})
    return steps


def best_config(tags: Mapping[str, str], metrics: Iterable[Metric]) -> str | None:
    """The label of the config whose model the job stored (``C=1``,
    ``lr=0.01``), from its record (the grid's best tag, a torch job's best
    trial); from its per-config scores only where it has no record."""
    from .models import BEST_TRIAL_TAG
    from .runner import GRID_BEST_TAG

    for tag in (GRID_BEST_TAG, BEST_TRIAL_TAG):
        try:
            point = recorded_point(json.loads(tags[tag])) if tag in tags else None
        except ValueError:
            point = None
        if point is not None:
            return point
    return best_point([{m.name: m.value} for m in metrics])


def _named_columns(outputs: list[dict[str, Any]], names: list[Any] | None) -> list[dict[str, Any]]:
    """The outputs, each with per-class columns (class indices) also given
    by class name where the task names its classes."""
    if not names:
        return outputs
    out = []
    for row in outputs:
        columns = row.get("columns")
        if isinstance(columns, list) and all(isinstance(c, int) and 0 <= c < len(names) for c in columns):
            row = {**row, "column_names": [names[c] for c in columns]}
        out.append(row)
    return out


def _last_epoch(metrics: Any) -> dict[str, float]:
    """The job's metrics of its last epoch (a scikit-learn grid has one, epoch 0)."""
    if not metrics:
        return {}
    last = max(m.epoch for m in metrics)
    return {m.name: m.value for m in metrics if m.epoch == last}


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat()


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
