"""Template matching (pvldb §3.1, Fig. 6) and template augmentation."""

from __future__ import annotations

import pickle

import pytest

from ease_jupyter.errors import EaseMLError
from ease_jupyter.schema.types import DataType, Program, TensorField
from ease_jupyter.zoo import (
    FAMILY_KINDS,
    LEARNING_RATES,
    TEMPLATES,
    Candidate,
    Engine,
    ModelConfig,
    NoCandidatesError,
    Workload,
    candidates,
    match_workload,
)

from .conftest import program

W = Workload

# (input tensors, output tensors, input rec, output rec) -> workload
MATCH_TABLE = [
    # row 1: image / tensor classification
    ([(64, 64, 3)], [(10,)], (), (), W.TENSOR_CLASSIFICATION),
    ([(8, 8, 1)], [(10,)], (), (), W.TENSOR_CLASSIFICATION),
    ([(28, 28)], [(2,)], (), (), W.TENSOR_CLASSIFICATION),  # rank-2 image, C = 1
    # row 2: tensor recovery
    ([(32, 32, 3)], [(32, 32, 3)], (), (), W.TENSOR_RECOVERY),
    ([(16, 16, 1)], [(8, 8, 2)], (), (), W.TENSOR_RECOVERY),
    ([(16, 16)], [(16, 16)], (), (), W.TENSOR_RECOVERY),
    # row 3: time-series classification, with and without a tail
    ([(3,)], [(4,)], ("next",), (), W.TIME_SERIES_CLASSIFICATION),
    ([(3,), (2, 2)], [(4,)], ("next",), (), W.TIME_SERIES_CLASSIFICATION),
    # row 4: time-series translation
    ([(3,)], [(5,)], ("next",), ("next",), W.TIME_SERIES_TRANSLATION),
    ([(3,), (7,)], [(5,), (1,)], ("prev",), ("nxt",), W.TIME_SERIES_TRANSLATION),
    # row 5: tree classification
    ([(3,)], [(2,)], ("left", "right"), (), W.TREE_CLASSIFICATION),
    ([(3,), (4, 4)], [(1,)], ("left", "right"), (), W.TREE_CLASSIFICATION),
    # our flat rows
    ([(64,)], [(10,)], (), (), W.FLAT_CLASSIFICATION),
    ([(5,)], [(2,)], (), (), W.FLAT_CLASSIFICATION),
    ([(5,)], [(1,)], (), (), W.FLAT_REGRESSION),
    ([(5,)], [(3, 2)], (), (), W.FLAT_REGRESSION),
    # row 6: general classification
    ([(2, 2, 2, 2)], [(3,)], (), (), W.GENERAL_CLASSIFICATION),
    ([(3,), (4,)], [(3,)], (), (), W.GENERAL_CLASSIFICATION),  # two flat tensors
    ([(8, 8, 1)], [(1,)], (), (), W.GENERAL_CLASSIFICATION),  # Tensor[1] is not a class vector
    ([(3, 3)], [(4,)], ("a",), (), W.GENERAL_CLASSIFICATION),  # chain of matrices
    # row 7: general auto-encoder (catch-all)
    ([(8, 8, 1)], [(8, 8)], (), ("next",), W.GENERAL_AUTOENCODER),
    ([(8, 8, 1)], [(4, 4, 4, 4)], (), (), W.GENERAL_AUTOENCODER),
    ([(3,)], [(2,)], ("a", "b", "c"), (), W.GENERAL_CLASSIFICATION),
    ([(3,)], [(2,)], ("a", "b", "c"), ("x",), W.GENERAL_AUTOENCODER),
    ([(5,)], [(2,), (3,)], (), (), W.GENERAL_AUTOENCODER),
]


@pytest.mark.parametrize("inp,out,in_rec,out_rec,expected", MATCH_TABLE)
def test_match_table(inp, out, in_rec, out_rec, expected):
    assert match_workload(program(inp, out, in_rec, out_rec)) is expected


def test_templates_are_in_fig6_order_and_total():
    assert [t.workload for t in TEMPLATES] == [
        W.TENSOR_CLASSIFICATION,
        W.TENSOR_RECOVERY,
        W.TIME_SERIES_CLASSIFICATION,
        W.TIME_SERIES_TRANSLATION,
        W.TREE_CLASSIFICATION,
        W.FLAT_CLASSIFICATION,
        W.FLAT_REGRESSION,
        W.GENERAL_CLASSIFICATION,
        W.GENERAL_AUTOENCODER,
    ]
    assert set(t.workload for t in TEMPLATES) == set(Workload)


def test_more_specific_template_wins():
    # An image classification program also matches the general rows 8 and 9
    # (and a time series matches row 9): the first, most specific, row wins.
    p = program([(8, 8, 1)], [(10,)])
    matching = [t.workload for t in TEMPLATES if t.matches(p)]
    assert matching == [W.TENSOR_CLASSIFICATION, W.GENERAL_CLASSIFICATION, W.GENERAL_AUTOENCODER]
    assert match_workload(p) is W.TENSOR_CLASSIFICATION

    series = program([(3,)], [(4,)], ("next",))
    assert [t.workload for t in TEMPLATES if t.matches(series)][0] is W.TIME_SERIES_CLASSIFICATION
    assert match_workload(series) is W.TIME_SERIES_CLASSIFICATION


def test_flat_versus_time_series_depends_on_recursion():
    assert match_workload(program([(7,)], [(3,)])) is W.FLAT_CLASSIFICATION
    assert match_workload(program([(7,)], [(3,)], ("next",))) is W.TIME_SERIES_CLASSIFICATION
    assert match_workload(program([(7,)], [(3,)], ("l", "r"))) is W.TREE_CLASSIFICATION


def test_named_tensors_match_like_unnamed():
    p = Program(DataType((TensorField((8, 8, 1), "pixels"),)), DataType((TensorField((10,), "label"),)))
    assert match_workload(p) is W.TENSOR_CLASSIFICATION


@pytest.mark.parametrize(
    "bad",
    [
        program([(0, 8, 1)], [(10,)]),
        program([(8, 8, 1)], [(-1,)]),
        program([()], [(10,)]),
        "{input: [8,8,1], output: [10]}",
    ],
)
def test_bad_programs_raise_clear_errors(bad):
    with pytest.raises(EaseMLError, match="program"):
        match_workload(bad)


EXPECTED_NAMES = {
    W.TENSOR_CLASSIFICATION: ["lenet", "resnet_small", "vgg_small", "mobilenet_small"],
    W.TENSOR_RECOVERY: ["conv_autoencoder", "unet"],
    W.TIME_SERIES_CLASSIFICATION: ["cnn1d", "gru", "lstm", "bilstm"],
    W.TIME_SERIES_TRANSLATION: ["seq2seq_gru", "seq2seq_lstm"],
    W.FLAT_CLASSIFICATION: ["logreg", "svm_rbf", "random_forest", "hist_gboost", "knn", "mlp"],
    W.FLAT_REGRESSION: ["ridge", "svr_rbf", "random_forest", "hist_gboost", "knn", "mlp"],
}

PROGRAMS = {
    W.TENSOR_CLASSIFICATION: program([(8, 8, 1)], [(10,)]),
    W.TENSOR_RECOVERY: program([(16, 16, 1)], [(16, 16, 1)]),
    W.TIME_SERIES_CLASSIFICATION: program([(3,)], [(4,)], ("next",)),
    W.TIME_SERIES_TRANSLATION: program([(3,)], [(2,)], ("next",), ("next",)),
    W.FLAT_CLASSIFICATION: program([(64,)], [(10,)]),
    W.FLAT_REGRESSION: program([(10,)], [(1,)]),
}


@pytest.fixture(scope="module")
def all_candidates():
    return {w: candidates(p) for w, p in PROGRAMS.items()}


def test_candidates_per_workload(all_candidates):
    for w, cands in all_candidates.items():
        assert [c.name for c in cands] == EXPECTED_NAMES[w]
        for c in cands:
            assert isinstance(c, Candidate)
            assert c.workload is w
            assert c.configs and all(cfg.model == c.name for cfg in c.configs)
            assert len({cfg.key for cfg in c.configs}) == len(c.configs)
            assert c.flops_per_example > 0 and c.cost(1000) > 0
            expected_engine = Engine.SKLEARN if w in (W.FLAT_CLASSIFICATION, W.FLAT_REGRESSION) else Engine.TORCH
            assert c.engine is expected_engine


def test_config_expansion_counts(all_candidates):
    for w, cands in all_candidates.items():
        for c in cands:
            if w is W.TENSOR_RECOVERY:
                # learning rates x normalisations f_k, k in {1, 2, 3}
                assert len(c.configs) == 9
                assert {cfg.options["norm_k"] for cfg in c.configs} == {1, 2, 3}
                assert {cfg.options["lr"] for cfg in c.configs} == set(LEARNING_RATES)
            elif c.engine is Engine.TORCH:
                assert [cfg.options for cfg in c.configs] == [{"lr": lr} for lr in (0.1, 0.01, 0.001)]
            else:
                assert 1 <= len(c.configs) <= 3
                assert len({tuple(cfg.options) for cfg in c.configs}) == 1  # one key option per model


def test_config_keys_are_readable(all_candidates):
    keys = [cfg.key for cfg in all_candidates[W.TENSOR_CLASSIFICATION][0].configs]
    assert keys == ["lenet[lr=0.1]", "lenet[lr=0.01]", "lenet[lr=0.001]"]
    rec = all_candidates[W.TENSOR_RECOVERY][1].configs[0]
    assert rec.key == "unet[lr=0.1,norm_k=1]"


def test_descriptors_have_one_layout(all_candidates):
    lengths = {len(c.descriptor) for cands in all_candidates.values() for c in cands}
    assert lengths == {3 + len(FAMILY_KINDS)}
    for cands in all_candidates.values():
        for c in cands:
            assert sum(c.descriptor[3:]) == 1.0  # exactly one family kind
            assert c.descriptor[2] == (1.0 if c.engine is Engine.TORCH else 0.0)


@pytest.mark.parametrize(
    "p,workload",
    [
        (program([(3,)], [(2,)], ("left", "right")), W.TREE_CLASSIFICATION),
        (program([(2, 2, 2, 2)], [(3,)]), W.GENERAL_CLASSIFICATION),
        (program([(8, 8, 1)], [(8, 8)], (), ("next",)), W.GENERAL_AUTOENCODER),
    ],
)
def test_unsupported_workloads_raise_not_an_empty_list(p, workload):
    with pytest.raises(NoCandidatesError, match=f"no candidate models for workload {workload.value} yet") as info:
        candidates(p)
    assert info.value.workload is workload
    assert isinstance(info.value, EaseMLError) and isinstance(info.value, NotImplementedError)


def test_tensor1_output_explains_the_class_rule():
    with pytest.raises(NoCandidatesError, match="D >= 2"):
        candidates(program([(8, 8, 1)], [(1,)]))


def test_candidates_are_picklable_and_build_fresh_models(all_candidates):
    c = all_candidates[W.TENSOR_CLASSIFICATION][0]
    c2 = pickle.loads(pickle.dumps(c))
    assert c2.name == c.name and c2.configs == c.configs
    m1, m2 = c2.build(c2.configs[0]), c2.build(c2.configs[0])
    assert m1 is not m2
    s = all_candidates[W.FLAT_CLASSIFICATION][1]
    s2 = pickle.loads(pickle.dumps(s))
    assert s2.cost(500) == s.cost(500)


def test_build_rejects_foreign_or_unknown_configs(all_candidates):
    c = all_candidates[W.TENSOR_CLASSIFICATION][0]
    with pytest.raises(EaseMLError, match="expected 'lenet'"):
        c.build(ModelConfig.of("vgg_small", {"lr": 0.1}))
    with pytest.raises(EaseMLError, match="unknown option"):
        c.build(ModelConfig.of("lenet", {"lr": 0.1, "momentum": 0.5}))
    s = all_candidates[W.FLAT_CLASSIFICATION][0]
    with pytest.raises(EaseMLError, match="unknown option"):
        s.build(ModelConfig.of("logreg", {"alpha": 1.0}))


def test_recovery_build_uses_norm_k(all_candidates):
    c = all_candidates[W.TENSOR_RECOVERY][0]
    ks = [c.build(cfg).norm_k for cfg in c.configs]
    assert sorted(set(ks)) == [1, 2, 3]


def test_seq_len_validation():
    with pytest.raises(EaseMLError, match="seq_len"):
        candidates(program([(3,)], [(4,)], ("next",)), seq_len=0)


def test_candidate_lists_are_values():
    # builders are values, not closures: the same program gives equal candidates
    p = program([(8, 8, 1)], [(10,)])
    assert candidates(p) == candidates(p)
    q = program([(64,)], [(10,)])
    assert candidates(q) == candidates(q)
    assert candidates(p) != candidates(program([(8, 8, 1)], [(3,)]))
