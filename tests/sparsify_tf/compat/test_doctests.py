"""The examples in the docstrings of sparsify_tf.compat stay true (the suite's testpaths do not collect them)."""
from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["sparsify_tf.compat", "sparsify_tf.compat.tfmot", "sparsify_tf.compat.tfmot.sparsity",
           "sparsify_tf.compat.tfmot.sparsity.keras", "sparsify_tf.compat.tfmot_arithmetic",
           "sparsify_tf.compat.tfmot_registry", "sparsify_tf.compat.tfmot_wrapper", "sparsify_tf.compat.tfmot_api",
           "sparsify_tf.compat.tfmot_callbacks"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no docstring example"
    assert result.failed == 0, f"{result.failed} docstring example(s) of {name} failed"
