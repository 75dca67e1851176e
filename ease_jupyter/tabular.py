"""Data in as scientists have it: DataFrames, CSV and Parquet files and image
folders, turned into what goes over the wire (the notebook side of
``schema.table``; docs/data.md).

* A table (a pandas DataFrame, or a ``.csv``/``.parquet`` path read with
  pandas) goes as one array per column: numbers and booleans as float64
  with NaN where missing, everything else as unicode strings with a missing
  mask. Nothing is pickled.
* ``infer_schema(df, target)`` gives a table task's typed schema: each
  column's kind from its dtype, the target's class names (a float target
  is regression).
* An image folder (one subfolder per class) is read with Pillow into the
  task's input shape ``(H, W)``, ``(H, W, 1)`` or ``(H, W, 3)``, as floats
  in [0, 1]; the subfolders' names are the labels. Such a feed says so
  (``feed_origin``: the body's ``origin``, ``IMAGE_FILES_ORIGIN``), and the
  service records it, so that the model card tells whoever feeds an
  exported file to read images the same way.
* Labels that are not numbers (strings, categories, other objects) go as
  class names; the service maps them to class indices.
* A pandas Series as X is one row or one column of a table: a table task
  takes it as the column it is named after, a tensor task whose examples
  are one number as one value per example; anything else is a DataError
  saying so and what to pass (``df.iloc[[i]]``: a row that stays a table).
* A categorical column whose values are nearly all distinct (sample ids,
  file names: ``zoo.preprocess.identifier_columns``) is one the models
  leave out of their features; declaring or feeding such a table warns
  (``IdentifierColumnWarning``), naming the column and why.
* A categorical or text column goes as its values' category text
  (``zoo.preprocess.category_text``, which an exported model applies too):
  8000 and 8000.0 are "8000" whether the column is of ints, floats,
  categories or objects, so one category has one spelling.
* Column names are text: a column named 0 (``pd.read_csv(header=None)``)
  is the task's "0", and ``target=0`` or ``target="0"`` names it.
* ``Decimal`` values (``pd.read_sql`` of a NUMERIC column) are numbers;
  dates, times, durations, periods and intervals are refused as datetime64
  columns are, naming the column and what to do.
"""

from __future__ import annotations

import decimal
import math
import os
import struct
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .errors import DataError
from .schema import parse
from .schema._arrays import native
from .schema.table import Column, ColumnKind, TableSchema, class_name, nfc, sorted_names
from .zoo.preprocess import IDENTIFIER_MIN_DISTINCT, IDENTIFIER_SHARE, category_text, identifiers_left_out

__all__ = ["TEXT_MIN_WORDS", "IMAGE_SUFFIXES", "IdentifierColumnWarning", "is_table", "read_table",
           "infer_schema", "column_wire", "table_wire", "split_target", "labels_wire", "read_image_folder",
           "read_images", "inputs_for", "feed_parts", "feed_origin", "IMAGE_FILES_ORIGIN", "named"]

#: A string column is free text (a TF-IDF vector) when its values have at
#: least this many words on average; fewer: categorical (one-hot).
TEXT_MIN_WORDS = 3
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm")

Encode = Callable[[np.ndarray], Any]  # an array -> its wire form (Client._array)


class IdentifierColumnWarning(UserWarning):
    """A table's column that looks like an identifier, which the task's
    models leave out of their features (``zoo.preprocess``)."""


def _pandas() -> Any:
    import pandas

    return pandas


def is_table(X: Any) -> bool:
    """A pandas DataFrame or Series."""
    return type(X).__module__.startswith("pandas") and hasattr(X, "dtype" if not hasattr(X, "columns") else "columns")


def _is_path(X: Any) -> bool:
    return isinstance(X, (str, os.PathLike))


def _paths(X: Any) -> bool:
    """Whether X is a list, tuple or 1-d array of paths to existing files
    (image files passed one by one)."""
    if isinstance(X, np.ndarray):
        if X.ndim != 1 or X.dtype.kind not in "UO":
            return False
    elif not isinstance(X, (list, tuple)):
        return False
    return len(X) > 0 and all(_is_path(x) for x in X) and any(Path(x).exists() for x in X)


def read_table(path: Any, field: str = "X") -> Any:
    """A CSV or Parquet file as a DataFrame; DataError naming ``field`` for
    a path that does not exist or is neither."""
    pd = _pandas()
    p = Path(path)
    if not p.exists():
        raise DataError(field, f"the path {str(p)!r}, which does not exist", "a CSV or Parquet file, or an image folder")
    suffix = p.suffix.lower()
    try:
        if suffix in (".csv", ".tsv", ".txt") or p.name.lower().endswith((".csv.gz", ".csv.zip")):
            return pd.read_csv(p, sep="\t" if suffix == ".tsv" else ",")
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(p)
    except (ValueError, OSError, UnicodeDecodeError) as error:
        raise DataError(field, f"{str(p)!r}, which could not be read ({type(error).__name__}: {error})",
                        f"a readable {suffix[1:].upper()} file") from None
    raise DataError(field, f"the file {str(p)!r}", "a .csv or .parquet file, or a folder of images")


# ---------------------------------------------------------------- kinds


# Objects that are neither numbers nor text, by pandas' name for a column of
# them (infer_dtype): refused as a datetime64 column is, rather than taken as
# categories (every date its own one), with what to turn them into.
_NOT_CATEGORIES = {
    "date": ("dates", "convert dates to numbers first"),
    "datetime": ("dates", "convert dates to numbers first"),
    "time": ("times of day", "convert times to numbers first, e.g. hours since midnight"),
    "timedelta": ("durations", "convert durations to numbers first, e.g. .dt.total_seconds()"),
    "period": ("periods", "convert periods to numbers first, e.g. .dt.year, or to text with .astype(str)"),
    "interval": ("intervals", "convert intervals to numbers first, e.g. their .mid, or to text with .astype(str)"),
}
_NUMBERS = (int, float, np.integer, np.floating)


def _wire_type(series: Any, field: str, features: bool = True) -> str:
    """"number", "bool" or "string": what a column is on the wire. Of a
    feature column (``features``; labels keep the rules they had), ``Decimal``
    values are numbers and objects that are dates, times, durations, periods
    or intervals are a DataError naming the column and what to do."""
    pd = _pandas()
    dtype = series.dtype
    if pd.api.types.is_bool_dtype(dtype):
        return "bool"
    if pd.api.types.is_numeric_dtype(dtype) and not isinstance(dtype, pd.CategoricalDtype):
        if pd.api.types.is_complex_dtype(dtype):
            raise DataError(field, "a column of complex numbers", "numbers, booleans or strings")
        return "number"
    if pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(dtype):
        raise DataError(field, f"a {dtype} column", "numbers, booleans or strings (convert dates to numbers first)")
    values = series.dropna()
    if isinstance(dtype, pd.CategoricalDtype):
        return "string"  # its categories, whatever they are (pd.cut's intervals, say)
    if features and len(values):
        inferred = pd.api.types.infer_dtype(values, skipna=True)
        if inferred in _NOT_CATEGORIES:
            what, do = _NOT_CATEGORIES[inferred]
            first = type(values.iloc[0])
            raise DataError(field, f"a column of {what} ({first.__module__}.{first.__qualname__})",
                            f"numbers, booleans or strings ({do})")
    if len(values) and all(isinstance(v, (bool, np.bool_)) for v in values):
        return "bool"
    numbers = (*_NUMBERS, decimal.Decimal) if features else _NUMBERS
    if len(values) and all(isinstance(v, numbers) and not isinstance(v, (bool, np.bool_)) for v in values):
        return "number"
    if len(values) == 0:
        return "number"  # all missing: any kind takes it
    return "string"


def _kind(series: Any, field: str) -> ColumnKind:
    wire = _wire_type(series, field)
    if wire == "number":
        return ColumnKind.NUMERIC
    if wire == "bool":
        return ColumnKind.BOOLEAN
    words = series.dropna().astype(str).str.split().str.len()
    return ColumnKind.TEXT if len(words) and float(words.mean()) >= TEXT_MIN_WORDS else ColumnKind.CATEGORICAL


def infer_schema(like: Any, target: Any, kinds: Mapping[Any, str] | None = None) -> TableSchema:
    """A table task's schema from example data (a DataFrame or a CSV/Parquet
    path): every column but ``target`` is a feature, of the kind its dtype
    says (``kinds`` overrides by name: "numeric", "boolean", "categorical",
    "text"); the target's distinct values are the class names, except for a
    float target: regression (an integer target with missing values reads
    as float in pandas: fill or cast it to classify). Columns are named by
    their labels as text (``_name``), and ``target`` and ``kinds`` name them
    by either: 4 or "4" for a headerless CSV's fifth column."""
    frame = _unique_columns(_frame(like, "like", columns=()), "like")
    given = target
    target = _name(target)
    if target not in frame.columns:
        raise DataError("target", repr(given)[:80], f"one of the columns {list(frame.columns)!r}")
    kinds = {_name(name): kind for name, kind in (kinds or {}).items()}
    columns = []
    for name in frame.columns:
        if name == target:
            continue
        field = f"like[{name!r}]"
        if name in kinds:
            if kinds[name] not in {k.value for k in ColumnKind}:
                raise DataError(f"kinds[{name!r}]", repr(kinds.pop(name))[:80], ", ".join(k.value for k in ColumnKind))
            columns.append(Column(name, ColumnKind(kinds.pop(name))))
        else:
            columns.append(Column(name, _kind(frame[name], field)))
    if kinds:
        raise DataError(f"kinds[{next(iter(kinds))!r}]", "a column the data does not have",
                        f"one of {[c for c in frame.columns if c != target]!r}")
    y = frame[target]
    pd = _pandas()
    if pd.api.types.is_float_dtype(y.dtype):
        schema = TableSchema(tuple(columns), target, None)
    else:
        values = [class_name(v, f"like[{target!r}][{i}]") for i, v in enumerate(_label_values(y))]
        schema = TableSchema(tuple(columns), target, sorted_names(values))
    _warn_identifiers(frame, schema.kinds(), "like")
    return schema


def _warn_identifiers(frame: Any, kinds: Mapping[str, ColumnKind], field: str) -> list[str]:
    """Warn (``IdentifierColumnWarning``) of each categorical column of
    ``frame`` that the task's models leave out of their features as an
    identifier, as they decide it on the rows they fit on; its names."""
    categorical = [n for n, k in kinds.items() if k is ColumnKind.CATEGORICAL and n in frame.columns]
    left_out = identifiers_left_out(frame, categorical, len(kinds))
    for name in left_out:
        # One sentence per column, the same for every feed: Python shows it once per session.
        warnings.warn(
            f"{field}[{name!r}] looks like an identifier (at least {IDENTIFIER_SHARE:.0%} of its values, and "
            f"{IDENTIFIER_MIN_DISTINCT} or more, are distinct): the task's models leave it out of their features, "
            "as a value seen in one training row says nothing about other rows. Feed and infer still take the "
            "column, and an exported model has it as an input it does not read. To learn from the words in it "
            f"(the parts of a file name, say), declare it as text: kinds={{{name!r}: 'text'}}.",
            IdentifierColumnWarning, stacklevel=2)
    return left_out


# ---------------------------------------------------------------- the wire


def _frame(X: Any, field: str, columns: Sequence[str] | None = None) -> Any:
    """``X`` as a DataFrame. ``columns``: the task's feature columns, where
    known; a Series is then the column of that name, or a DataError (a row,
    say: ``df.iloc[0]`` is a Series whose index holds the columns)."""
    pd = _pandas()
    if _is_path(X):
        return _named(read_table(X, field))
    if isinstance(X, pd.Series):
        if columns is None or _name(X.name) in columns:
            return _named(X.to_frame())
        raise _series_error(X, field, columns)
    if isinstance(X, pd.DataFrame):
        return _named(X)
    raise DataError(field, type(X).__name__, "a pandas DataFrame or Series, or a CSV or Parquet path")


def _name(label: Any) -> str:
    """A column's name in the task: its label as text (0 -> "0"), in Unicode
    NFC, as the service matches names (a macOS header's NFD "ö" is "ö")."""
    return nfc(label if isinstance(label, str) else str(label))


def _named(frame: Any) -> Any:
    """``frame`` with its column names as text (``_name``), as the task and
    the wire have them: a headerless CSV's columns 0, 1, ... are "0", "1", ...
    and in NFC (a shallow copy: the caller's frame keeps its names)."""
    if all(isinstance(c, str) and c == _name(c) for c in frame.columns):
        return frame
    named = frame.copy(deep=False)
    named.columns = [_name(c) for c in frame.columns]
    return named


def _series_error(series: Any, field: str, columns: Sequence[str]) -> DataError:
    """What a Series is where a table was expected, and what to pass instead."""
    index = [str(i) for i in series.index]
    if columns and set(index) & set(columns):
        found = f"a pandas Series: one row of a table (its index holds the columns {_some(index)})"
    else:
        named = "" if series.name is None else f" named {series.name!r}"
        found = (f"a pandas Series{named}: one row or one column of a table"
                 + (f", and no column of the task ({_some(columns)})" if columns else ""))
    with_target = "" if columns else " and the target column"
    return DataError(field, found, f"a DataFrame with the feature columns{with_target}: df.iloc[[i]] for row i "
                                   "(a list of rows stays a table), df[[...]] for columns, or df itself")


def _some(names: Sequence[str], most: int = 5) -> str:
    shown = ", ".join(repr(n) for n in list(names)[:most])
    return shown + (f", ... ({len(names)} in all)" if len(names) > most else "")


def _unique_columns(frame: Any, field: str) -> Any:
    """``frame``, or a DataError naming a column name it uses twice (``frame[name]`` would be a DataFrame)."""
    names = [str(c) for c in frame.columns]
    if len(set(names)) != len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise DataError(f"{field}[{twice!r}]", "a column name used twice", "unique column names")
    return frame


def column_wire(series: Any, encode: Encode, field: str, kind: ColumnKind | None = None) -> dict[str, Any]:
    """One column's wire form: name, type, values and (for strings) missing.
    ``kind``: the task's kind of the column, when it is declared. A column of
    numbers declared categorical or text (zip codes, integer-coded classes)
    goes as their text (8000, not 8000.0); one of text declared numeric
    (numbers read as strings) goes as numbers where every value is one. Every
    column that goes as strings goes as its values' category text
    (``category_text``: 8000.0 is "8000" in a float, ``category`` or object
    column alike), the spelling an exported model gives them too."""
    wire = _wire_type(series, field)
    pd = _pandas()
    if kind is ColumnKind.NUMERIC and wire == "string":
        try:
            series = pd.to_numeric(series, errors="raise")
            wire = "number"
        except (ValueError, TypeError):  # text that is not numbers: the service names the column and the value
            pass
    if wire == "string" or kind in (ColumnKind.CATEGORICAL, ColumnKind.TEXT):
        series = category_text()(series.to_frame()).iloc[:, 0]
        wire = "string"
    missing = series.isna().to_numpy(dtype=bool)
    out: dict[str, Any] = {"name": str(series.name), "type": wire}
    if wire == "string":
        text = np.array(["" if m else str(v) for v, m in zip(series.tolist(), missing)], dtype=str)
        out["values"], out["missing"] = encode(text), encode(missing)
    else:
        numbers = np.full(len(series), np.nan)
        present = ~missing
        numbers[present] = series[present].to_numpy(dtype=float) if present.any() else []
        out["values"] = encode(numbers)
    return out


def table_wire(X: Any, encode: Encode, field: str = "X", table: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{"table": [column, ...]}`` for a DataFrame, Series or CSV/Parquet path;
    ``table``: the task's schema (``TableSchema.to_dict``), whose kinds say
    how a column goes where its values could go either way."""
    kinds = {_name(c["name"]): ColumnKind(c["kind"]) for c in (table or {}).get("columns", ())}
    frame = _unique_columns(_frame(X, field, list(kinds) if table is not None else None), field)
    return {"table": [column_wire(frame[c], encode, f"{field}[{str(c)!r}]", kinds.get(str(c)))
                      for c in frame.columns]}


def split_target(X: Any, y: Any, target: str | None, columns: Sequence[str] | None = None) -> tuple[Any, Any]:
    """(features, labels) of a table fed with its target column in it;
    ``columns``: the task's feature columns (a Series X must be one)."""
    frame = _frame(X, "X", columns)
    target = None if target is None else _name(target)
    if y is None:
        if target is None or target not in frame.columns:
            raise DataError("y", "nothing", f"labels, or a {target!r} column in X" if target else "labels")
        return frame.drop(columns=[target]), frame[target]
    if target is not None and target in frame.columns:
        raise DataError("y", "labels as well as a target column in X", f"one of them (X[{target!r}] or y)")
    return frame, y


def _label_values(y: Any) -> list[Any]:
    if hasattr(y, "tolist"):
        return y.tolist()
    return list(y)


def labels_wire(y: Any) -> Any:
    """Labels as they go: numbers and booleans as arrays (class indices, or
    targets), anything else as a list of class names (None where missing)."""
    pd = _pandas()
    if isinstance(y, (pd.Series, pd.Categorical, pd.Index)) or (isinstance(y, pd.DataFrame) and y.shape[1] == 1):
        series = y.iloc[:, 0] if isinstance(y, pd.DataFrame) else pd.Series(y)
        wire = _wire_type(series, "y", features=False)
        if wire == "number" and not series.isna().any():
            values = series.to_numpy()
            if values.dtype.kind not in "biuf":  # objects, or a nullable/pyarrow dtype numpy keeps as objects
                values = series.to_numpy(dtype=np.float64)
            return values
        if wire == "bool" and not series.isna().any():
            return series.to_numpy(dtype=bool)
        return [_scalar(v) for v in series.tolist()]
    if isinstance(y, np.ndarray) and y.dtype.kind in "biuf":
        return y
    array = np.asarray(y, dtype=object) if not isinstance(y, np.ndarray) else y
    if array.dtype == object and array.ndim == 1 and any(isinstance(v, str) for v in array.tolist()):
        return [_scalar(v) for v in array.tolist()]
    if array.dtype.kind == "U":
        return array
    return y


def _scalar(value: Any) -> Any:
    """A label as JSON: scalars as they are, missing as None, else its str."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    try:
        if _pandas().isna(value):
            return None
    except (TypeError, ValueError):
        pass
    return value if isinstance(value, (str, int, float, bool)) else str(value)


# ---------------------------------------------------------------- images


def _image_shape(program: str) -> tuple[int, ...]:
    shape = parse(program).input.tensors[0].shape
    if len(shape) == 2 or (len(shape) == 3 and shape[2] in (1, 3)):
        return shape
    raise DataError("X", "an image folder", f"arrays for the task's input shape {list(shape)} "
                    "(images need a task with input [H, W], [H, W, 1] or [H, W, 3])")


# Pillow modes of one channel deeper than 8 bits (16-bit PNG and TIFF, 32-bit
# integer and float TIFF: microscopes and telescopes write them) and the value
# that is white in each. The scale is fixed by the pixel type, never by an
# image's own values, so that every image of a task, fed now or inferred later,
# is scaled alike: 32-bit integers are read as the 16 bits cameras fill (older
# Pillow reads 16-bit PNGs as them too), floats must already be in [0, 1].
_DEEP_WHITE = {"I;16": 65535.0, "I;16L": 65535.0, "I;16B": 65535.0, "I;16N": 65535.0, "I": 65535.0, "F": 1.0}


def read_images(paths: Sequence[Path], shape: tuple[int, ...], field: str = "X") -> np.ndarray:
    """Images loaded with Pillow, turned upright (EXIF orientation), resized to
    ``shape`` (H, W[, C]), float32 in [0, 1]. An image of more than 8 bits a
    channel keeps its depth: it is divided by its pixel type's white, never
    clipped at 255; one whose values lie beyond that white is refused, since
    scaling it by its own values would make it unlike the task's other images."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    height, width = shape[0], shape[1]
    channels = 3 if len(shape) == 3 and shape[2] == 3 else 1
    out = np.empty((len(paths), *shape), dtype=np.float32)
    for i, path in enumerate(paths):
        try:
            with Image.open(path) as image:
                pixels = _unit_pixels(ImageOps.exif_transpose(image), channels, (width, height), path, field)
        except Image.DecompressionBombError as error:  # Pillow refuses images this large before reading them
            raise DataError(field, f"the file {str(path)!r}, an image too large to open ({error})",
                            f"images of at most {2 * Image.MAX_IMAGE_PIXELS:,} pixels: shrink it, or, for a "
                            "file you trust, raise PIL.Image.MAX_IMAGE_PIXELS before feeding") from None
        except DataError:
            raise
        except (UnidentifiedImageError, OSError) as error:
            raise DataError(field, f"the file {str(path)!r}, which is not an image ({type(error).__name__})",
                            "image files only (PNG, JPEG, ...)") from None
        except (SyntaxError, ValueError, struct.error, EOFError) as error:  # Pillow's decoders on damaged files
            raise DataError(field, f"the file {str(path)!r}, which is damaged or not an image "
                            f"({type(error).__name__}: {error})", "image files only (PNG, JPEG, ...), "
                            "whole and readable: copy it again or leave it out") from None
        out[i] = pixels.reshape(shape)
    return out


def _unit_pixels(image: Any, channels: int, size: tuple[int, int], path: Path, field: str) -> np.ndarray:
    """One image's pixels at ``size`` (W, H) in [0, 1], with 1 or 3 channels."""
    if image.mode not in _DEEP_WHITE:
        image = _on_white(image)
        return np.asarray(image.convert("RGB" if channels == 3 else "L").resize(size), dtype=np.float32) / 255.0
    white = _DEEP_WHITE[image.mode]
    full = image.convert("F")
    values = np.asarray(full, dtype=np.float32)
    if values.size and not np.isnan(values).all():
        low, high = float(np.nanmin(values)), float(np.nanmax(values))
        if low < 0.0 or high > white:
            kind = "float" if image.mode == "F" else "32-bit integer"
            raise DataError(field, f"the file {str(path)!r}, a {kind} image with values from {low:g} to {high:g}",
                            f"{kind} values in [0, {white:g}], the one scale every {kind} image is read with so "
                            "that images stay comparable: divide all of them by one value (the instrument's range, "
                            "say) and save them as floats in [0, 1]")
    resized = np.asarray(full.resize(size), dtype=np.float32)
    gray = np.clip(np.nan_to_num(resized / white), 0.0, 1.0)  # the clip only trims resampling's overshoot
    return np.repeat(gray[..., None], 3, axis=2) if channels == 3 else gray


# Modes with an alpha channel; a palette or grey/RGB image may instead name
# one transparent colour (``info["transparency"]``, PNG's tRNS, GIF's).
_ALPHA_MODES = frozenset({"RGBA", "RGBa", "LA", "La", "PA"})


def _on_white(image: Any) -> Any:
    """An image with transparency composited onto opaque white (RGB), as a
    viewer on a white page shows it: the colour a file keeps under alpha 0
    is invisible and arbitrary (black, white, anything an editor left), so
    two images that look alike must read alike. Opaque images are unchanged."""
    if image.mode not in _ALPHA_MODES and "transparency" not in image.info:
        return image
    from PIL import Image

    rgba = image.convert("RGBA")
    return Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba).convert("RGB")


def _files(folder: Path, field: str = "X") -> list[Path]:
    """The files under ``folder``, sorted, hidden ones (``.name``) left out.
    Links to folders are followed, as a linked class folder is; one that
    leads back to a folder above it (a loop) is not entered again. A
    dangling link is refused: the image it stood for is missing."""
    found: list[Path] = []

    def walk(directory: Path, above: frozenset[str]) -> None:
        try:
            entries = list(os.scandir(directory))
        except OSError as error:
            raise DataError(field, f"the folder {str(directory)!r}, which cannot be read ({error.strerror})",
                            "readable image folders") from None
        for entry in entries:
            if entry.name.startswith("."):
                continue
            path = Path(entry.path)
            if entry.is_dir():  # follows links
                real = os.path.realpath(path)
                if real not in above:
                    walk(path, above | {real})
            elif entry.is_file():
                found.append(path)
            elif entry.is_symlink():
                _dangling(path, field)

    walk(folder, frozenset({os.path.realpath(folder)}))
    return sorted(found)


def _dangling(path: Path, field: str) -> None:
    raise DataError(field, f"the link {str(path)!r}, which points to {os.readlink(path)!r}, which does not exist",
                    "links to existing images or folders: fix or remove the link")


def read_image_folder(folder: Any, program: str, field: str = "X") -> tuple[np.ndarray, list[str]]:
    """(images, labels) of a folder with one subfolder per class. A subfolder's
    name is its class name in Unicode NFC: macOS writes names decomposed (NFD),
    Linux as typed (NFC), and the same class must not become two."""
    root = Path(folder)
    shape = _image_shape(program)
    classes = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise DataError(field, f"the folder {str(root)!r} with no subfolders", "one subfolder of images per class")
    for p in sorted(root.iterdir()):
        if p.is_symlink() and not p.exists() and not p.name.startswith("."):
            _dangling(p, field)
    loose = [p for p in root.iterdir() if p.is_file() and not p.name.startswith(".")]
    if loose:
        raise DataError(field, f"the file {str(loose[0])!r} outside the class subfolders",
                        "images only inside one subfolder per class")
    paths, labels = [], []
    for folder_ in classes:
        files = _files(folder_, field)
        paths += files
        labels += [nfc(folder_.name)] * len(files)
    if not paths:
        raise DataError(field, f"the folder {str(root)!r} with no images", "at least one image")
    return read_images(paths, shape, field), labels


def inputs_for(X: Any, info: Mapping[str, Any], encode: Encode, field: str = "X") -> Any:
    """The wire form of inputs for ``infer``: a table for a table task
    (without its target column, where the rows have one), the images of a
    folder (all files, sorted) for an image task, else as given."""
    table = info.get("table")
    if table is not None:
        frame = _frame(X, field, _feature_names(table))
        target = _name(table.get("target"))
        if target in frame.columns:  # rows as fed, labels and all: the labels are not inputs
            frame = frame.drop(columns=[target])
        return table_wire(frame, encode, field, table)
    if _paths(X):
        raise DataError(field, f"a list of {len(X)} paths ({str(X[0])!r}, ...)",
                        "one image folder or one image file: put the images in a folder and pass the folder")
    if _is_path(X):
        root = Path(X)
        if not root.exists():
            raise DataError(field, f"the path {str(root)!r}, which does not exist", "an image file or folder")
        paths = _files(root, field) if root.is_dir() else [root]
        return read_images(paths, _image_shape(info["program"]), field)
    if is_table(X):
        _check_series(X, info, field)
        return native(X)  # numbers and booleans (nullable, pyarrow too) as float64 with NaN
    return X


# A feed body's ``origin`` when its rows were read from image files here
# (``read_images``): the service records it as a task tag
# (``task_schema.IMAGE_FILES_TAG``) for the model card's "image files" step.
IMAGE_FILES_ORIGIN = "image files"


def feed_origin(X: Any, info: Mapping[str, Any]) -> str | None:
    """``IMAGE_FILES_ORIGIN`` when ``feed_parts`` reads X's rows from image
    files (a path fed to a tensor task: an image folder), else None (arrays,
    tables, a table task's CSV or Parquet file)."""
    return IMAGE_FILES_ORIGIN if info.get("table") is None and _is_path(X) else None


def feed_parts(X: Any, y: Any, info: Mapping[str, Any], encode: Encode) -> tuple[Any, Any]:
    """(X, y) of a feed in their wire forms."""
    table = info.get("table")
    if table is not None:
        features, labels = split_target(X, y, table.get("target"), _feature_names(table))
        _warn_identifiers(features, {_name(c["name"]): ColumnKind(c["kind"]) for c in table["columns"]}, "X")
        return table_wire(features, encode, table=table), labels_wire(labels)
    if feed_origin(X, info) == IMAGE_FILES_ORIGIN:
        root = Path(X)
        if not root.exists():
            raise DataError("X", f"the path {str(root)!r}, which does not exist",
                            "an image folder (one subfolder per class), or a CSV or Parquet file of a table task")
        if not root.is_dir():
            raise DataError("X", f"the file {str(root)!r}", "an image folder here: declare a table task "
                            "(client.task(name, like=path, target=...)) to feed CSV or Parquet files")
        if y is not None:
            raise DataError("y", "labels with an image folder", "none: the subfolders name the classes")
        images, labels = read_image_folder(root, info["program"])
        return images, labels
    if is_table(X):
        _check_series(X, info, "X")
        X = native(X)  # numbers and booleans (nullable, pyarrow too) as float64 with NaN
    return X, labels_wire(y) if y is not None else None


def _feature_names(table: Mapping[str, Any]) -> list[str]:
    return [_name(c["name"]) for c in table.get("columns", ())]


def _check_series(X: Any, info: Mapping[str, Any], field: str) -> None:
    """A Series for a tensor task is one row or one column of a table: one
    value per example, which only a task whose examples are one number takes;
    else a DataError saying so (numpy's ``X[None]`` advice fits no Series)."""
    if hasattr(X, "columns"):
        return
    tensors = parse(info["program"]).input.tensors
    if len(tensors) != 1 or math.prod(tensors[0].shape) == 1:
        return  # one number per example: a column of them; or inputs the service's check explains
    shape = tuple(tensors[0].shape)
    raise DataError(field, f"a pandas Series of {len(X)} values: one row or one column of a table",
                    f"examples of shape {shape}: a DataFrame (df.iloc[[i]] for row i: a list of rows stays "
                    f"a table) or an array of shape (n, {', '.join(str(d) for d in shape)})")


def named(predictions: np.ndarray, names: Sequence[Any] | None) -> np.ndarray:
    """Class indices as the class names they stand for (as given without names)."""
    if names is None:
        return predictions
    lookup = np.asarray(names)
    if lookup.dtype.kind not in "Ubif" or len({type(n) for n in names}) > 1:
        lookup = np.asarray(list(names), dtype=object)
    return lookup[np.asarray(predictions, dtype=np.int64)]


def frame_of_wire(columns: Sequence[Mapping[str, Any]], decode: Callable[[Any], np.ndarray]) -> Any:
    """The DataFrame of a version's table as ``GET /examples`` sends it
    (``task_schema.table_json``): numbers with NaN, strings with None where missing."""
    pandas = _pandas()
    data = {}
    for column in columns:
        values = decode(column["values"])
        if "missing" in column:
            values = values.astype(object)
            values[decode(column["missing"])] = None
        data[column["name"]] = values
    return pandas.DataFrame(data)
