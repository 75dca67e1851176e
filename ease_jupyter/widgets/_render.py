"""Examples as small HTML pieces: PNG thumbnails, SVG sparklines, table cells.

PNG thumbnails are encoded with Pillow.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
from PIL import Image

KINDS = ("image", "series", "table")


def example_kind(shape: tuple[int, ...]) -> str:
    """How to show one example of this shape: image, series or table."""
    if len(shape) == 3 and min(shape[:2]) >= 4 and shape[2] in (1, 3, 4):
        return "image"
    if len(shape) == 3 and shape[0] in (1, 3) and min(shape[1:]) >= 4:
        return "image"
    if len(shape) == 2:
        return "series" if min(shape) <= 4 and max(shape) > 8 else "image" if min(shape) >= 4 else "table"
    if len(shape) == 1 and shape[0] > 32:
        return "series"
    return "table"


def to_uint8_image(x: np.ndarray) -> np.ndarray:
    """An (H, W) or (H, W, 1|3|4) array scaled to 0..255 (per image min/max)."""
    a = np.asarray(x, dtype=np.float64)
    if a.ndim == 3 and a.shape[0] in (1, 3) and a.shape[2] not in (1, 3, 4):
        a = np.moveaxis(a, 0, -1)
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[..., 0]
    a = np.nan_to_num(a)
    lo, hi = float(a.min()), float(a.max())
    scaled = (a - lo) / (hi - lo) if hi > lo else np.zeros_like(a)
    return np.round(scaled * 255).astype(np.uint8)


def encode_png(img: np.ndarray) -> bytes:
    """PNG bytes of a uint8 (H, W) grey, (H, W, 3) RGB or (H, W, 4) RGBA array."""
    img = np.ascontiguousarray(img, dtype=np.uint8)
    if not (img.ndim == 2 or (img.ndim == 3 and img.shape[2] in (3, 4))):
        raise ValueError(f"image: found shape {img.shape}, expected (H, W), (H, W, 3) or (H, W, 4)")
    out = io.BytesIO()
    Image.fromarray(img).save(out, format="PNG", optimize=True)
    return out.getvalue()


def png_data_uri(x: np.ndarray) -> str:
    return "data:image/png;base64," + base64.b64encode(encode_png(to_uint8_image(x))).decode("ascii")


def sparkline(x: np.ndarray, width: int = 120, height: int = 28) -> str:
    """An inline SVG polyline per channel of a (T,) or (T, C) series."""
    a = np.nan_to_num(np.asarray(x, dtype=np.float64))
    if a.ndim == 2 and a.shape[0] < a.shape[1]:
        a = a.T
    a = a.reshape(len(a), -1)
    lo, hi = float(a.min()), float(a.max())
    span = hi - lo or 1.0
    t = np.linspace(1, width - 1, len(a))
    lines = []
    for c in range(a.shape[1]):
        y = height - 1 - (a[:, c] - lo) / span * (height - 2)
        points = " ".join(f"{px:.1f},{py:.1f}" for px, py in zip(t, y))
        lines.append(f'<polyline fill="none" stroke="hsl({(210 + 70 * c) % 360},60%,40%)" stroke-width="1" '
                     f'points="{points}"/>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">{"".join(lines)}</svg>')


def _cell(v: Any) -> str:
    """One value as a short string: blank for a missing one (None, NaN, pandas' NA)."""
    if v is None or (isinstance(v, (float, np.floating)) and np.isnan(v)) or type(v).__name__ in ("NAType", "NaTType"):
        return ""
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    return f"{v:.4g}" if isinstance(v, (float, np.floating)) else str(v)


def cells(x: np.ndarray, limit: int = 12) -> list[str]:
    """A row's first ``limit`` values as short strings (missing ones blank)."""
    flat = np.asarray(x).ravel()
    out = [_cell(v) for v in flat[:limit].tolist()]
    if flat.size > limit:
        out.append(f"... ({flat.size - limit} more)")
    return out


def render(x: Any, kind: str) -> dict[str, Any]:
    """What a page row carries for one example: ``img``, ``svg`` or ``values``."""
    if x is None:
        return {}
    if kind == "image":
        return {"img": png_data_uri(x)}
    if kind == "series":
        return {"svg": sparkline(x)}
    return {"values": cells(x)}
