"""SparseGPT in the core: literal cases, exact counts, N:M conformity, reconstruction against magnitude."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from sparsify import exact_prune_count
from sparsify.sparsegpt import HessianAccumulator, block_prune_counts, reconstruction_error, sparsegpt_prune


def _correlated_hessian(rng, n_in, n_samples=256, rho=0.8, rank=2):
    """Hessian of inputs sharing a low-rank component (fraction ``rho`` of the variance)."""
    shared = rng.normal(size=(n_samples, rank)) @ rng.normal(size=(rank, n_in)) / np.sqrt(rank)
    x = np.sqrt(1 - rho) * rng.normal(size=(n_samples, n_in)) + np.sqrt(rho) * shared
    acc = HessianAccumulator(n_in)
    acc.add(x[: n_samples // 2])
    acc.add(x[n_samples // 2:])
    return acc.hessian()


def _magnitude(w, sparsity):
    """Layer-wise magnitude mask with the core's count and tie rules."""
    k = exact_prune_count(sparsity, w.size)
    keep = np.ones(w.size, dtype=bool)
    keep[np.argsort(np.abs(w).ravel(), kind="stable")[:k]] = False
    return keep.reshape(w.shape)


def _magnitude_nm(w, n, m):
    groups = np.abs(w).reshape(w.shape[0], -1, m)
    keep = np.ones(groups.shape, dtype=bool)
    np.put_along_axis(keep, np.argsort(groups, axis=-1, kind="stable")[..., :n], False, axis=-1)
    return keep.reshape(w.shape)


def test_hessian_accumulates_over_batches():
    acc = HessianAccumulator(2, name="fc")
    acc.add(np.array([[1.0, 0.0]]))
    acc.add(np.array([[0.0, 3.0], [1.0, 1.0]]))
    assert acc.n_samples == 3
    np.testing.assert_allclose(acc.hessian(), 2.0 / 3.0 * np.array([[2.0, 1.0], [1.0, 10.0]]))


def test_identity_hessian_is_magnitude_pruning():
    w = np.array([[0.5, -2.0, 1.0, 0.25, 3.0, -0.75],
                  [1.5, 0.1, -0.2, 2.5, -1.25, 0.3]])
    new_w, mask = sparsegpt_prune(w, np.eye(6), 0.5, block_size=6)
    expected = np.array([[False, True, True, False, True, False],
                         [True, False, False, True, True, False]])
    np.testing.assert_array_equal(mask, expected)
    np.testing.assert_array_equal(new_w, w * expected)


def test_identity_hessian_nm_is_magnitude_nm():
    w = np.array([[4.0, 1.0, 3.0, 2.0, -1.0, 5.0, 0.5, -6.0]])
    new_w, mask = sparsegpt_prune(w, np.eye(8), nm=(2, 4), block_size=4)
    assert mask.tolist() == [[True, False, True, False, False, True, False, True]]
    np.testing.assert_array_equal(new_w, [[4.0, 0.0, 3.0, 0.0, 0.0, 5.0, 0.0, -6.0]])


def test_ties_prune_the_lower_flat_index_first():
    _, mask = sparsegpt_prune(np.ones((2, 2)), np.eye(2), 0.5)
    assert mask.tolist() == [[False, False], [True, True]]
    _, mask = sparsegpt_prune(np.ones((1, 4)), np.eye(4), nm=(2, 4))
    assert mask.tolist() == [[False, False, True, True]]


def test_compensation_on_two_correlated_inputs():
    # x2 = x1 for every sample: pruning w1 moves it onto w2 exactly (dampening 0 is singular, so use a little)
    h = np.array([[2.0, 2.0], [2.0, 2.0]])
    new_w, mask = sparsegpt_prune(np.array([[1.0, 3.0]]), h, 0.5, dampening=1e-9)
    assert mask.tolist() == [[False, True]]
    np.testing.assert_allclose(new_w, [[0.0, 4.0]], atol=1e-6)


def test_block_prune_counts_largest_remainder():
    assert block_prune_counts(7, [4, 4, 2], 2) == [3, 3, 1]
    assert block_prune_counts(3, [2, 2, 2], 1) == [1, 1, 1]
    assert block_prune_counts(0, [3], 5) == [0]


@pytest.mark.parametrize("sparsity", [0.0, 0.3, 0.5, 0.7, 0.95, 0.999])
@pytest.mark.parametrize("block_size", [3, 16, 128])
def test_exact_layer_count(sparsity, block_size):
    rng = np.random.default_rng(1)
    w = rng.normal(size=(7, 37))
    new_w, mask = sparsegpt_prune(w, _correlated_hessian(rng, 37), sparsity, block_size=block_size)
    assert int((~mask).sum()) == exact_prune_count(sparsity, w.size)
    assert np.all(new_w[~mask] == 0)


@pytest.mark.parametrize("n,m", [(2, 4), (1, 4), (4, 8)])
def test_nm_conformity(n, m):
    rng = np.random.default_rng(2)
    w = rng.normal(size=(5, 32))
    new_w, mask = sparsegpt_prune(w, _correlated_hessian(rng, 32), nm=(n, m), block_size=16)
    assert (mask.reshape(5, -1, m).sum(axis=-1) == m - n).all()
    assert np.all(new_w[~mask] == 0)


def test_dead_input_channel_is_decoupled():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(64, 6))
    x[:, 2] = 0.0
    acc = HessianAccumulator(6)
    acc.add(x)
    w = rng.normal(size=(3, 6))
    new_w, mask = sparsegpt_prune(w, acc.hessian(), 0.5)
    kept_dead = mask[:, 2]
    np.testing.assert_array_equal(new_w[kept_dead, 2], w[kept_dead, 2])


@settings(max_examples=40, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**31 - 1), rows=st.integers(4, 16), groups=st.integers(4, 12),
       rho=st.floats(0.5, 0.95), rank=st.integers(1, 3))
def test_reconstruction_beats_magnitude_on_correlated_inputs(seed, rows, groups, rho, rank):
    rng = np.random.default_rng(seed)
    n_in = 4 * groups
    h = _correlated_hessian(rng, n_in, rho=rho, rank=rank)
    w = rng.normal(size=(rows, n_in))
    new_w, _ = sparsegpt_prune(w, h, 0.5)
    assert reconstruction_error(w, new_w, h) <= reconstruction_error(w, w * _magnitude(w, 0.5), h)
    new_w, _ = sparsegpt_prune(w, h, nm=(2, 4), block_size=16)
    assert reconstruction_error(w, new_w, h) <= reconstruction_error(w, w * _magnitude_nm(w, 2, 4), h)


@pytest.mark.parametrize("kwargs,match", [
    ({"sparsity": 1.0}, r"sparsity must be a number in \[0, 1\), got 1.0"),
    ({}, "exactly one of sparsity= and nm="),
    ({"sparsity": 0.5, "nm": (2, 4)}, "exactly one of"),
    ({"nm": (4, 2)}, r"nm must be \(n, m\) with 0 < n < m"),
    ({"nm": (1, 3)}, "multiples of m=3"),
    ({"sparsity": 0.5, "block_size": 0}, "block_size must be a positive integer, got 0"),
    ({"sparsity": 0.5, "dampening": -1.0}, "dampening must be a finite number >= 0, got -1.0"),
])
def test_bad_options_name_the_parameter(kwargs, match):
    with pytest.raises(ValueError, match=match):
        sparsegpt_prune(np.ones((2, 8)), np.eye(8), name="fc1", **kwargs)


def test_bad_inputs_name_the_layer():
    with pytest.raises(ValueError, match="weight of layer 'fc1' holds NaN"):
        sparsegpt_prune(np.array([[np.nan, 1.0]]), np.eye(2), 0.5, name="fc1")
    with pytest.raises(ValueError, match=r"hessian of layer 'fc1' must have shape \(2, 2\)"):
        sparsegpt_prune(np.ones((1, 2)), np.eye(3), 0.5, name="fc1")
    with pytest.raises(ValueError, match=r"inputs of layer 'fc1' must have shape \(n, 3\)"):
        HessianAccumulator(3, name="fc1").add(np.ones((2, 4)))
    with pytest.raises(ValueError, match="layer 'fc1' saw no calibration input"):
        HessianAccumulator(3, name="fc1").hessian()


def test_indefinite_hessian_is_retried_then_refused():
    h = np.array([[1.0, 0.0], [0.0, -0.5]])
    with pytest.warns(RuntimeWarning, match="used dampening"):
        _, mask = sparsegpt_prune(np.ones((1, 2)), h, 0.5, name="fc1")
    assert int((~mask).sum()) == 1
    with pytest.raises(ValueError, match="layer 'fc1': the Hessian of its inputs is not positive definite"):
        sparsegpt_prune(np.ones((1, 2)), np.array([[1.0, 0.0], [0.0, -1e6]]), 0.5, name="fc1")
