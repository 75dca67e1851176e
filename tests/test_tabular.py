"""The notebook side of table data (ease_jupyter.tabular) and the
preprocessing pipeline of table tasks (zoo.preprocess), without a service."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ease_jupyter import tabular
from ease_jupyter.errors import DataError
from ease_jupyter.schema.table import ColumnKind, TableColumn, TableData
from ease_jupyter.zoo.preprocess import table_pipeline, to_frame


def frame() -> pd.DataFrame:
    return pd.DataFrame({
        "mass": [3750.0, np.nan, 3250.0, 4100.0, 5000.0, 4800.0],
        "count": pd.array([1, 2, None, 4, 5, 6], dtype="Int64"),
        "adult": [True, False, True, True, None, False],
        "island": pd.Categorical(["Dream", "Biscoe", None, "Dream", "Biscoe", "Dream"]),
        "note": ["seen near the old pier today", None, "a quiet bird on the rocks",
                 "swims far out at dusk", "nested under the ledge", "tagged by the team last year"],
        "species": ["Adelie", "Gentoo", "Adelie", "Adelie", "Gentoo", "Gentoo"],
    })


def identity(array):
    return array


def test_kinds_come_from_the_dtypes_and_the_target_gives_the_classes():
    schema = tabular.infer_schema(frame(), "species")
    assert schema.kinds() == {"mass": ColumnKind.NUMERIC, "count": ColumnKind.NUMERIC, "adult": ColumnKind.BOOLEAN,
                              "island": ColumnKind.CATEGORICAL, "note": ColumnKind.TEXT}
    assert schema.classes == ("Adelie", "Gentoo")
    assert tabular.infer_schema(frame(), "mass").classes is None  # a float target: regression
    assert tabular.infer_schema(frame(), "species", kinds={"note": "categorical"}).kinds()["note"] is ColumnKind.CATEGORICAL


@pytest.mark.parametrize("kwargs, field", [
    ({"target": "beak"}, "target"),
    ({"target": "species", "kinds": {"beak": "text"}}, "kinds['beak']"),
    ({"target": "species", "kinds": {"note": "words"}}, "kinds['note']"),
])
def test_bad_schema_arguments_are_named(kwargs, field):
    with pytest.raises(DataError) as info:
        tabular.infer_schema(frame(), **kwargs)
    assert info.value.field == field


def test_a_date_column_is_refused_by_name():
    with pytest.raises(DataError) as info:
        tabular.infer_schema(frame().assign(when=pd.to_datetime(["2024-01-01"] * 6)), "species")
    assert info.value.field == "like['when']"


def _decoded(wire) -> TableData:
    columns = {c["name"]: TableColumn.of(c["name"], c["type"], c["values"], c.get("missing")) for c in wire["table"]}
    return TableData.of(columns)


def test_the_wire_form_keeps_values_and_missing_ones_without_pickles():
    X, y = tabular.split_target(frame(), None, "species")
    wire = tabular.table_wire(X, identity)
    for column in wire["table"]:
        assert column["values"].dtype.kind in "fU"  # np.save(allow_pickle=False) takes both
    table = _decoded(wire)
    schema = tabular.infer_schema(frame(), "species")
    columns = schema.columns_of(schema.stored_arrays(table))
    assert np.isnan(columns["mass"][1]) and columns["mass"][0] == 3750.0
    assert np.isnan(columns["count"][2]) and columns["count"][3] == 4.0
    assert columns["adult"].tolist()[:2] == [1.0, 0.0] and np.isnan(columns["adult"][4])
    assert columns["island"][0] == "Dream" and np.isnan(columns["island"][2])
    assert list(tabular.labels_wire(y)) == list(frame()["species"])


def test_labels_go_as_names_unless_they_are_numbers():
    assert tabular.labels_wire(pd.Series(["a", None])) == ["a", None]
    assert tabular.labels_wire(np.array([0, 1, 2])).dtype.kind == "i"
    assert tabular.labels_wire(pd.Series([True, False])).dtype == bool
    assert tabular.named(np.array([1, 0]), ["cat", "dog"]).tolist() == ["dog", "cat"]
    assert tabular.named(np.array([1, 0]), None).tolist() == [1, 0]


def test_paths_that_do_not_exist_or_are_not_tables_are_named(tmp_path):
    with pytest.raises(DataError) as info:
        tabular.read_table(tmp_path / "nope.csv")
    assert info.value.field == "X" and "does not exist" in info.value.found
    (tmp_path / "data.json").write_text("{}")
    with pytest.raises(DataError) as info:
        tabular.read_table(tmp_path / "data.json")
    assert "csv" in info.value.expected
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(DataError) as info:
        tabular.read_table(tmp_path / "bad.parquet")
    assert "could not be read" in info.value.found


def test_an_image_folder_without_class_subfolders_is_refused(tmp_path):
    from PIL import Image

    Image.fromarray(np.zeros((4, 4), dtype=np.uint8)).save(tmp_path / "a.png")
    with pytest.raises(DataError) as info:
        tabular.read_image_folder(tmp_path, "{input: {[Tensor[4,4,1]], []}, output: {[Tensor[2]], []}}")
    assert "no subfolders" in info.value.found
    with pytest.raises(DataError) as info:
        tabular.read_image_folder(tmp_path, "{input: {[Tensor[16]], []}, output: {[Tensor[2]], []}}")
    assert "[16]" in info.value.expected


def test_the_pipeline_is_plain_scikit_learn_and_takes_the_original_columns():
    from sklearn.linear_model import LogisticRegression

    data = frame()
    schema = tabular.infer_schema(data, "species")
    X, y = tabular.split_target(data, None, "species")
    stored = schema.stored_arrays(_decoded(tabular.table_wire(X, identity)))
    pipeline = table_pipeline(schema, LogisticRegression())
    pipeline.fit(to_frame(schema, stored), y)
    for _, step, _ in pipeline.named_steps["preprocess"].transformers_:
        for _, part in getattr(step, "steps", [(None, step)]):
            assert type(part).__module__.startswith("sklearn"), part
    # the fitted pipeline takes a user's DataFrame as is, unseen categories and missing text included
    unseen = X.head(2).assign(island=["Atlantis", None], note=[None, "never seen words"])
    assert set(pipeline.predict(unseen)) <= {"Adelie", "Gentoo"}
    numeric = pipeline.named_steps["preprocess"].named_transformers_["numeric"].named_steps["impute"]
    np.testing.assert_allclose(numeric.statistics_[0], np.nanmean(data["mass"]))


def test_deep_images_keep_their_depth_and_photos_come_upright(tmp_path):
    """A 16-bit PNG and a float TIFF (as microscopes write them) are scaled,
    not clipped at 255, and a photo's EXIF orientation is applied."""
    from PIL import Image

    from ease_jupyter.tabular import read_images

    ramp = np.linspace(0.0, 1.0, 32 * 32).reshape(32, 32)
    Image.fromarray((ramp * 65535).astype(np.uint16)).save(tmp_path / "deep.png")
    Image.fromarray(ramp.astype(np.float32), mode="F").save(tmp_path / "float.tif")
    images = read_images([tmp_path / "deep.png", tmp_path / "float.tif"], (32, 32, 1))
    for image in images:
        np.testing.assert_allclose(image[..., 0], ramp, atol=1e-4)
    assert np.allclose(read_images([tmp_path / "deep.png"], (32, 32, 3))[0, ..., 2], ramp, atol=1e-4)
    # a portrait photo stored sideways: 8 wide, 4 high, with "rotate 90" in its EXIF
    sideways = np.zeros((4, 8), dtype=np.uint8)
    sideways[:, :2] = 255  # its left edge white
    photo = Image.fromarray(sideways)
    exif = photo.getexif()
    exif[0x0112] = 6  # Orientation: the viewer turns it 90 degrees clockwise
    photo.save(tmp_path / "photo.jpg", exif=exif, quality=100)
    upright = read_images([tmp_path / "photo.jpg"], (8, 4))[0]
    assert upright[:2].mean() > 0.9 and upright[2:].mean() < 0.1  # the white edge on top once turned


def _table_info(data: pd.DataFrame, target: str) -> dict:
    schema = tabular.infer_schema(data, target)
    return {"table": schema.to_dict(), "program": str(schema.program())}


def test_a_row_given_as_a_series_says_what_it_is_and_what_to_pass():
    data = frame()
    info = _table_info(data, "species")
    for call in (lambda X: tabular.feed_parts(X, None, info, identity),
                 lambda X: tabular.inputs_for(X, info, identity)):
        with pytest.raises(DataError) as caught:
            call(data.iloc[0])
        assert caught.value.field == "X"
        assert caught.value.found.startswith("a pandas Series: one row of a table (its index holds the columns 'mass'")
        assert "df.iloc[[i]]" in caught.value.expected and "DataFrame" in caught.value.expected
    with pytest.raises(DataError) as caught:
        tabular.infer_schema(data.iloc[0], "species")
    assert caught.value.field == "like" and "one row or one column" in caught.value.found
    assert "the target column" in caught.value.expected
    # a Series named after the task's column is that column; a list of rows stays a table
    one = _table_info(data[["mass", "species"]], "species")
    assert [c["name"] for c in tabular.feed_parts(data["mass"], data["species"], one, identity)[0]["table"]] == ["mass"]
    X, y = tabular.feed_parts(data.iloc[[0]], None, info, identity)
    assert len(X["table"]) == 5 and list(y) == ["Adelie"]


def test_a_series_for_a_tensor_task_of_several_numbers_is_refused():
    three = {"program": "{input: {[Tensor[3]], []}, output: {[Tensor[2]], []}}", "table": None}
    row = pd.DataFrame([[1.0, 2.0, 3.0]], columns=["a", "b", "c"]).iloc[0]
    with pytest.raises(DataError) as caught:
        tabular.feed_parts(row, [0], three, identity)
    assert caught.value.field == "X"
    assert caught.value.found == "a pandas Series of 3 values: one row or one column of a table"
    assert "df.iloc[[i]]" in caught.value.expected and "(n, 3)" in caught.value.expected
    with pytest.raises(DataError):
        tabular.inputs_for(row, three, identity)
    one = {"program": "{input: {[Tensor[1]], []}, output: {[Tensor[2]], []}}", "table": None}
    X, _ = tabular.feed_parts(pd.Series([1.0, 2.0]), [0, 1], one, identity)  # one number per example: a column
    assert X.tolist() == [1.0, 2.0]


def test_an_identifier_column_warns_when_declared_and_fed_unless_it_is_text():
    import warnings

    n = 120
    data = pd.DataFrame({"mass": np.linspace(3000, 5000, n), "file": [f"img_{i:04d}.png" for i in range(n)],
                         "species": ["Adelie", "Gentoo"] * (n // 2)})
    with pytest.warns(tabular.IdentifierColumnWarning, match=r"like\['file'\] looks like an identifier"):
        schema = tabular.infer_schema(data, "species")
    assert schema.kinds()["file"] is ColumnKind.CATEGORICAL  # still a column of the task
    with pytest.warns(tabular.IdentifierColumnWarning, match=r"X\['file'\].*kinds=\{'file': 'text'\}"):
        tabular.feed_parts(data, None, {"table": schema.to_dict()}, identity)
    with warnings.catch_warnings():
        warnings.simplefilter("error", tabular.IdentifierColumnWarning)
        tabular.infer_schema(data, "species", kinds={"file": "text"})  # its words are features: nothing left out
        tabular.infer_schema(data.head(40), "species")  # too few rows to tell
        tabular.infer_schema(data[["file", "species"]], "species")  # nothing else to learn from: kept
