"""CoreMaskCreator: mask values from the core engine (externally scheduled updates, registered criteria), build-time
sparsity checks, one core call for a global group."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import sparsify
import sparsify_tf
from sparsify.criteria import register_criterion, unregister_criterion
from sparsify_tf.seed.mask_creator import CoreMaskCreator, seed_criterion
from sparsify_tf.seed.mask_creator_coercion import get_mask_creator

tf1 = tf.compat.v1


def test_literal_2_in_4_mask_in_tf_layout():
    # dense kernel (in=4, out=1): canonical row [4, 1, 3, 2]; "2:4" prunes the 2 smallest of the group
    mc = get_mask_creator("2:4")
    got = mc.masks_numpy({"w": np.array([[4.0], [1.0], [3.0], [2.0]], np.float32)}, {"w": "dense"}, 0.5)["w"]
    assert got.dtype == np.float32 and got.ravel().tolist() == [1.0, 0.0, 1.0, 0.0]


def test_check_sparsity_names_the_parameter():
    assert CoreMaskCreator("2:4").check_sparsity(0.5, "final_sparsity") == 0.5
    assert CoreMaskCreator("4x1").check_sparsity(0.95) == 0.95
    with pytest.raises(ValueError, match=r"final_sparsity=0.6 cannot be reached with mask_creator '2:4'"):
        CoreMaskCreator("2:4").check_sparsity(0.6, "final_sparsity")
    assert CoreMaskCreator("1x1").check_sparsity(1.0) == 1.0            # a name follows the seed: 1.0 prunes all
    with pytest.raises(ValueError, match=r"sparsity=1.0 cannot be reached with mask_creator '1x1'.*\[0, 1\)"):
        CoreMaskCreator(sparsify.get_pattern("1x1")).check_sparsity(1.0)  # a Pattern keeps the core's rule
    with pytest.raises(ValueError, match=r"sparsity=1.2 cannot be reached.*\[0, 1\]"):
        CoreMaskCreator("1x1").check_sparsity(1.2)


def test_global_masks_in_one_core_call_equal_the_core():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(8, 4)).astype(np.float32) * 0.1
    b = rng.normal(size=(4, 8)).astype(np.float32)
    spec = {"pattern": "1x1", "pruning_scope": "global"}
    mc = get_mask_creator(spec)
    assert mc.is_global and not get_mask_creator("1x1").is_global
    g = tf.Graph()
    with g.as_default():
        outs = mc.create_sparsity_masks([tf.constant(a), tf.constant(b)], tf.constant(0.6, tf.float64), None,
                                        ["dense", "dense"], ["a", "b"])
        assert len([op for op in g.get_operations() if op.type.startswith("PyFunc")]) == 1
        with pytest.raises(ValueError, match="must be non-empty and of equal length"):
            mc.create_sparsity_masks([tf.constant(a)], tf.constant(0.6, tf.float64), None, ["dense"], ["a", "b"])
    with tf1.Session(graph=g) as sess:
        got_a, got_b = sess.run(outs)
    want = sparsify.get_pattern(spec).get_masks({"a": np.abs(a.T), "b": np.abs(b.T)}, 0.6)
    np.testing.assert_array_equal(got_a.T != 0, want["a"])
    np.testing.assert_array_equal(got_b.T != 0, want["b"])
    assert (got_a == 0).sum() > (got_b == 0).sum()           # one threshold: the small layer gives more


def _dense(n_in, n_out, seed=0):
    return np.random.default_rng(seed).permutation(n_in * n_out).reshape(n_in, n_out).astype(np.float32) + 1.0


def test_a_name_or_dict_has_no_per_layer_cap_unless_it_asks():
    w = {"w": _dense(10, 5)}                                # 50 weights
    pruned = lambda mc, s: int((mc.masks_numpy(w, {"w": "dense"}, s)["w"] == 0).sum())
    assert pruned(get_mask_creator("1x1"), 0.995) == 50     # round(49.75) = 50: the seed's count, no cap
    assert pruned(get_mask_creator("1x1"), 0.9) == 45
    assert pruned(get_mask_creator("1x1"), 1.0) == 50
    assert pruned(get_mask_creator({"pattern": "1x1", "max_sparsity_ratio_per_layer": 0.8}), 0.9) == 40
    assert pruned(CoreMaskCreator("1x1", max_sparsity_ratio_per_layer=0.5), 0.9) == 25
    # objects of the core keep the core's rules: its 0.98 cap and one unit kept
    assert pruned(get_mask_creator(sparsify.get_pattern("1x1")), 0.99) == 49
    assert pruned(get_mask_creator(sparsify.PruningConfig(pattern="1x1", target_sparsity=0.5)), 0.99) == 49
    with pytest.raises(ValueError, match="max_sparsity_ratio_per_layer must be a number in"):
        CoreMaskCreator("1x1", max_sparsity_ratio_per_layer=1.5)
    with pytest.raises(ValueError, match="applies to a pattern name or dict"):
        CoreMaskCreator(sparsify.get_pattern("1x1"), max_sparsity_ratio_per_layer=0.5)


def test_the_seed_pattern_is_a_copy():
    shared = sparsify.get_pattern("4x1")
    mc = get_mask_creator({"pattern": "4x1"})
    assert mc.pattern is not shared and shared.keep_one_unit and not mc.pattern.keep_one_unit


def test_sparseml_mask_types_and_bad_names():
    assert type(get_mask_creator("unstructured")).__name__ == "UnstructuredPruningMaskCreator"
    assert str(get_mask_creator("[4, 1]")) == "[4, 1]" and str(get_mask_creator("filter")) == "filter"
    with pytest.raises(ValueError, match=r"mask_creator: pattern must be one of .*or a SparseML mask type"):
        get_mask_creator("diagonal")
    with pytest.raises(TypeError, match="mask_creator must be a pattern name"):
        get_mask_creator(3)


def test_kind_is_inferred_from_the_rank():
    g = tf.Graph()
    with g.as_default():
        k = tf.constant(np.arange(1.0, 9.0, dtype=np.float32).reshape(4, 2))
        mask = get_mask_creator("1x1").create_sparsity_mask(k, tf.constant(0.5, tf.float64))
        with pytest.raises(ValueError, match=r"must be 2-D \(MatMul\) or 3-D to 5-D"):
            get_mask_creator("1x1").create_sparsity_mask(tf.constant([1.0, 2.0]), tf.constant(0.5, tf.float64))
    with tf1.Session(graph=g) as sess:
        assert sess.run(mask).ravel().tolist() == [0, 0, 0, 0, 1, 1, 1, 1]


def test_masks_come_from_the_engines_externally_scheduled_update():
    kernels = {"a": np.array([[4.0, -1.0], [0.5, 2.0], [3.0, -6.0]], np.float32),        # dense (in=3, out=2)
               "b": np.array([[0.25, 5.0], [-1.0, 2.0]], np.float32)}
    mc = CoreMaskCreator({"pattern": "1x1", "pruning_scope": "global"})
    got = mc.masks_numpy(kernels, {"a": "dense", "b": "dense"}, 0.4)
    # 4 of 10 by |w|, one threshold: 0.25 (b), 0.5 (a), then the two 1.0s: "a" is first in the canonical order
    assert got["a"].tolist() == [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    assert got["b"].tolist() == [[0.0, 1.0], [0.0, 1.0]]
    engine = mc.engine_for(mc.pattern)
    assert engine.pattern is mc.pattern and engine.config.criterion == "magnitude"
    assert mc.engine_for(mc.pattern) is engine                          # one engine per pattern
    want = engine.masks_at_sparsity({n: k.T for n, k in kernels.items()}, 0.4)
    assert all(np.array_equal(got[n] != 0, want[n].T) for n in kernels)


def test_criterion_is_a_registered_weight_only_criterion():
    assert CoreMaskCreator("4x1").criterion == "magnitude"
    assert seed_criterion(None, sparsify.PruningConfig(pattern="4x1")) == "magnitude"
    with pytest.raises(ValueError, match=r"criterion='wanda' needs \['weight', 'activation'\]; the seed API reads "
                                         r"only the weights: use 'magnitude'.* a criterion registered with"):
        CoreMaskCreator("1x1", criterion="wanda")
    with pytest.raises(ValueError, match=r"mask_creator: criterion='snip_momentum' needs"):
        get_mask_creator({"pattern": "1x1", "criterion": "snip_momentum"})
    with pytest.raises(ValueError, match=r"criterion must be one of the registered criteria that need only the "
                                         r"weight \('magnitude'.*\), got 'nope'"):
        CoreMaskCreator("1x1", criterion="nope")
    with pytest.raises(TypeError, match=r"criterion must be the name of a registered criterion, got 3"):
        CoreMaskCreator("1x1", criterion=3)

    @register_criterion("test_seed_creator_negated", needs=("weight",))
    def negated(weight, **_):
        return -abs(weight)
    try:
        mc = get_mask_creator({"pattern": "1x1", "criterion": "test_seed_creator_negated"})
        assert repr(mc) == "CoreMaskCreator(PatternNxM('1x1', scope='local'), monotone=True, " \
                           "criterion='test_seed_creator_negated')"
        got = mc.masks_numpy({"w": np.array([[1.0], [-4.0], [2.0], [3.0]], np.float32)}, {"w": "dense"}, 0.5)
    finally:
        unregister_criterion("test_seed_creator_negated")
    assert got["w"].ravel().tolist() == [1.0, 0.0, 1.0, 0.0]          # the largest magnitudes go first


@pytest.mark.parametrize("config", [{"pattern": "4x1", "pruned_gradient": "straight_through"},
                                    sparsify.PruningConfig(pattern="4x1", pruned_gradient="straight_through")])
def test_the_seed_api_refuses_straight_through_before_changing_the_graph(config):
    with pytest.raises(ValueError, match="pruned_gradient='straight_through' is not supported by the SparseML seed "
                                         "API.*pruned_gradient='none', the only value allowed here"):
        CoreMaskCreator(config)
    g = tf.Graph()
    with g.as_default():
        w = tf1.get_variable("fc/kernel", [8, 4])
        y = tf.matmul(tf.ones([1, 8]), w)
        sparsity, ready = tf.constant(0.5), tf.constant(True)
        n_ops = len(g.get_operations())
        with pytest.raises(ValueError, match="pruned_gradient='straight_through'"):
            sparsify_tf.create_op_pruning(y.op, None, sparsity, ready, True, None, "seed", config)
        assert len(g.get_operations()) == n_ops
    assert CoreMaskCreator({"pattern": "4x1", "pruned_gradient": "none"}).pattern.pattern == "4x1"
