import numpy as np
import pytest

import sparsify.criteria as criteria_module
from sparsify import PruningConfig, PruningEngine
from sparsify.criteria import (get_criterion, magnitude, register_criterion, registered_criteria,
                               scored_every_step, snip, snip_momentum, unregister_criterion, wanda)


def test_values():
    w, g = np.array([-2.0, 1.0, 0.5]), np.array([0.5, -3.0, 0.0])
    assert magnitude(w).tolist() == [2.0, 1.0, 0.5]
    assert snip(w, g).tolist() == [1.0, 3.0, 0.0]
    first = snip_momentum(None, w, g, momentum=0.5)
    assert first.tolist() == [0.5, 1.5, 0.0]
    assert snip_momentum(first, w, np.zeros(3), momentum=0.5).tolist() == [0.25, 0.75, 0.0]


def test_errors_and_registry():
    assert registered_criteria()[:4] == ("magnitude", "snip", "snip_momentum", "wanda")
    assert criteria_module.CRITERIA == registered_criteria()
    assert scored_every_step("snip") and scored_every_step("snip_momentum")
    assert not scored_every_step("magnitude") and not scored_every_step("wanda")
    with pytest.raises(ValueError, match="criterion must be one of"):
        scored_every_step("taylor")
    with pytest.raises(ValueError, match="momentum must be in"):
        snip_momentum(None, np.ones(1), np.ones(1), momentum=1.5)


@pytest.mark.parametrize("dtype", ["i1", "i2", ">i4", "i8"])
def test_magnitude_of_the_most_negative_integer_is_its_true_magnitude(dtype):
    low = np.iinfo(dtype).min                       # abs() wraps it to itself in its own type
    w = np.array([low, -1, 0, 5], dtype=dtype)
    assert magnitude(w).tolist() == [-low, 1, 0, 5]
    assert int(magnitude(w[0])) == -low             # NumPy scalars too


def test_wanda_scales_each_input_column_by_its_activation_norm():
    w = np.array([[1.0, -2.0, 0.5], [-4.0, 1.0, 1.0]])
    norms = np.array([[1.0, 3.0, 0.0]])
    assert wanda(w, norms).tolist() == [[1.0, 6.0, 0.0], [4.0, 3.0, 0.0]]
    assert get_criterion("wanda").needs == ("weight", "activation")


def test_a_registered_criterion_drives_the_engine_and_the_config():
    @register_criterion("test_distance", needs=("weight",))
    def distance(weight, **_):
        return abs(weight - 0.1)
    try:
        cfg = PruningConfig(criterion="test_distance", target_sparsity=0.5, end_step=0)
        masks = PruningEngine(cfg).compute_masks({"w": np.array([[0.1, 1.0, 0.2, -0.3]])}, step=0)
        assert masks["w"].tolist() == [[False, True, False, True]]      # distances 0, 0.9, 0.1, 0.4
    finally:
        unregister_criterion("test_distance")
    with pytest.raises(ValueError, match="criterion must be one of .* got 'test_distance'"):
        PruningConfig(criterion="test_distance")


def test_a_state_criterion_returns_its_new_state():
    cfg = PruningConfig(criterion="snip_momentum", criterion_momentum=0.5)
    scores, state = get_criterion("snip_momentum").scores(config=cfg, weight=np.array([2.0]), grad=np.array([1.0]),
                                                          state=None)
    assert scores.tolist() == state.tolist() == [1.0]


@pytest.mark.parametrize("name,needs,match", [
    ("", ("weight",), "non-empty string"),
    ("magnitude", ("weight",), "already registered"),
    ("x", ("weights",), "needs must name distinct inputs"),
    ("x", ("weight", "weight"), "needs must name distinct inputs"),
    ("x", "weight", "needs must be a non-empty tuple"),
])
def test_bad_registrations_are_refused(name, needs, match):
    with pytest.raises(ValueError, match=match):
        register_criterion(name, needs=needs)
    assert "x" not in registered_criteria()


def test_missing_inputs_are_named():
    with pytest.raises(ValueError, match=r"criterion 'wanda' needs \['weight', 'activation'\]; missing \['activation'\]"):
        get_criterion("wanda").scores(weight=np.ones(2))
    with pytest.raises(ValueError, match="needs the input activation statistics of 'w'"):
        PruningEngine({"criterion": "wanda", "end_step": 0}).compute_masks({"w": np.ones((2, 2))}, step=0)


@pytest.mark.parametrize("wdtype,adtype", [(np.float32, np.float32), (np.float64, np.float64),
                                           (np.float32, np.float64), (np.float64, np.float32)])
def test_scores_into_writes_the_scores_bit_for_bit_or_declines(wdtype, adtype):
    """Into a buffer of the scores' dtype: the same bits as ``scores``; a weight of another dtype than the
    buffer (the product would be rounded differently): None, the caller allocates."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((3, 5)) * 1e3).astype(wdtype)
    w[0, 0] = -0.0
    a = rng.random(5).astype(adtype) + 0.5
    for name, inputs in (("magnitude", {"weight": w}), ("wanda", {"weight": w, "activation": a})):
        crit = get_criterion(name)
        want = np.asarray(crit.scores(**inputs))
        out = np.empty(w.shape, dtype=want.dtype)
        got = crit.scores_into(out, **inputs)
        if want.dtype == w.dtype:
            assert got is out
            np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
        else:
            assert got is None
    assert get_criterion("magnitude").scores_into(np.empty(2, np.float32), weight=np.array([1, -2])) is None
    assert get_criterion("snip").scores_into(np.empty(2), weight=np.ones(2), grad=np.ones(2)) is None


def test_a_criterion_that_returns_its_input_is_not_written_into_by_a_streamed_update():
    """A row-separable criterion without ``into`` may hand back a view of the weight: the update's -inf for
    units pruned before goes into a new array, never into the weight."""
    register_criterion("as_is_test", needs=("weight",), row_separable=True)(lambda weight, **_: weight)
    try:
        w = np.random.default_rng(1).standard_normal((64, 32)).astype(np.float32)
        before = w.copy()
        pre = np.random.default_rng(2).random(w.shape) < 0.7
        for scope in ("local", "global"):
            eng = PruningEngine({"criterion": "as_is_test", "pruning_scope": scope, "start_step": 0, "end_step": 0})
            masks = eng.masks_at_sparsity({"fc": w}, 0.5, {"fc": pre})
            np.testing.assert_array_equal(w, before)
            assert not masks["fc"][~pre].any()
    finally:
        unregister_criterion("as_is_test")
