"""Image folders as people have them (ease_jupyter.tabular, without a
service): a damaged PNG named in a DataError, transparent pixels read as
white whatever colour a file hides under them, linked folders followed and
dangling links refused, and image files passed as a list told what to pass."""

from __future__ import annotations

import os

import numpy as np
import pytest
from PIL import Image

from ease_jupyter import tabular
from ease_jupyter.errors import DataError

PROGRAM = "{input: {[Tensor[8,8,1]], []}, output: {[Tensor[2]], []}}"


def _gray(path, value):
    Image.fromarray(np.full((8, 8), value, dtype=np.uint8)).save(path)
    return path


def _damaged_png(path):
    """A PNG whose IDAT length is 8 too small (one flipped byte): Pillow's
    reader raises a bare SyntaxError("broken PNG file ...") naming no file."""
    Image.fromarray(np.arange(64, dtype=np.uint8).reshape(8, 8) * 3).save(path)
    data = bytearray(path.read_bytes())
    k = data.index(b"IDAT") - 4
    data[k:k + 4] = (int.from_bytes(data[k:k + 4], "big") - 8).to_bytes(4, "big")
    path.write_bytes(bytes(data))
    return path


def test_a_damaged_png_is_a_data_error_naming_the_file(tmp_path):
    for cls in ("a", "b"):
        (tmp_path / cls).mkdir()
        for i in range(2):
            _gray(tmp_path / cls / f"{i}.png", 40 * i)
    damaged = _damaged_png(tmp_path / "b" / "damaged.png")
    with pytest.raises(DataError) as caught:
        tabular.read_image_folder(tmp_path, PROGRAM)
    assert caught.value.field == "X"
    assert str(damaged) in caught.value.found and "is damaged or not an image" in caught.value.found
    with pytest.raises(DataError) as caught:  # infer's reading too
        tabular.inputs_for(tmp_path / "b", {"program": PROGRAM}, None)
    assert str(damaged) in caught.value.found


@pytest.mark.parametrize("error", [SyntaxError("broken PNG file"), ValueError("bad"), EOFError(),
                                   __import__("struct").error("unpack requires a buffer")])
def test_every_error_pillow_raises_on_a_damaged_file_names_the_file(tmp_path, monkeypatch, error):
    path = _gray(tmp_path / "x.png", 10)

    def broken(*args, **kwargs):
        raise error

    monkeypatch.setattr(Image, "open", broken)
    with pytest.raises(DataError) as caught:
        tabular.read_images([path], (8, 8, 1))
    assert str(path) in caught.value.found and "damaged" in caught.value.found


def _square(hidden, mode="RGBA"):
    """A red square on a fully transparent background hiding ``hidden``."""
    a = np.zeros((8, 8, 4), np.uint8)
    a[..., :3] = hidden
    a[2:6, 2:6] = [255, 0, 0, 255]
    image = Image.fromarray(a, "RGBA")
    return image if mode == "RGBA" else image.convert(mode)


@pytest.mark.parametrize("shape", [(8, 8, 3), (8, 8, 1)])
def test_transparent_pixels_read_white_whatever_colour_they_hide(tmp_path, shape):
    """Images that look alike in every viewer read alike: the colour under
    alpha 0 (black, white, green: whatever an editor left) is not read."""
    paths = []
    for k, hidden in enumerate(((0, 0, 0), (255, 255, 255), (0, 255, 0))):
        paths.append(tmp_path / f"{k}.png")
        _square(hidden).save(paths[-1])
    images = tabular.read_images(paths, shape)
    assert np.array_equal(images[0], images[1]) and np.array_equal(images[0], images[2])
    np.testing.assert_allclose(images[0][0, 0], 1.0)  # the background: white
    if shape[2] == 3:
        np.testing.assert_allclose(images[0][4, 4], [1.0, 0.0, 0.0])  # the opaque square as it is


def test_grey_with_alpha_and_a_palette_with_a_transparent_colour_read_white_where_transparent(tmp_path):
    la = np.zeros((8, 8, 2), np.uint8)
    la[2:6, 2:6] = [200, 255]
    Image.fromarray(la, "LA").save(tmp_path / "la.png")
    palette = Image.new("P", (8, 8))
    palette.putpalette([0, 0, 0, 255, 255, 255] + [0] * 762)
    palette.putdata([0] * 32 + [1] * 32)
    palette.save(tmp_path / "pal.png", transparency=0)  # black marked transparent
    palette.save(tmp_path / "pal.gif", transparency=0)
    grey, pal, gif = tabular.read_images([tmp_path / "la.png", tmp_path / "pal.png", tmp_path / "pal.gif"], (8, 8, 1))
    assert grey[0, 0, 0] == 1.0 and grey[4, 4, 0] == pytest.approx(200 / 255)
    assert np.all(pal == 1.0) and np.all(gif == 1.0)  # black under transparency, white above: all white


def test_opaque_images_with_an_alpha_channel_read_as_without_it(tmp_path):
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
    Image.fromarray(rgb).save(tmp_path / "rgb.png")
    Image.fromarray(np.dstack([rgb, np.full((8, 8), 255, np.uint8)]), "RGBA").save(tmp_path / "rgba.png")
    for shape in ((8, 8, 3), (8, 8, 1)):
        a, b = tabular.read_images([tmp_path / "rgb.png", tmp_path / "rgba.png"], shape)
        assert np.array_equal(a, b)


def _linked(tmp_path):
    store, data = tmp_path / "store", tmp_path / "data"
    (store / "batch2").mkdir(parents=True)
    (store / "dogs").mkdir()
    (data / "cat").mkdir(parents=True)
    for i in range(3):
        _gray(store / "batch2" / f"{i}.png", i)
    for i in range(2):
        _gray(store / "dogs" / f"{i}.png", 100 + i)
    _gray(data / "cat" / "own.png", 9)
    os.symlink(store / "batch2", data / "cat" / "batch2")  # a linked folder inside a class
    os.symlink(store / "dogs", data / "dog")  # a linked class folder
    return data


def test_a_linked_folder_inside_a_class_folder_is_read_as_the_class(tmp_path):
    data = _linked(tmp_path)
    X, labels = tabular.read_image_folder(data, PROGRAM)
    assert labels == ["cat"] * 4 + ["dog"] * 2
    assert len(tabular.inputs_for(data / "cat", {"program": PROGRAM}, None)) == 4


def test_a_link_back_to_a_folder_above_is_not_a_loop(tmp_path):
    data = _linked(tmp_path)
    os.symlink(data / "cat", data / "cat" / "again")  # a loop
    os.symlink(data, data / "cat" / "root")  # a loop through the root: dog is reachable, cat is above
    X, labels = tabular.read_image_folder(data, PROGRAM)
    assert labels.count("cat") == 4 + 2  # own, batch2 and, through root, dog's two images (not cat's again)


@pytest.mark.parametrize("where", ["cat", ""])
def test_a_dangling_link_is_refused_naming_it(tmp_path, where):
    data = _linked(tmp_path)
    link = data / where / "gone.png"
    os.symlink(tmp_path / "store" / "gone.png", link)
    with pytest.raises(DataError) as caught:
        tabular.read_image_folder(data, PROGRAM)
    assert caught.value.field == "X" and str(link) in caught.value.found and "does not exist" in caught.value.found
    if where:
        with pytest.raises(DataError) as caught:
            tabular.inputs_for(data / where, {"program": PROGRAM}, None)
        assert str(link) in caught.value.found


@pytest.mark.parametrize("kind", [list, tuple, np.array])
def test_image_files_passed_as_a_list_are_told_to_pass_a_folder_or_one_file(tmp_path, kind):
    paths = [str(_gray(tmp_path / f"{i}.png", i)) for i in range(2)]
    with pytest.raises(DataError) as caught:
        tabular.inputs_for(kind(paths), {"program": PROGRAM}, None)
    assert "a list of 2 paths" in caught.value.found and paths[0] in caught.value.found
    assert "one image folder or one image file" in caught.value.expected
