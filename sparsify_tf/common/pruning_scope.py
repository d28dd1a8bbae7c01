"""Scope and collection naming of kernel sparsity in a ``tf.compat.v1`` graph (seed names).

Every op and variable sparsify_tf adds lives under a scope named here, and every
handle the seed API looks up again is kept in a collection named here, so a
graph built once can be found again (``get_or_create_*``) and exported clean.

Example:
    >>> PruningScope.general("grp", PruningScope.OPS_SCHEDULE)
    'nm_ks_ops/grp/schedule_ops'
    >>> PruningScope.collection_name("grp", PruningScope.VAR_MASK)
    'nm_ks_collection_grp_nm_mask'
    >>> check_ks_group("grp")
    'grp'
"""
from __future__ import annotations

from typing import Any

from .graph_utils import clean_tensor_name

__all__ = ["PruningScope", "check_ks_group"]


def check_ks_group(ks_group: Any) -> str:
    """``ks_group`` if it can name scopes and collections, else a ``ValueError`` naming it.

    Example:
        >>> check_ks_group("a/b")
        Traceback (most recent call last):
        ...
        ValueError: ks_group must be a non-empty string without '/' or spaces, got 'a/b'
    """
    if not isinstance(ks_group, str) or not ks_group or "/" in ks_group or " " in ks_group:
        raise ValueError(f"ks_group must be a non-empty string without '/' or spaces, got {ks_group!r}")
    return ks_group


class PruningScope:
    """Scope and collection naming for kernel sparsity in the graph (seed names).

    Example:
        >>> PruningScope.model("dense/MatMul", "grp", PruningScope.OPS_UPDATE)
        'dense/MatMul_nm_ks/grp/update_ops'
    """

    NM_KS = "nm_ks"
    NM_KS_OPS = "nm_ks_ops"

    OPS = "ops"
    OPS_INPUT = "input_ops"
    OPS_UPDATE = "update_ops"
    OPS_SUMMARY = "summary_ops"
    OPS_SCHEDULE = "schedule_ops"
    OPS_SPARSITY = "sparsity_ops"
    OPS_MASK = "ops_mask"            # aligned with OPS: one entry per PruningOpVars
    OPS_MASKED = "ops_masked"

    OP_COND_UPDATE = "nm_conditional_update"
    OP_SPARSITY = "nm_sparsity"
    OP_UPDATE_READY = "nm_update_ready"
    OP_MASKED_VAR = "nm_masked_var"
    OP_MASKED_GRAD = "nm_masked_grad"     # IdentityN([weight, mask]) whose gradient is masked
    OP_MASK_ASSIGN = "nm_mask_assign"
    OP_PRUNE_VARS_ASSIGN = "nm_prune_vars_assign"
    OP_MASK_UPDATE_NO_OP = "nm_mask_update_no_op"
    OP_MASK_UPDATE = "nm_mask_update"
    OP_WEIGHT_UPDATE = "nm_weight_update"
    OP_SAVE = "nm_save"

    VAR_MASK = "nm_mask"
    VAR_THRESHOLD = "nm_threshold"

    @staticmethod
    def general(ks_group: str, additional: str | None = None, trailing_slash: bool = False) -> str:
        """Scope for group-wide ops (schedule, conditional update): ``nm_ks_ops/<group>[/additional]``."""
        return PruningScope._format(PruningScope._format(PruningScope.NM_KS_OPS, ks_group), additional,
                                    trailing_slash)

    @staticmethod
    def model(op_tens: Any, ks_group: str, additional: str | None = None, trailing_slash: bool = False) -> str:
        """Scope for one op's mask and update ops: ``<op>_nm_ks/<group>[/additional]``."""
        op_name = clean_tensor_name(op_tens if isinstance(op_tens, str) else op_tens.name)
        scope = PruningScope._format(f"{op_name}_{PruningScope.NM_KS}", ks_group)
        return PruningScope._format(scope, additional, trailing_slash)

    @staticmethod
    def collection_name(ks_group: str, name: str) -> str:
        """Collection name for ``name`` in ``ks_group``: ``nm_ks_collection_<group>_<name>``."""
        return f"nm_ks_collection_{ks_group}_{name}"

    @staticmethod
    def _format(current: str, additional: str | None = None, trailing_slash: bool = False) -> str:
        scope = current if additional is None else f"{current}/{additional}"
        return scope + "/" if trailing_slash else scope
