"""Scope and collection names (the seed's) and the ks_group check."""
from __future__ import annotations

import pytest

from sparsify_tf.common.pruning_scope import PruningScope, check_ks_group


def test_scope_and_collection_names():
    assert PruningScope.general("g") == "nm_ks_ops/g"
    assert PruningScope.general("g", PruningScope.OPS_UPDATE, trailing_slash=True) == "nm_ks_ops/g/update_ops/"
    assert PruningScope.model("fc/MatMul:0", "g") == "fc/MatMul_nm_ks/g"
    assert PruningScope.model("fc/kernel/read:0", "g", PruningScope.OP_SAVE) == "fc/kernel_nm_ks/g/nm_save"
    assert PruningScope.collection_name("g", PruningScope.OPS_MASK) == "nm_ks_collection_g_ops_mask"


@pytest.mark.parametrize("bad", ["", "a/b", "a b", None, 3])
def test_bad_ks_group_is_named(bad):
    with pytest.raises(ValueError, match=r"ks_group must be a non-empty string without '/' or spaces, got"):
        check_ks_group(bad)
