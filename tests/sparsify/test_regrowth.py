import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sparsify import PruningConfig, PruningEngine, PruningProtocol
from sparsify.regrowth import regrow, regrowth_fraction


def test_fraction_decays_along_a_cosine_to_zero_at_end_step():
    cfg = PruningConfig(regrowth="set", regrowth_fraction=0.3, start_step=100, end_step=300)
    got = [regrowth_fraction(cfg, s) for s in (0, 100, 200, 300, 400)]
    assert got == [0.3, 0.3, pytest.approx(0.15, abs=1e-12), 0.0, 0.0]
    assert regrowth_fraction(PruningConfig(), 0) == 0.0        # regrowth="none"


def test_rigl_drops_the_lowest_kept_and_grows_the_largest_gradients_literal():
    masks = {"w": np.array([[True, True, True, True, False, False, False, False]])}
    scores = {"w": np.array([[4.0, 3.0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0]])}
    grads = {"w": np.array([[9.0, 9.0, 9.0, 9.0, 0.5, -7.0, 0.1, 7.0]])}
    new, grown = regrow(masks, scores, grads, 0.5, "rigl", step=3)
    # 2 of 4 kept dropped (scores 1 and 2); grown: |g| 7 and 7 (tie: lower index first, both fit)
    assert new["w"].astype(int).tolist() == [[1, 1, 0, 0, 0, 1, 0, 1]]
    assert grown["w"].astype(int).tolist() == [[0, 0, 0, 0, 0, 1, 0, 1]]


def test_regrowth_never_grows_what_it_just_dropped_and_ties_go_to_the_lower_index():
    masks = {"w": np.array([[True, True, False, False, False]])}
    scores = {"w": np.array([[1.0, 5.0, 0.0, 0.0, 0.0]])}
    grads = {"w": np.array([[100.0, 0.0, 1.0, 1.0, 1.0]])}
    new, grown = regrow(masks, scores, grads, 0.5, "rigl", step=0)
    assert new["w"].astype(int).tolist() == [[0, 1, 1, 0, 0]]


def test_set_is_seeded_by_step_and_layer():
    masks = {"a": np.arange(64).reshape(8, 8) % 3 == 0, "b": np.arange(64).reshape(8, 8) % 2 == 0}
    scores = {n: np.random.default_rng(1).random((8, 8)) for n in masks}
    one = regrow(masks, scores, None, 0.3, "set", step=7)
    two = regrow(masks, scores, None, 0.3, "set", step=7)
    other = regrow(masks, scores, None, 0.3, "set", step=8)
    assert all(np.array_equal(one[0][n], two[0][n]) for n in masks)
    assert any(not np.array_equal(one[0][n], other[0][n]) for n in masks)


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 6), cols=st.integers(2, 12), fraction=st.floats(0.0, 0.9), seed=st.integers(0, 1000),
       method=st.sampled_from(["rigl", "set"]))
def test_regrowth_keeps_the_count_and_grows_only_pruned_entries(rows, cols, fraction, seed, method):
    rng = np.random.default_rng(seed)
    mask = rng.random((rows, cols)) < 0.5
    scores = rng.random((rows, cols))
    grads = rng.standard_normal((rows, cols))
    new, grown = regrow({"w": mask}, {"w": scores}, {"w": grads}, fraction, method, step=seed)
    assert new["w"].sum() == mask.sum()                      # sparsity unchanged
    assert not (grown["w"] & mask).any()                     # grown only where pruned before
    assert (new["w"] >= grown["w"]).all()


def test_engine_regrowth_with_a_constant_schedule_keeps_the_exact_sparsity():
    cfg = PruningConfig(sparsity_decay_type="constant", target_sparsity=0.5, start_step=0, end_step=100,
                        pruning_frequency=10, regrowth="rigl", regrowth_fraction=0.5)
    eng = PruningEngine(cfg)
    w = {"w": np.array([[1.0, 2.0, 3.0, 4.0]])}
    first, grown = eng.compute_update(w, 0, grads={"w": np.array([[5.0, 0.0, 0.0, 0.0]])})
    # scheduled: prune 1.0 and 2.0; regrowth at fraction 0.5 drops 3.0 and grows the largest gradient (index 0)
    assert first["w"].tolist() == [[True, False, False, True]] and grown["w"].tolist() == [[True, False, False, False]]
    with pytest.raises(ValueError, match="no gradients were collected"):
        eng.compute_update(w, 10)


def test_protocol_reports_grown_entries_and_reads_gradients():
    proto = PruningProtocol({"sparsity_decay_type": "constant", "target_sparsity": 0.5, "end_step": 10,
                             "pruning_frequency": 5, "regrowth": "set", "regrowth_fraction": 0.5}, {"w": (2, 4)})
    update = proto.advance(0, {"w": np.arange(8.0).reshape(2, 4)})
    assert update.grown["w"].sum() == 2 and update.masks["w"].sum() == 4
    assert (update.masks["w"] >= update.grown["w"]).all()


@pytest.mark.parametrize("changes,match", [
    ({"regrowth": "rigl", "pattern": "4x1"}, "regrowth='rigl' works on single weights"),
    ({"regrowth": "sets"}, "regrowth must be one of .*did you mean 'set'"),
    ({"regrowth": "set", "sparsity_decay_type": "constant", "end_step": -1}, "end_step must be >= 0"),
    ({"regrowth_fraction": 1.0}, r"regrowth_fraction must be in \[0, 1\)"),
    ({"pruned_gradient": "ste"}, "pruned_gradient must be one of"),
    ({"pruning_scope": "row", "pattern": "2:4"}, "pruning_scope='row' works on single weights"),
])
def test_config_refuses_what_regrowth_and_row_scope_cannot_do(changes, match):
    with pytest.raises(ValueError, match=match):
        PruningConfig(**changes)


def test_regrowth_with_row_scope_is_refused_naming_both():
    from sparsify import PruningConfig
    with pytest.raises(ValueError, match=r"regrowth='rigl' swaps weights between the rows.*pruning_scope='row'"):
        PruningConfig(regrowth="rigl", pruning_scope="row")
    assert PruningConfig(regrowth="set", pruning_scope="erk").pruning_scope == "erk"
