"""Thumbnails, sparklines and the choice between them (no service needed)."""

from __future__ import annotations

import base64
import io
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from PIL import Image

from ease_jupyter.widgets._render import encode_png, example_kind, png_data_uri, sparkline, to_uint8_image


@pytest.mark.parametrize("shape, mode", [((8, 8), "L"), ((5, 7, 3), "RGB"), ((4, 6, 4), "RGBA")])
def test_png_encoder_round_trips(shape, mode):
    img = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    decoded = Image.open(io.BytesIO(encode_png(img)))
    assert decoded.mode == mode and decoded.size == (shape[1], shape[0])
    assert np.asarray(decoded).tolist() == img.tolist()


def test_png_encoder_rejects_other_shapes():
    with pytest.raises(ValueError, match="expected"):
        encode_png(np.zeros((4, 4, 2), np.uint8))


def test_thumbnail_scales_each_image():
    x = np.arange(16, dtype=np.float32).reshape(4, 4, 1) / 100
    img = to_uint8_image(x)
    assert img.shape == (4, 4) and img.min() == 0 and img.max() == 255
    assert to_uint8_image(np.zeros((3, 5, 5))).shape == (5, 5, 3)  # channels first
    uri = png_data_uri(x)
    assert base64.b64decode(uri.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"


def test_sparkline_has_one_polyline_per_channel():
    svg = ET.fromstring(sparkline(np.stack([np.sin(np.arange(50)), np.cos(np.arange(50))], axis=1)))
    lines = svg.findall("{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == 2 and all(len(p.get("points").split()) == 50 for p in lines)
    ys = [float(pt.split(",")[1]) for pt in lines[0].get("points").split()]
    assert min(ys) >= 0 and max(ys) <= 28


@pytest.mark.parametrize("shape, kind", [((8, 8, 1), "image"), ((28, 28), "image"), ((3, 32, 32), "image"),
                                         ((100,), "series"), ((60, 2), "series"), ((4,), "table"), ((), "table")])
def test_example_kind(shape, kind):
    assert example_kind(shape) == kind
