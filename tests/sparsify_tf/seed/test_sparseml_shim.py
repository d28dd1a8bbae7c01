"""scripts/run_sparseml_tests.py's shim (SparseML's module names mapped onto sparsify_tf's) finds every name
SparseML's own TF-v1 tests import, wherever sparsify_tf's modules live."""
from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_shim_modules_give_sparsemls_names(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("run_sparseml_tests", ROOT / "scripts" / "run_sparseml_tests.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    for rel, text in script.SHIM.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text if rel != "sparseml/tensorflow_v1/__init__.py" else "")   # keep eager mode here
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        optim = importlib.import_module("sparseml.tensorflow_v1.optim")
        utils = importlib.import_module("sparseml.tensorflow_v1.utils")
        assert {"PruningOpVars", "PruningScope", "create_op_pruning", "create_op_pruning_no_update",
                "create_constant_op_pruning", "create_graph_ops_pruning", "get_or_create_graph_ops_pruning",
                "create_summaries_pruning", "apply_op_vars_masks", "create_ks_schedule_ops",
                "get_or_create_ks_schedule_ops", "get_scheduled_update_op", "get_or_create_ks_scheduled_graph_ops",
                "create_ks_scheduled_constant_graph_ops", "PruningMaskCreator", "UnstructuredPruningMaskCreator",
                "GroupedPruningMaskCreator", "DimensionPruningMaskCreator", "BlockPruningMaskCreator",
                "load_mask_creator"} <= set(dir(optim))
        assert {"get_op_input_var", "eval_tensor_sparsity", "VAR_INDEX_FROM_TRAINABLE", "tf_compat"} <= set(dir(utils))
    finally:
        for name in [n for n in sys.modules if n == "sparseml" or n.startswith("sparseml.")]:
            del sys.modules[name]
