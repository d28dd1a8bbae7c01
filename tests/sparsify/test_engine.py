import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsify.criteria import register_criterion, unregister_criterion
from sparsify.engine import PruningEngine, select_names
from sparsify.patterns import get_pattern
from sparsify.protocol import PruningProtocol


def test_select_layers_by_regex_and_ndim():
    eng = PruningEngine({"op_names": ["conv", "fc"], "excluded_op_names": ["fc2"]})
    names = ["conv1.weight", "conv1.bias", "fc1.weight", "fc2.weight", "head.weight"]
    shapes = {"conv1.weight": (4, 3, 3, 3), "conv1.bias": (4,), "fc1.weight": (2, 4), "fc2.weight": (2, 2),
              "head.weight": (1, 2)}
    assert eng.select_layers(names, shapes) == ["conv1.weight", "fc1.weight"]
    assert select_names(names, [".*"], ["bias"]) == ["conv1.weight", "fc1.weight", "fc2.weight", "head.weight"]
    with pytest.raises(ValueError, match=r"match no prunable weight; prunable weights are: \[conv1.weight"):
        PruningEngine({"op_names": ["nothing"]}).select_layers(names, shapes)


def test_check_layers_names_the_layer():
    eng = PruningEngine({"pattern": "4x1"})
    eng.check_layers({"ok": (8, 4)})
    with pytest.raises(ValueError, match="layer 'bad'"):
        eng.check_layers({"ok": (8, 4), "bad": (6, 4)})


def test_schedule_following_and_masks_at_update_points():
    eng = PruningEngine({"target_sparsity": 0.75, "start_step": 0, "end_step": 4, "pruning_frequency": 2,
                         "exponent": 1.0})
    w = {"w": np.arange(1.0, 9.0).reshape(2, 4)}
    assert [eng.target_sparsity(t) for t in range(6)] == [0.0, 0.0, 0.375, 0.375, 0.75, 0.75]
    assert eng.update_due(-1, 0) and not eng.update_due(0, 1) and eng.update_due(1, 3)
    m = eng.compute_masks(w, 2)["w"]
    assert m.astype(int).tolist() == [[0, 0, 0, 1], [1, 1, 1, 1]]
    m2 = eng.compute_masks({"w": w["w"][:, ::-1].copy()}, 4, pre_masks={"w": m})["w"]
    assert (m2 <= m).all() and (~m2).sum() == 6


def test_non_monotone_config_can_revive():
    eng = PruningEngine({"target_sparsity": 0.5, "end_step": 0, "monotone": False})
    pre = {"w": np.array([[False, True, True, True]])}
    m = eng.compute_masks({"w": np.array([[9.0, 1.0, 2.0, 8.0]])}, 0, pre)["w"]
    assert m.tolist() == [[True, False, False, True]]


def test_gradient_criteria_need_scores():
    eng = PruningEngine({"criterion": "snip", "end_step": 0, "target_sparsity": 0.5})
    assert eng.scored_every_step
    with pytest.raises(ValueError, match="needs scores"):
        eng.compute_masks({"w": np.ones((2, 2))}, 0)
    m = eng.compute_masks({"w": np.ones((2, 2))}, 0, scores={"w": np.array([[3.0, 1.0], [2.0, 0.0]])})["w"]
    assert m.tolist() == [[True, False], [True, False]]


def test_masking_active_after_end():
    eng = PruningEngine({"end_step": 10, "leave_enabled": False})
    assert eng.masking_active(10) and not eng.masking_active(11)
    assert PruningEngine({"end_step": 10}).masking_active(1000)


def test_compute_masks_checks_scores_and_pre_masks_against_the_weights():
    eng = PruningEngine({"target_sparsity": 0.5, "start_step": 0, "end_step": 0})
    w = {"w": np.arange(4.0).reshape(2, 2)}
    with pytest.raises(ValueError, match=r"scores\['w'\] has shape \(3, 3\), but the weight has shape \(2, 2\)"):
        eng.compute_masks(w, 0, scores={"w": np.ones((3, 3))})
    with pytest.raises(ValueError, match=r"scores must have exactly the weights' keys: missing \['w'\], unknown \['v'\]"):
        eng.compute_masks(w, 0, scores={"v": np.ones((2, 2))})
    with pytest.raises(ValueError, match=r"pre_masks names weights \['x'\] that are not being pruned"):
        eng.compute_masks(w, 0, pre_masks={"x": np.ones((2, 2), bool)})
    with pytest.raises(ValueError, match=r"pre_masks\['w'\] has shape \(4,\)"):
        eng.compute_masks(w, 0, pre_masks={"w": np.ones(4, bool)})
    with pytest.raises(TypeError, match=r"weights\['w'\] must be a real numeric array .* got dtype object"):
        eng.compute_masks({"w": np.array([[1, "a"]], dtype=object)}, 0)


def test_empty_weights_have_nothing_to_prune():
    eng = PruningEngine({"target_sparsity": 0.5, "pattern": "2:4", "start_step": 0, "end_step": 0})
    eng.check_layers({"empty": (0, 4), "w": (1, 4)})
    masks = eng.compute_masks({"empty": np.zeros((0, 4), np.float32), "w": np.array([[4.0, 1.0, 3.0, 2.0]])}, 0)
    assert masks["empty"].shape == (0, 4) and masks["w"].tolist() == [[True, False, True, False]]


def test_magnitude_keeps_the_most_negative_integer_weight():
    eng = PruningEngine({"target_sparsity": 0.25, "start_step": 0, "end_step": 0})
    w = np.array([[-128, 1], [2, 3]], dtype=np.int8)    # |-128| is the largest magnitude: 1 is pruned
    assert eng.compute_masks({"w": w}, 0)["w"].tolist() == [[True, False], [True, True]]


# ----- externally scheduled updates: masks_at_sparsity --------------------------------------

def test_masks_at_sparsity_prunes_the_callers_fraction_locally():
    eng = PruningEngine({"target_sparsity": 0.9, "start_step": 0, "end_step": 0})     # the schedule is not read
    w = {"a": np.array([[4.0, -1.0], [3.0, 2.0]]), "b": np.array([[0.5, -6.0, 5.0, 0.25]])}
    masks = eng.masks_at_sparsity(w, 0.5)
    assert list(masks) == ["a", "b"]
    assert masks["a"].tolist() == [[True, False], [True, False]]
    assert masks["b"].tolist() == [[False, True, True, False]]


def test_masks_at_sparsity_global_ties_go_to_the_earlier_weight():
    eng = PruningEngine({"pruning_scope": "global", "max_sparsity_ratio_per_layer": 0.75})
    w = {"first": np.array([[1.0, 2.0], [5.0, 6.0]]), "second": np.array([[1.0, 2.0], [7.0, 8.0]])}
    masks = eng.masks_at_sparsity(w, 0.375)      # 3 of 8: 1.0 (first), 1.0 (second), then 2.0 of "first"
    assert masks["first"].tolist() == [[False, False], [True, True]]
    assert masks["second"].tolist() == [[False, True], [True, True]]
    swapped = eng.masks_at_sparsity({"second": w["second"], "first": w["first"]}, 0.375)
    assert swapped["second"].tolist() == [[False, False], [True, True]]
    assert swapped["first"].tolist() == [[False, True], [True, True]]


def test_masks_at_sparsity_keeps_pruned_weights_pruned():
    w = {"w": np.array([[9.0, 1.0, 2.0, 8.0]])}
    pre = {"w": np.array([[False, True, True, True]])}
    monotone = PruningEngine({}).masks_at_sparsity(w, 0.5, pre_masks=pre)["w"]
    assert monotone.tolist() == [[False, False, True, True]]
    revived = PruningEngine({"monotone": False}).masks_at_sparsity(w, 0.5, pre_masks=pre)["w"]
    assert revived.tolist() == [[True, False, False, True]]


def test_masks_at_sparsity_with_a_pattern_of_the_callers_count_rule():
    pattern = copy.copy(get_pattern("1x1"))
    pattern.keep_one_unit, pattern.max_sparsity_ratio_per_layer = False, 1.0     # the seed API's rule
    w = {"w": np.array([[3.0, -1.0, 2.0]])}
    assert PruningEngine({}, pattern=pattern).masks_at_sparsity(w, 1.0)["w"].tolist() == [[False, False, False]]
    assert PruningEngine({}).masks_at_sparsity(w, 0.9)["w"].tolist() == [[True, False, False]]   # 0.98 cap, one kept
    with pytest.raises(ValueError, match=r"sparsity must be in \[0, 1\), got 1.0"):
        PruningEngine({}).masks_at_sparsity(w, 1.0)
    with pytest.raises(ValueError, match=r"sparsity for pattern '2:4' must be <= N/M = 0.5, got 0.75"):
        PruningEngine({"pattern": "2:4"}).masks_at_sparsity({"w": np.ones((1, 4))}, 0.75)
    with pytest.raises(TypeError, match=r"sparsity must be a number, got True"):
        PruningEngine({}).masks_at_sparsity(w, True)
    with pytest.raises(TypeError, match=r"pattern must be a sparsify Pattern .*got '1x1'"):
        PruningEngine({}, pattern="1x1")


def test_masks_at_sparsity_scores_with_a_registered_criterion():
    @register_criterion("test_engine_distance_from_one", needs=("weight",))
    def distance(weight, **_):
        return abs(weight - 1.0)
    try:
        eng = PruningEngine({"criterion": "test_engine_distance_from_one"})
        masks = eng.masks_at_sparsity({"w": np.array([[1.0, 3.0, 0.75, -2.0]])}, 0.5)["w"]
    finally:
        unregister_criterion("test_engine_distance_from_one")
    assert masks.tolist() == [[False, True, False, True]]


def test_masks_at_sparsity_leaves_empty_weights_dense():
    masks = PruningEngine({"pattern": "2:4"}).masks_at_sparsity(
        {"empty": np.zeros((0, 4), np.float32), "w": np.array([[4.0, 1.0, 3.0, 2.0]])}, 0.5)
    assert masks["empty"].shape == (0, 4) and masks["w"].tolist() == [[True, False, True, False]]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2 ** 32 - 1), st.sampled_from(["1x1", "2x1", "2:4"]), st.sampled_from(["local", "global"]),
       st.floats(0.0, 0.5))
def test_masks_at_sparsity_equals_the_protocols_update_at_that_sparsity(seed, pattern, scope, sparsity):
    rng = np.random.default_rng(seed)
    w = {"a": rng.integers(-3, 4, size=(4, 8)).astype(np.float32), "b": rng.normal(size=(2, 4))}
    proto = PruningProtocol({"pattern": pattern, "pruning_scope": scope, "target_sparsity": sparsity,
                             "start_step": 0, "end_step": 0}, {n: a.shape for n, a in w.items()})
    first = proto.advance(0, w).masks
    external = PruningEngine({"pattern": pattern, "pruning_scope": scope})
    got = external.masks_at_sparsity(w, proto.target_sparsity(0))
    assert all(np.array_equal(got[n], first[n]) for n in w)
    w2 = {n: a * first[n] + rng.normal(size=a.shape) for n, a in w.items()}
    again = PruningProtocol({"pattern": pattern, "pruning_scope": scope, "target_sparsity": 0.5,
                             "start_step": 0, "end_step": 0}, {n: a.shape for n, a in w.items()})
    again.restore(-1, first)
    want = again.advance(0, w2).masks
    got2 = external.masks_at_sparsity(w2, 0.5, pre_masks=first)
    assert all(np.array_equal(got2[n], want[n]) for n in w)


def test_compute_masks_names_every_misfit_weight_at_once():
    eng = PruningEngine({"target_sparsity": 0.5, "pattern": "4x1", "start_step": 0, "end_step": 0})
    weights = {"a": np.ones((3, 4)), "fits": np.ones((4, 4)), "b": np.ones((5, 2, 1, 1))}
    pre = {n: np.ones(w.shape, bool) for n, w in weights.items()}
    with pytest.raises(ValueError) as err:
        eng.compute_masks(weights, step=0, pre_masks=pre)
    assert str(err.value) == (
        "pattern '4x1' does not fit 2 of 3 selected layers: 'a' (2-D view (3, 4): block 4x1 does not divide it); "
        "'b' (2-D view (5, 2): block 4x1 does not divide it); set skip_incompatible_layers=True to leave them dense, "
        "or exclude them with excluded_op_names")
    assert all(m.all() for m in pre.values())               # nothing was changed
    with pytest.raises(ValueError, match=r"fits none of the 2 selected layers: 'a' .*; 'b' "):
        eng.masks_at_sparsity({"a": weights["a"], "b": weights["b"]}, 0.5)


def test_kernel_block_misfits_are_named_together():
    eng = PruningEngine({"target_sparsity": 0.5, "pattern": "2x2x1", "start_step": 0, "end_step": 0})
    with pytest.raises(ValueError, match=r"fits none of the 2 selected layers: 'c1' .*; 'c2' "):
        eng.compute_masks({"c1": np.ones((3, 2, 1, 1)), "c2": np.ones((5, 4, 3, 3))}, step=0)


@pytest.mark.parametrize("config", [
    {}, {"pattern": "2:4"}, {"pattern": "4x1", "skip_incompatible_layers": True}, {"pruning_scope": "global"},
    {"pruning_scope": "row"}, {"criterion": "wanda"}, {"regrowth": "set", "sparsity_decay_type": "constant"}])
def test_a_scalar_weight_is_refused_naming_the_layer(config):
    """Issue 47: whatever the pattern, scope or criterion, the error names the layer (and no mask of shape (1,))."""
    engine = PruningEngine({"end_step": 0, **config})
    weights = {"fc": np.ones((4, 4), np.float32), "w": np.float32(1.0)}
    with pytest.raises(ValueError, match=r"^layer 'w': the weight must have at least 1 dimension, "
                                         r"got a scalar of shape \(\)$"):
        engine.compute_masks(weights, step=0)
    with pytest.raises(ValueError, match=r"^layer 'w': the weight must have at least 1 dimension"):
        engine.check_layers({"fc": (4, 4), "w": ()})
