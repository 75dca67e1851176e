"""``easeml models``."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from ease_jupyter.cli import main
from ease_jupyter.cli.models import command, parse_shape


def run(*args):
    return CliRunner().invoke(main, ["models", *args])


def test_table_for_an_image_task():
    r = run("--input", "64,64,3", "--output", "10")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "workload: tensor_classification" in out
    for name in ["lenet", "resnet_small", "vgg_small", "mobilenet_small"]:
        assert name in out
    assert "lenet[lr=0.1]" in out and "mobilenet_small[lr=0.001]" in out
    assert "torch" in out and "GFLOP" in out
    assert "Tensor[64,64,3]" in out
    assert "(cost for 1000 examples)" in out


def test_table_for_flat_features_and_examples_option():
    r = run("--input", "64", "--output", "10", "--examples", "1797")
    assert r.exit_code == 0, r.output
    assert "workload: flat_classification" in r.stdout
    assert "svm_rbf[C=1.0]" in r.stdout and "sklearn" in r.stdout
    assert "1797 examples" in r.stdout


def test_json_output():
    r = run("--input", "16,16,1", "--output", "16,16,1", "--json", "--examples", "500", "--epochs", "2")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["workload"] == "tensor_recovery"
    assert data["examples"] == 500
    names = [c["name"] for c in data["candidates"]]
    assert names == ["conv_autoencoder", "unet"]
    first = data["candidates"][0]
    assert first["engine"] == "torch" and first["epochs"] == 2
    assert len(first["configs"]) == 9
    assert first["configs"][0] == {"key": "conv_autoencoder[lr=0.1,norm_k=1]", "options": {"lr": 0.1, "norm_k": 1}}
    assert first["cost"] == pytest.approx(first["flops_per_example"] * 500 * 2)
    assert isinstance(first["descriptor"], list)


def test_program_option():
    pytest.importorskip("ease_jupyter.schema.parser")
    r = run("--program", "{input: {[Tensor[3]], [next]}, output: {[Tensor[4]], []}}", "--json", "--seq-len", "10")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["workload"] == "time_series_classification"
    assert [c["name"] for c in data["candidates"]] == ["cnn1d", "gru", "lstm", "bilstm"]


def test_malformed_program_is_a_bad_parameter():
    pytest.importorskip("ease_jupyter.schema.parser")
    r = run("--program", "{input: {[Tensor[3]], [next]")
    assert r.exit_code == 2
    assert "--program" in r.output


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--input", "64,x,3", "--output", "10"], "entry 2 is 'x'"),
        (["--input", "64,64,3", "--output", "0"], "entry 1 is '0'"),
        (["--input", "", "--output", "10"], "empty shape"),
        (["--input", "8,8,1"], "missing --output"),
        ([], "missing --input"),
        (["--input", "8", "--output", "2", "--program", "input: [8] output: [2]"], "not both"),
        (["--input", "8", "--output", "2", "--examples", "0"], "--examples"),
    ],
)
def test_bad_input_is_a_usage_error(args, fragment):
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert fragment in r.output


def test_unsupported_workload_exits_with_the_reason():
    r = CliRunner().invoke(command, ["--input", "2,2,2,2", "--output", "3"])
    assert r.exit_code == 1
    assert "workload: general_classification" in r.stdout
    assert "no candidate models for workload general_classification yet" in r.output
    r = CliRunner().invoke(command, ["--input", "2,2,2,2", "--output", "3", "--json"])
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert data["candidates"] == [] and "no candidate models" in data["error"]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 10_000), min_size=1, max_size=5), st.booleans())
def test_parse_shape_round_trip(dims, brackets):
    text = ", ".join(map(str, dims))
    if brackets:
        text = f"[{text}]"
    assert parse_shape(text) == tuple(dims)
