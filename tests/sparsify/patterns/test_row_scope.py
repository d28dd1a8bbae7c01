import numpy as np
from hypothesis import given, settings, strategies as st

from sparsify import PruningEngine
from sparsify.patterns import get_pattern
from sparsify.patterns.row_scope import row_masks
from sparsify.selection.lowest_k import exact_prune_count


def test_each_output_row_of_a_conv_is_its_own_comparison_group_literal():
    # (out=2, in=2, k=2): the 2-D view is (out, k * in) with the input channel fastest
    w = np.array([[[1.0, 4.0], [2.0, 3.0]], [[8.0, 5.0], [7.0, 6.0]]])
    masks = PruningEngine({"pruning_scope": "row", "target_sparsity": 0.5, "end_step": 0}).compute_masks({"c": w}, 0)
    assert masks["c"].astype(int).tolist() == [[[0, 1], [0, 1]], [[1, 0], [1, 0]]]


def test_monotone_rows_keep_what_was_pruned():
    pat = get_pattern({"pattern": "1x1", "pruning_scope": "row"})
    pre = {"w": np.array([[False, True, True, True]])}
    got = row_masks(pat, {"w": np.array([[9.0, 1.0, 2.0, 3.0]])}, 0.5, pre)
    assert got["w"].tolist() == [[False, False, True, True]]


@settings(max_examples=50, deadline=None)
@given(rows=st.integers(1, 5), cols=st.integers(1, 9), ratio=st.integers(0, 95).map(lambda k: k / 100),
       seed=st.integers(0, 99))
def test_every_row_prunes_the_exact_count(rows, cols, ratio, seed):
    scores = np.random.default_rng(seed).random((rows, cols))
    got = row_masks(get_pattern({"pruning_scope": "row"}), {"w": scores}, ratio, max_sparsity_ratio_per_layer=0.999)
    k = exact_prune_count(ratio, cols)
    assert ((~got["w"]).sum(axis=1) == k).all()
