"""sparsify.mask_update: MaskUpdate holds what it is given; keep_values is required."""
import numpy as np
import pytest

from sparsify.mask_update import MaskUpdate


def test_mask_update_holds_keep_values_and_defaults():
    keep, last = {"w": np.array([True, True])}, {"w": np.array([True, False])}
    upd = MaskUpdate(5, keep, last, released=True)
    assert upd.step == 5 and upd.masks is keep and upd.keep_values is last
    assert upd.released is True and upd.grown == {}
    assert MaskUpdate(5, keep, last, True) == upd
    with pytest.raises(TypeError, match="keep_values"):
        MaskUpdate(5, keep)
    with pytest.raises(TypeError, match="zero"):
        MaskUpdate(5, keep, zero=last)
