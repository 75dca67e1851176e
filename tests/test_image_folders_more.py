"""Reading image folders (ease_jupyter.tabular), without a service: deep
pixels scaled by a fixed rule per pixel type, class folders named alike
whatever Unicode form the file system wrote, and images too large to open."""

from __future__ import annotations

import struct
import unicodedata
import zlib

import numpy as np
import pytest
from PIL import Image

from ease_jupyter import tabular
from ease_jupyter.errors import DataError

PROGRAM = "{input: {[Tensor[8,8,1]], []}, output: {[Tensor[2]], []}}"


def _tiff(path, values, mode):
    Image.fromarray(np.asarray(values).reshape(8, 8), mode=mode).save(path)
    return path


def test_deep_images_are_scaled_by_their_pixel_type_not_their_own_values(tmp_path):
    """Two 32-bit integer images, one dim and one bright, keep their ratio:
    both are divided by 65,535, so a dim image stays dim (as it will when
    inferred later); a float image in [0, 1] stays as it is."""
    dim = _tiff(tmp_path / "dim.tif", np.linspace(0, 3000, 64).astype(np.int32), "I")
    bright = _tiff(tmp_path / "bright.tif", np.linspace(0, 60000, 64).astype(np.int32), "I")
    unit = _tiff(tmp_path / "unit.tif", np.linspace(0, 0.5, 64).astype(np.float32), "F")
    images = tabular.read_images([dim, bright, unit], (8, 8, 1))
    np.testing.assert_allclose(images.max(axis=(1, 2, 3)), [3000 / 65535, 60000 / 65535, 0.5], rtol=1e-3)


@pytest.mark.parametrize("name, values, mode, found", [
    ("counts.tif", np.linspace(0, 200, 64).astype(np.float32), "F", "a float image with values from 0 to 200"),
    ("signed.tif", np.linspace(-1, 1, 64).astype(np.float32), "F", "a float image with values from -1 to 1"),
    ("wide.tif", np.linspace(0, 100000, 64).astype(np.int32), "I",
     "a 32-bit integer image with values from 0 to 100000"),
])
def test_deep_images_beyond_their_pixel_types_scale_are_refused_naming_the_file(tmp_path, name, values, mode, found):
    """Scaling such an image by its own largest value would make it unlike the
    task's other images; the error says what range was found and what to do."""
    path = _tiff(tmp_path / name, values, mode)
    with pytest.raises(DataError) as caught:
        tabular.read_images([path], (8, 8, 1))
    assert caught.value.field == "X"
    assert caught.value.found == f"the file {str(path)!r}, {found}"
    assert "in [0, " in caught.value.expected and "divide all of them by one value" in caught.value.expected


def _folder(root, names):
    for name in names:
        (root / name).mkdir(parents=True)
        for i in range(2):
            Image.fromarray(np.full((8, 8), 40 * i, dtype=np.uint8)).save(root / name / f"{i}.png")
    return root


def test_a_class_folder_named_in_nfd_or_nfc_is_one_class_named_in_nfc(tmp_path):
    """macOS writes 'café' decomposed (NFD), Linux as typed (NFC)."""
    nfd, nfc = unicodedata.normalize("NFD", "café"), unicodedata.normalize("NFC", "café")
    assert nfd != nfc
    _, mac = tabular.read_image_folder(_folder(tmp_path / "mac", [nfd, "thé"]), PROGRAM)
    _, linux = tabular.read_image_folder(_folder(tmp_path / "linux", [nfc, "thé"]), PROGRAM)
    assert mac == linux == [nfc, nfc, "thé", "thé"]


def _png_declaring(width, height):
    """A PNG whose header declares ``width`` x ``height`` pixels, its data a few bytes."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 100)) + chunk(b"IEND", b"")


def test_an_image_too_large_to_open_is_a_data_error_naming_the_file_and_the_limit(tmp_path):
    root = _folder(tmp_path / "shapes", ["a", "b"])
    (root / "b" / "huge.png").write_bytes(_png_declaring(100_000, 100_000))
    with pytest.raises(DataError) as caught:
        tabular.read_image_folder(root, PROGRAM)
    assert caught.value.field == "X"
    assert caught.value.found.startswith(f"the file {str(root / 'b' / 'huge.png')!r}, an image too large to open")
    assert f"at most {2 * Image.MAX_IMAGE_PIXELS:,} pixels" in caught.value.expected
    assert "PIL.Image.MAX_IMAGE_PIXELS" in caught.value.expected


def test_the_limit_on_image_size_is_pillows_and_can_be_lowered_or_raised(tmp_path, monkeypatch):
    path = tmp_path / "small.png"
    Image.fromarray(np.zeros((8, 8), dtype=np.uint8)).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10)  # 64 pixels > 2 x 10
    with pytest.raises(DataError) as caught:
        tabular.read_images([path], (8, 8))
    assert "at most 20 pixels" in caught.value.expected
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)  # lifted, as the error advises for a trusted file
    assert tabular.read_images([path], (8, 8)).shape == (1, 8, 8)
