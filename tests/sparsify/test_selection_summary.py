"""sparsify.selection_summary: rows, validation, the table and the dicts."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsify.selection_summary import (EXCLUDED, NOT_MATCHED, UNSUPPORTED, SelectionSummary, SummaryRow,
                                        tied_to)


def _rows():
    return [SummaryRow("h.0.attn.c_attn.weight", "Conv1D", (32, 96), "2:4", 0.5),
            SummaryRow("h.0.mlp.c_fc.weight", "Conv1D", (32, 64), "unstructured", 0.8),
            SummaryRow("wte.weight", "Embedding", (50, 32), selected=False, reason=EXCLUDED),
            SummaryRow("lm_head.weight", "Linear", (50, 32), selected=False, reason=tied_to("wte.weight")),
            SummaryRow("norm.scale", "LayerNormish", (4, 8), selected=False, reason=UNSUPPORTED)]


def test_selected_and_skipped_keep_model_order():
    s = SelectionSummary(_rows())
    assert [r.name for r in s.selected] == ["h.0.attn.c_attn.weight", "h.0.mlp.c_fc.weight"]
    assert [(r.name, r.reason) for r in s.skipped] == [("wte.weight", "excluded"),
                                                       ("lm_head.weight", "tied to wte.weight"),
                                                       ("norm.scale", "unsupported type")]
    assert [r.name for r in s] == [r.name for r in _rows()]
    assert len(s) == 5 and "wte.weight" in s and "nope" not in s
    assert s["h.0.mlp.c_fc.weight"].target == 0.8


def test_str_is_headline_then_aligned_table():
    s = SelectionSummary(_rows())
    assert str(s) == (
        "2 weights selected (5120 parameters), 3 skipped (3232 parameters: 1 excluded, 1 tied to wte.weight, "
        "1 unsupported type)\n"
        "name                    type          shape     pattern       target  status\n"
        "h.0.attn.c_attn.weight  Conv1D        (32, 96)  2:4           0.5     selected\n"
        "h.0.mlp.c_fc.weight     Conv1D        (32, 64)  unstructured  0.8     selected\n"
        "wte.weight              Embedding     (50, 32)  -             -       skipped: excluded\n"
        "lm_head.weight          Linear        (50, 32)  -             -       skipped: tied to wte.weight\n"
        "norm.scale              LayerNormish  (4, 8)    -             -       skipped: unsupported type")


def test_to_dict_is_json_ready_and_round_trips_rows():
    s = SelectionSummary(_rows())
    d = json.loads(json.dumps(s.to_dict()))
    assert [r["name"] for r in d["selected"]] == ["h.0.attn.c_attn.weight", "h.0.mlp.c_fc.weight"]
    assert d["skipped"][1] == {"name": "lm_head.weight", "layer_type": "Linear", "shape": [50, 32],
                               "pattern": None, "target": None, "selected": False, "reason": "tied to wte.weight"}
    again = [SummaryRow(**{**r, "shape": tuple(r["shape"])}) for r in d["selected"] + d["skipped"]]
    assert set(again) == set(_rows())


def test_empty_summary():
    s = SelectionSummary([])
    assert s.headline() == "0 weights selected (0 parameters), 0 skipped"
    assert s.table() == "name  type  shape  pattern  target  status"
    assert s.to_dict() == {"selected": [], "skipped": []}


def test_global_scope_row_has_no_target():
    row = SummaryRow("w", "Dense", (4, 4), "unstructured", None)
    assert row.target is None and "  -  " in SelectionSummary([row]).table()


@pytest.mark.parametrize("kwargs, message", [
    (dict(name="", layer_type="Dense", shape=(2, 2), pattern="unstructured"), "name must be a non-empty str"),
    (dict(name="w", layer_type="", shape=(2, 2), pattern="unstructured"), "layer_type must be a non-empty str"),
    (dict(name="w", layer_type="Dense", shape=(4,), pattern="unstructured"), "rank 2 or more"),
    (dict(name="w", layer_type="Dense", shape=(2, 2), pattern=None), "a selected row needs a pattern"),
    (dict(name="w", layer_type="Dense", shape=(2, 2), pattern="1:4", target=1.5), "target must be a float in"),
    (dict(name="w", layer_type="Dense", shape=(2, 2), pattern="1:4", target=float("nan")), "target must be"),
    (dict(name="w", layer_type="Dense", shape=(2, 2), pattern="1:4", reason="x"), "a selected row has no reason"),
    (dict(name="w", layer_type="Dense", shape=(2, 2), selected=False), "a skipped row needs a reason"),
    (dict(name="w", layer_type="Dense", shape=(2, 2), selected=False, reason=NOT_MATCHED, target=0.5),
     "no pattern or target"),
])
def test_bad_rows_raise_value_error_naming_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SummaryRow(**kwargs)


def test_bad_types_raise_type_error():
    with pytest.raises(TypeError, match="shape must be a sequence of ints"):
        SummaryRow("w", "Dense", 3, "unstructured")
    with pytest.raises(TypeError, match="selected must be a bool"):
        SummaryRow("w", "Dense", (2, 2), "unstructured", selected=1)
    with pytest.raises(TypeError, match="rows must be SummaryRow objects"):
        SelectionSummary([{"name": "w"}])
    with pytest.raises(KeyError, match="no row named 'x'"):
        SelectionSummary(_rows())["x"]
    with pytest.raises(ValueError, match="tied_to: name must be a non-empty str"):
        tied_to("")


_row = st.builds(
    lambda name, shape, sel, t: (SummaryRow(name, "Dense", shape, "unstructured", t) if sel
                                 else SummaryRow(name, "Dense", shape, selected=False, reason=NOT_MATCHED)),
    st.text("abc./_", min_size=1, max_size=8), st.lists(st.integers(0, 9), min_size=2, max_size=4),
    st.booleans(), st.none() | st.floats(0, 1))


@settings(max_examples=60, deadline=None)
@given(st.lists(_row, max_size=6, unique_by=lambda r: r.name))
def test_selected_and_skipped_partition_rows_and_table_has_one_line_each(rows):
    s = SelectionSummary(rows)
    assert len(s.selected) + len(s.skipped) == len(rows)
    assert {r.name for r in s.selected}.isdisjoint({r.name for r in s.skipped})
    lines = s.table().split("\n")
    assert len(lines) == len(rows) + 1
    # aligned: every column starts at the same offset on every line
    starts = [line.index("type") for line in lines[:1]]
    assert all(line[starts[0] - 2:starts[0]] == "  " for line in lines)
    assert s.headline().startswith(f"{len(s.selected)} weight")


# ----- summarize: the core's selection rule ---------------------------------------------------------
from sparsify.engine import select_layers
from sparsify.config import PruningConfig
from sparsify.selection_summary import summarize


def test_summarize_classifies_by_the_config_and_keeps_adapter_rows():
    cfg = {"target_sparsity": 0.5, "pattern": "2:4", "op_names": ["block"], "excluded_op_names": ["head"]}
    s = summarize(cfg, [("block0/q/kernel", "EinsumDense", (32, 2, 16)),
                        ("block0/head/kernel", "Dense", (32, 8)),
                        ("emb/embeddings", "Embedding", (64, 32)),
                        SummaryRow("block0/q/bias", "EinsumDense", (2, 16), selected=False, reason="not a kernel"),
                        ("block1/ffn/kernel", "Dense", (6, 3))],
                  unfit={"block1/ffn/kernel": "3 columns not divisible by 4"})
    assert [(r.name, r.status, r.pattern, r.target) for r in s] == [
        ("block0/q/kernel", "selected", "2:4", 0.5),
        ("block0/head/kernel", "skipped: excluded", None, None),
        ("emb/embeddings", "skipped: not matched", None, None),
        ("block0/q/bias", "skipped: not a kernel", None, None),
        ("block1/ffn/kernel", "skipped: pattern '2:4' does not fit (3 columns not divisible by 4)", None, None)]


@pytest.mark.parametrize("scope, target", [("local", 0.5), ("row", 0.5), ("global", None), ("erk", None)])
def test_summarize_target_per_scope(scope, target):
    s = summarize({"target_sparsity": 0.5, "pruning_scope": scope}, [("a", "Dense", (4, 4))])
    assert s["a"].target == target


def test_summarize_refuses_bad_items():
    with pytest.raises(TypeError, match=r"\(name, layer_type, shape\) tuples, got 'fc'"):
        summarize({}, ["fc"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["a/k", "b/k", "ab/k", "c/emb", "bc/k"]), unique=True, min_size=1),
       st.lists(st.sampled_from(["a", "b", "k", "emb", "^c", ".*"]), min_size=1, max_size=2),
       st.lists(st.sampled_from(["a", "b", "k", "emb", "^c"]), max_size=2))
def test_summarize_selects_what_the_engine_selects(names, op_names, excluded):
    cfg = PruningConfig(op_names=op_names, excluded_op_names=excluded)
    s = summarize(cfg, [(n, "Dense", (2, 2)) for n in names])
    try:
        chosen = select_layers(cfg, names)
    except ValueError:
        chosen = []
    assert [r.name for r in s.selected] == chosen


# ----- optional fields an adapter may fill: sparsity, an unknown shape -----------------------------
def test_a_selected_row_may_carry_its_sparsity_shown_in_table_and_dict():
    s = SelectionSummary([SummaryRow("fc.weight", "Linear", (4, 8), "2:4", 0.5, sparsity=0.25),
                          SummaryRow("emb.weight", "Embedding", (10, 4), selected=False, reason=EXCLUDED)])
    assert s.table() == ("name        type       shape    pattern  target  sparsity  status\n"
                         "fc.weight   Linear     (4, 8)   2:4      0.5     0.25      selected\n"
                         "emb.weight  Embedding  (10, 4)  -        -       -         skipped: excluded")
    assert s.to_dict()["selected"][0]["sparsity"] == 0.25 and "sparsity" not in s.to_dict()["skipped"][0]
    assert SummaryRow(**{**s.to_dict()["selected"][0], "shape": (4, 8)}) == s["fc.weight"]


def test_a_skipped_row_of_unknown_shape_counts_no_parameters():
    row = SummaryRow("lazy.weight", "LazyLinear", (), selected=False, reason="uninitialized")
    assert row.size == 0 and "lazy.weight  LazyLinear  ?" in SelectionSummary([row]).table()
    assert SelectionSummary([row]).headline() == "0 weights selected (0 parameters), 1 skipped (0 parameters: " \
                                                 "1 uninitialized)"


@pytest.mark.parametrize("kwargs, message", [
    (dict(shape=(), pattern="2:4"), "rank 2 or more"),
    (dict(shape=(2, 2), pattern="2:4", sparsity=1.5), "sparsity must be a float in"),
    (dict(shape=(2, 2), pattern="2:4", sparsity=True), "sparsity must be a float in"),
    (dict(shape=(2, 2), selected=False, reason=EXCLUDED, sparsity=0.5), "a skipped row has no sparsity"),
])
def test_bad_optional_fields_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SummaryRow("w", "Dense", **kwargs)
