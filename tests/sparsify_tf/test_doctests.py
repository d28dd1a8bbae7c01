"""The examples in the graph-mode modules' docstrings stay true."""
from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["pruning_scope", "masking", "mask_pruning", "graph_pruning", "pruning_hook", "schedule_ops",
           "mask_creator", "mask_creator_coercion", "mask_creator_pruning", "seed_utils", "graph_utils", "core_update", "optimizer_slots",
           "export", "layout_ops"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(f"sparsify_tf.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} docstring example(s) of sparsify_tf.{name} failed"
