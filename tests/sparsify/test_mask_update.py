"""sparsify.mask_update: MaskUpdate.keep_values, and zero, its deprecated name."""
import numpy as np
import pytest

from sparsify.mask_update import MaskUpdate


def test_mask_update_keep_values_and_its_deprecated_name_zero():
    keep, last = {"w": np.array([True, True])}, {"w": np.array([True, False])}
    upd = MaskUpdate(5, keep, last, released=True)
    assert upd.keep_values is last and upd.grown == {}
    with pytest.warns(DeprecationWarning, match=r"MaskUpdate.zero is deprecated: use MaskUpdate.keep_values"):
        assert upd.zero is last
    with pytest.warns(DeprecationWarning, match=r"MaskUpdate\(zero=...\) is deprecated"):
        old = MaskUpdate(5, keep, zero=last, released=True)
    assert old == upd
    with pytest.raises(TypeError, match="not both"):
        MaskUpdate(5, keep, last, zero=last)
    with pytest.raises(TypeError, match="needs keep_values"):
        MaskUpdate(5, keep)
