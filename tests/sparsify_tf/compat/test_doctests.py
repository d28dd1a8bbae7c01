"""Every module of sparsify_tf.compat has a docstring example (the suite runs them: pyproject's testpaths
collect sparsify_tf/ with --doctest-modules)."""
from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["sparsify_tf.compat", "sparsify_tf.compat.tfmot", "sparsify_tf.compat.tfmot.sparsity",
           "sparsify_tf.compat.tfmot.sparsity.keras", "sparsify_tf.compat.tfmot_arithmetic",
           "sparsify_tf.compat.tfmot_registry", "sparsify_tf.compat.tfmot_wrapper", "sparsify_tf.compat.tfmot_api",
           "sparsify_tf.compat.tfmot_callbacks"]


@pytest.mark.parametrize("name", MODULES)
def test_every_module_has_a_docstring_example(name):
    module = importlib.import_module(name)
    examples = sum(len(t.examples) for t in doctest.DocTestFinder().find(module))
    assert examples > 0, f"{name} has no docstring example"
