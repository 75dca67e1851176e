"""The data-refine panel: page through a dataset version, turn examples off
and on, filter by label, sort by how suspicious they look, save a new version.

Paging happens in Python: the browser only ever receives the current page's
rows (already rendered: PNG thumbnails, SVG sparklines or table cells), so a
version of 50,000 examples costs one page per message.
"""

from __future__ import annotations

import pathlib
from typing import Any, Sequence

import anywidget
import numpy as np
import traitlets as t

from ._jobs import all_failed
from ._render import KINDS, example_kind, render

HERE = pathlib.Path(__file__).parent
SORTS = ("id", "loss", "disagreement")
MAX_PAGE_SIZE = 200


def _labels(y: np.ndarray, class_names: Sequence[Any] | None = None) -> np.ndarray:
    """One printable label per example (class index for one-hot rows), by
    its class name where the task has them."""
    y = np.asarray(y)
    if y.ndim > 1 and y.reshape(len(y), -1).shape[1] > 1:
        y = y.reshape(len(y), -1).argmax(axis=1)
    y = y.reshape(len(y))
    if y.dtype.kind in "iub" or (y.dtype.kind == "f" and np.all(np.mod(y, 1) == 0)):
        if class_names:
            return np.array([str(class_names[int(v)]) for v in y], dtype=object)
        return np.array([str(int(v)) for v in y], dtype=object)
    return np.array([f"{float(v):.3g}" for v in y], dtype=object)


class RefinePanel(anywidget.AnyWidget):
    """Examples of one dataset version (default: the latest), one page at a time.

    Args:
        task: a ``ease_jupyter.client.Task``.
        version: the dataset version number to show (None: the latest).
        page_size: examples per page (1..200).
        kind: ``image``, ``series`` or ``table`` (None: guessed from the shape).

    Clicking an example toggles its id in ``dropped``. ``label_filter``
    ("" for all) and ``sort`` (``id``, or ``loss`` / ``disagreement`` from
    ``Task.suspicion()``, most suspicious first) choose what is paged.
    ``save()`` (the *Save* button bumps ``save_clicks``) makes a new dataset
    version with ``Task.refine``: ids turned off are dropped, and ids of an
    older shown version that the latest lacks are kept (turned back on).
    """

    _esm = HERE / "refine.js"
    _css = HERE / "easeml.css"

    task = t.Unicode(help="the task's name").tag(sync=True)
    version = t.Int(help="the shown dataset version number").tag(sync=True)
    kind = t.Unicode("table", help="how examples are shown: " + ", ".join(KINDS)).tag(sync=True)
    columns = t.List(t.Unicode(), help="column names when kind is table").tag(sync=True)
    n_total = t.Int(0, help="examples in the shown version").tag(sync=True)
    n_shown = t.Int(0, help="examples that pass the label filter").tag(sync=True)
    n_pages = t.Int(1, help="pages of the filtered examples").tag(sync=True)
    page = t.Int(0, help="the current page, from 0").tag(sync=True)
    page_size = t.Int(24, help="examples per page, 1..200").tag(sync=True)
    labels = t.List(t.Unicode(), help="the distinct labels (for the filter)").tag(sync=True)
    label_filter = t.Unicode("", help="show only this label ('' for all)").tag(sync=True)
    sort = t.Unicode("id", help="id, loss or disagreement (most suspicious first)").tag(sync=True)
    rows = t.List(t.Dict(), help="the current page: {id, label, score, img|svg|values}").tag(sync=True)
    dropped = t.List(t.Int(), help="example ids turned off").tag(sync=True)
    save_clicks = t.Int(0, help="bumped by the save button; each bump saves").tag(sync=True)
    saved = t.Dict(None, allow_none=True, help="the last version saved").tag(sync=True)
    message = t.Unicode("", help="the outcome of the last action").tag(sync=True)

    def __init__(self, task: Any, *, version: int | None = None, page_size: int = 24, kind: str | None = None,
                 **kwargs: Any):
        self._task = task
        self._kind = kind
        self._suspicion: dict[str, np.ndarray] | None = None
        self._order_cache: tuple[tuple[str, str], np.ndarray] | None = None
        self._rendering = False
        super().__init__(task=task.name, **kwargs)
        self.page_size = page_size
        self._load(version)

    # ------------------------------------------------------------ data
    def _load(self, version: int | None) -> None:
        ids, X, y = self._task.data(version)
        numbers = [v["number"] for v in self._task.versions()]
        info = self._task.refresh()
        names = info.get("class_names")
        column_names = None
        if hasattr(X, "columns"):  # a table task's DataFrame: one row of cells per example
            column_names = [str(c) for c in X.columns]
            X = X.astype(object)
            # the store keeps a boolean column as 1.0 / 0.0 / NaN: show it as True / False / blank
            for column in (info.get("table") or {}).get("columns") or []:
                if column.get("kind") == "boolean" and column.get("name") in X.columns:
                    X[column["name"]] = X[column["name"]].map(lambda v: None if v != v or v is None else bool(v))
            X = X.to_numpy()
        self._ids, self._X, self._y = np.asarray(ids, dtype=np.int64), X, _labels(y, names)
        self._sorted = np.argsort(self._ids, kind="stable")
        self._suspicion, self._order_cache = None, None
        shape = tuple(X.shape[1:]) if X is not None else ()
        kind = self._kind or (example_kind(shape) if X is not None and column_names is None else "table")
        if kind not in KINDS:
            raise ValueError(f"kind: found {kind!r}, expected one of {KINDS}")
        distinct = sorted(set(self._y.tolist()), key=lambda s: (len(s), s))
        with self.hold_sync():
            self.version = version if version is not None else numbers[-1]
            self.kind = kind
            n_values = int(np.prod(shape)) if shape else 0
            if column_names is None:
                column_names = [f"x{i}" for i in range(n_values)]
            self.columns = column_names[:12] + (["..."] if len(column_names) > 12 else [])
            self.n_total = len(self._ids)
            self.labels = distinct if len(distinct) <= 100 else []
            self._rendering = True
            try:
                self.label_filter, self.sort, self.dropped, self.page = "", "id", [], 0
            finally:
                self._rendering = False
            self._render_page()

    def positions(self, ids: Any) -> np.ndarray:
        """Row positions of example ids in the shown version (-1 if absent)."""
        ids = np.asarray(ids, dtype=np.int64)
        at = np.searchsorted(self._ids[self._sorted], ids)
        at = np.clip(at, 0, len(self._ids) - 1)
        pos = self._sorted[at]
        return np.where(self._ids[pos] == ids, pos, -1)

    def _scores(self, sort: str) -> np.ndarray:
        if self._suspicion is None:
            s = self._task.suspicion(version=self.version)
            index = np.asarray(s["index"], dtype=np.int64)
            pos = self.positions(index)
            self._suspicion = {}
            for name in ("loss", "disagreement"):
                full = np.full(len(self._ids), np.nan)
                full[pos[pos >= 0]] = np.asarray(s[name], dtype=np.float64)[pos >= 0]
                self._suspicion[name] = full
            model = s.get("model") or {}
            name = model.get("name") if isinstance(model, dict) else model
            self.message = (f"suspicion from the best model {name} ({s.get('loss_kind')} loss) "
                            f"on version {s.get('version')}")
        return self._suspicion[sort]

    def order(self) -> np.ndarray:
        """Positions of the examples that pass the filter, in the sort order."""
        key = (self.label_filter, self.sort)
        if self._order_cache is not None and self._order_cache[0] == key:
            return self._order_cache[1]
        mask = np.ones(len(self._ids), bool) if not self.label_filter else (self._y == self.label_filter)
        positions = np.flatnonzero(mask)
        if self.sort == "id":
            positions = positions[np.argsort(self._ids[positions], kind="stable")]
        else:
            score = self._scores(self.sort)[positions]
            positions = positions[np.lexsort((self._ids[positions], -np.nan_to_num(score, nan=-np.inf)))]
        self._order_cache = (key, positions)
        return positions

    def _render_page(self) -> None:
        order = self.order()
        n_pages = max(1, -(-len(order) // self.page_size))
        page = min(self.page, n_pages - 1)
        chosen = order[page * self.page_size:(page + 1) * self.page_size]
        score = None if self.sort == "id" else self._scores(self.sort)
        rows = []
        for p in chosen:
            value = None if score is None or np.isnan(score[p]) else float(score[p])
            rows.append({"id": int(self._ids[p]), "label": str(self._y[p]), "score": value,
                         **render(None if self._X is None else self._X[p], self.kind)})
        with self.hold_sync():
            self._rendering = True
            try:
                self.n_shown, self.n_pages, self.page = len(order), n_pages, page
            finally:
                self._rendering = False
            self.rows = rows

    # ------------------------------------------------------------ validation
    @t.validate("page_size")
    def _check_page_size(self, proposal: t.Bunch) -> int:
        if not 1 <= proposal["value"] <= MAX_PAGE_SIZE:
            raise t.TraitError(f"page_size: found {proposal['value']}, expected 1..{MAX_PAGE_SIZE}")
        return proposal["value"]

    @t.validate("page")
    def _check_page(self, proposal: t.Bunch) -> int:
        return max(0, min(int(proposal["value"]), self.n_pages - 1))

    @t.validate("label_filter")
    def _check_label(self, proposal: t.Bunch) -> str:
        value = proposal["value"]
        if value and value not in set(self._y.tolist()):
            raise t.TraitError(f"label_filter: found {value!r}, expected '' or one of {self.labels[:20]}")
        return value

    @t.validate("sort")
    def _check_sort(self, proposal: t.Bunch) -> str:
        value = proposal["value"]
        if value not in SORTS:
            raise t.TraitError(f"sort: found {value!r}, expected one of {SORTS}")
        if value != "id":
            try:
                self._scores(value)
            except Exception as error:  # noqa: BLE001 - e.g. no model has finished: keep the id order
                self.message = f"cannot sort by {value}: {self._why_no_model() or error}"
                return "id"
        return value

    def _why_no_model(self) -> str | None:
        """``no model to score examples with: all N jobs failed: <error>`` when
        every job of the task failed (waiting would not help), else None."""
        try:
            failed = all_failed(self._task.jobs())
        except Exception:  # noqa: BLE001 - the first error is the one to show
            return None
        return None if failed is None else f"no model to score examples with: {failed}"

    @t.validate("dropped")
    def _check_dropped(self, proposal: t.Bunch) -> list[int]:
        ids = np.unique(np.asarray(proposal["value"], dtype=np.int64))
        unknown = ids[self.positions(ids) < 0] if ids.size else ids
        if unknown.size:
            raise t.TraitError(f"dropped: found id {int(unknown[0])}, expected ids of version {self.version}")
        return ids.tolist()

    @t.validate("save_clicks")
    def _check_clicks(self, proposal: t.Bunch) -> int:
        if proposal["value"] < self.save_clicks:
            raise t.TraitError(f"save_clicks: found {proposal['value']}, expected a count >= {self.save_clicks}")
        return proposal["value"]

    @t.observe("page_size", "label_filter", "sort")
    def _on_view_change(self, change: t.Bunch) -> None:
        if hasattr(self, "_ids") and not self._rendering:
            self._rendering = True
            try:
                self.page = 0
            finally:
                self._rendering = False
            self._render_page()

    @t.observe("page")
    def _on_page(self, change: t.Bunch) -> None:
        if hasattr(self, "_ids") and not self._rendering:
            self._render_page()

    @t.observe("save_clicks")
    def _on_save_click(self, change: t.Bunch) -> None:
        if change["new"] > change["old"]:
            try:
                self.save()
            except Exception as error:  # noqa: BLE001 - shown in the panel; the notebook side can call save()
                self.message = f"save failed: {error}"

    # ------------------------------------------------------------ actions
    def toggle(self, example_id: int, on: bool | None = None) -> bool:
        """Turn one example off or on (None: flip it); returns whether it is on."""
        dropped = set(self.dropped)
        now_on = (example_id in dropped) if on is None else on
        (dropped.discard if now_on else dropped.add)(int(example_id))
        self.dropped = sorted(dropped)
        return now_on

    def save(self) -> dict[str, Any] | None:
        """A new dataset version without the dropped examples; None if nothing changed."""
        dropped = np.asarray(self.dropped, dtype=np.int64)
        on = self._ids[~np.isin(self._ids, dropped)]
        versions = self._task.versions()
        latest_ids = self._ids if versions[-1]["number"] == self.version else np.asarray(self._task.data()[0])
        drop = np.intersect1d(latest_ids, dropped)
        keep = np.setdiff1d(on, latest_ids)
        if drop.size == 0 and keep.size == 0:
            self.message = "nothing to save: the latest version already has these examples"
            return None
        out = self._task.refine(keep=keep.tolist() if keep.size else None, drop=drop.tolist() if drop.size else None)
        self._load(out["number"])
        self.saved = out
        self.message = (f"saved dataset version {out['number']} (id {out['id']}): {out['n_examples']} examples, "
                        f"{drop.size} dropped, {keep.size} turned back on")
        return out

    def __repr__(self) -> str:
        head = (f"Refine panel of task {self.task!r}, version {self.version}: {self.n_total} examples "
                f"({self.kind}), {len(self.dropped)} turned off; page {self.page + 1}/{self.n_pages} "
                f"(label {self.label_filter or 'all'}, sort {self.sort})")
        shown = ", ".join(f"#{r['id']}:{r['label']}" + ("(off)" if r["id"] in set(self.dropped) else "")
                          for r in self.rows[:12])
        return head + ("\n  " + shown + (" ..." if len(self.rows) > 12 else "") if shown else "") + (
            f"\n  {self.message}" if self.message else "")
