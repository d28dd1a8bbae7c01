"""Tests for sparsify.channels.groups (NumPy only: this file must not import torch)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparsify.channels.groups import LabelUnionFind, Run, rectangular_dim, refine_reshape, shrinking_factor


def test_module_does_not_import_torch_or_tensorflow():
    import sparsify.channels.groups as mod
    source = open(mod.__file__).read()
    assert "import torch" not in source and "tensorflow" not in source


def test_union_find_literal():
    uf = LabelUnionFind()
    assert uf.new(5).tolist() == [0, 1, 2, 3, 4] and len(uf) == 5
    assert uf.union([4, 3], [3, 1])
    assert uf.find([0, 1, 2, 3, 4]).tolist() == [0, 1, 2, 1, 1]
    assert not uf.union([1], [4])
    assert uf.new(2).tolist() == [5, 6] and uf.roots().tolist() == [0, 1, 2, 1, 1, 5, 6]
    assert uf.union(np.array([6, 6]), np.array([0, 2]))  # one root joins two sets in one call
    assert uf.roots().tolist() == [0, 1, 0, 1, 1, 5, 0]


@pytest.mark.parametrize("call,match", [
    (lambda uf: uf.new(-1), "count must be a non-negative integer, got -1"),
    (lambda uf: uf.find([3]), "ids must lie in \\[0, 2\\), got 3..3"),
    (lambda uf: uf.union([0], [0, 1]), "a and b must have the same number of ids, got 1 and 2"),
])
def test_union_find_bad_input(call, match):
    uf = LabelUnionFind()
    uf.new(2)
    with pytest.raises(ValueError, match=match):
        call(uf)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40).flatmap(lambda n: st.tuples(st.just(n), st.lists(
    st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=60))))
def test_union_find_matches_a_plain_partition(case):
    n, pairs = case
    uf = LabelUnionFind()
    uf.new(n)
    sets = [{i} for i in range(n)]
    for a, b in pairs:
        uf.union([a], [b])
        sa = next(s for s in sets if a in s)
        sb = next(s for s in sets if b in s)
        if sa is not sb:
            sa |= sb
            sets.remove(sb)
    roots = uf.roots()
    for s in sets:
        assert {int(roots[i]) for i in s} == {min(s)}


def test_refine_reshape_runs():
    flatten = refine_reshape((2, 8, 3, 3), (2, 72))
    assert flatten == [Run([0], [0], [2], [[0]], [[0]]), Run([1, 2, 3], [1], [8, 3, 3], [[0], [1], [2]], [[0, 1, 2]])]
    shuffle = refine_reshape((1, 6, 4, 4), (1, 2, 3, 4, 4))
    assert shuffle[1] == Run([1], [1, 2], [2, 3], [[0, 1]], [[0], [1]])
    merge = refine_reshape((1, 8, 5, 5), (1, 4, 10, 5))[1]
    assert merge.sizes == [4, 2, 5] and merge.in_factors == [[0, 1], [2]] and merge.out_factors == [[0], [1, 2]]
    assert refine_reshape((1, 6, 5), (1, 5, 6)) is None  # re-dealt: no common factors
    assert refine_reshape((2, 3), (7,)) is None and refine_reshape((0, 3), (0, 3)) is None
    assert refine_reshape((4, 1, 3), (12,)) == [Run([0, 1, 2], [0], [4, 3], [[0], [], [1]], [[0, 1]])]


def test_shrinking_factor_prefers_the_factor_that_is_a_whole_output_dimension():
    shuffle = refine_reshape((1, 6, 4, 4), (1, 2, 3, 4, 4))[1]
    assert shrinking_factor(shuffle, [0, 1]) == 1  # (groups, c // groups): c // groups shrinks
    merge = refine_reshape((1, 8, 5, 5), (1, 4, 10, 5))[1]
    assert shrinking_factor(merge, [0, 1]) == 0  # (c // 2, 2 * h): the 2 sits inside the fixed 2 * h
    back = refine_reshape((1, 3, 2, 4, 4), (1, 6, 4, 4))[1]
    assert shrinking_factor(back, [0]) == 0
    with pytest.raises(ValueError, match="varying must name factors in 0..1, got \\[2\\]"):
        shrinking_factor(shuffle, [2])


def test_rectangular_dim():
    assert rectangular_dim((4, 1, 1), [0, 3]) == 0
    assert rectangular_dim((1, 5, 4), [1, 5, 9, 13, 17]) == 2
    assert rectangular_dim((1, 5, 4), [0, 1, 2, 3]) == 1
    assert rectangular_dim((3, 4), range(12)) == 0  # everything: any dimension, the first
    assert rectangular_dim((2, 2), [0, 3]) is None and rectangular_dim((2, 2), []) is None
