import numpy as np
import pytest

from sparsify.criteria import CRITERIA, magnitude, needs_gradients, snip, snip_momentum


def test_values():
    w, g = np.array([-2.0, 1.0, 0.5]), np.array([0.5, -3.0, 0.0])
    assert magnitude(w).tolist() == [2.0, 1.0, 0.5]
    assert snip(w, g).tolist() == [1.0, 3.0, 0.0]
    first = snip_momentum(None, w, g, momentum=0.5)
    assert first.tolist() == [0.5, 1.5, 0.0]
    assert snip_momentum(first, w, np.zeros(3), momentum=0.5).tolist() == [0.25, 0.75, 0.0]


def test_errors_and_registry():
    assert CRITERIA == ("magnitude", "snip", "snip_momentum")
    assert needs_gradients("snip") and not needs_gradients("magnitude")
    with pytest.raises(ValueError, match="criterion must be one of"):
        needs_gradients("taylor")
    with pytest.raises(ValueError, match="momentum must be in"):
        snip_momentum(None, np.ones(1), np.ones(1), momentum=1.5)


@pytest.mark.parametrize("dtype", ["i1", "i2", ">i4", "i8"])
def test_magnitude_of_the_most_negative_integer_is_its_true_magnitude(dtype):
    low = np.iinfo(dtype).min                       # abs() wraps it to itself in its own type
    w = np.array([low, -1, 0, 5], dtype=dtype)
    assert magnitude(w).tolist() == [-low, 1, 0, 5]
    assert int(magnitude(w[0])) == -low             # NumPy scalars too
