"""The top-level ``sparsify_tf`` modules moved into graph/, seed/ and common/ still import from their old
paths: with a ``DeprecationWarning`` naming the new module, re-exporting the new module's names (the same
objects), and without an API page of their own."""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

MOVED = {
    "core_errors": "common.core_errors", "export": "common.export", "core_update": "common.guarded_update",
    "layout_ops": "common.layout_ops", "mask_write": "common.mask_write", "masking": "common.masking",
    "optimizer_slots": "common.optimizer_slots", "pruning_scope": "common.pruning_scope",
    "schedule_ops": "common.schedule_ops", "summaries": "common.summaries", "graph_pruning_handles": "graph.handles",
    "pruning_hook": "graph.hook", "graph_pruning": "graph.pruning", "graph_statistics": "graph.statistics",
    "mask_creator": "seed.mask_creator", "mask_creator_coercion": "seed.mask_creator_coercion",
    "mask_creator_pruning": "seed.mask_creator_pruning", "mask_pruning": "seed.mask_pruning",
    "seed_utils": "seed.utils",
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_path_warns_and_re_exports_the_new_module(old):
    new = importlib.import_module(f"sparsify_tf.{MOVED[old]}")
    sys.modules.pop(f"sparsify_tf.{old}", None)
    with pytest.warns(DeprecationWarning, match=f"sparsify_tf.{MOVED[old]}".replace(".", r"\.")):
        shim = importlib.import_module(f"sparsify_tf.{old}")
    assert shim.__all__ == new.__all__ and shim.__deprecated__ is True
    for name in new.__all__:
        assert getattr(shim, name) is getattr(new, name), name


def test_old_paths_have_no_api_page():
    spec = importlib.util.spec_from_file_location("update_readme", ROOT / "scripts" / "update_docs.py")
    updater = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(updater)
    modules = set(updater.public_modules())
    assert not {f"sparsify_tf.{old}" for old in MOVED} & modules
    assert {f"sparsify_tf.{new}" for new in MOVED.values()} <= modules
