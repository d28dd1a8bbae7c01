"""Dense vs exported sizes of pruned models, as a Markdown table (the figures in docs/export.md).

* the demo's MLP (64-128-64-10, 90% unstructured, 300 steps per phase): the
  compressed torch state_dict of the torch run, and TFLite with TensorFlow's
  sparsity optimisation of the Keras run and of the TF-graph SavedModel;
* torchvision's ResNet-18 (``weights=None``, 1000 classes) pruned one-shot by
  magnitude to 90% unstructured and to 2:4 (layers whose 2-D view does not
  fit 2:4, the 7x7x3 stem, stay dense), as compressed state_dicts (bitmask
  and CSR).

Usage: ``python scripts/export_sizes.py [WORKDIR]`` (default: a temporary directory).
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from sparsify.cli.demo import run_demo            # noqa: E402
from sparsify.cli.export import export_model       # noqa: E402
from sparsify.cli.report.readers import format_bytes  # noqa: E402


def _row(model: str, what: str, res) -> str:
    return (f"| {model} | {what} | {format_bytes(res.dense_bytes)} | {format_bytes(res.sparse_bytes)} | "
            f"{res.dense_bytes / res.sparse_bytes:.2f}x | {format_bytes(res.dense_gzip)} | "
            f"{format_bytes(res.sparse_gzip)} | {res.dense_gzip / res.sparse_gzip:.2f}x |")


def main(work: Path) -> str:
    import torch
    import torchvision

    import sparsify_torch

    rows = []
    for fw in ("torch", "keras", "tf-graph"):
        run_demo(fw, steps=300, out=work / fw, progress=False)
    rows.append(_row("demo MLP, 90% 1x1", "torch state_dict, bitmask", export_model(work / "torch" / "model.pt")))
    rows.append(_row("demo MLP, 90% 1x1", "TFLite (Keras)", export_model(work / "keras" / "model.keras")))
    rows.append(_row("demo MLP, 90% 1x1", "TFLite (TF-graph SavedModel)", export_model(work / "tf-graph" / "saved_model")))
    for label, cfg in (("90% 1x1", {"target_sparsity": 0.9}),
                       ("2:4", {"pattern": "2:4", "target_sparsity": 0.5, "skip_incompatible_layers": True})):
        torch.manual_seed(0)
        model = torchvision.models.resnet18(weights=None)
        pruner = sparsify_torch.prune(model, {**cfg, "start_step": 0, "end_step": 0,
                                              "op_names": [r"(conv|downsample\.0|fc)\.?\w*\.weight$"]})
        sparsity = pruner.total_sparsity()
        pruner.remove()
        src = work / f"resnet18_{label.replace(':', '_').replace('% ', '_')}.pt"
        torch.save(model.state_dict(), src)
        for enc in ("bitmask", "csr"):
            res = export_model(src, out=src.with_suffix(f".{enc}.pt"), encoding=enc, overwrite=True)
            rows.append(_row(f"ResNet-18, {label} ({100 * sparsity:.1f}% of conv/fc weights)",
                             f"torch state_dict, {enc}", res))
    head = ("| model | artifact | dense | sparse | dense/sparse | dense gzip | sparse gzip | gzip dense/sparse |\n"
            "|---|---|---:|---:|---:|---:|---:|---:|")
    return "\n".join([head, *rows])


if __name__ == "__main__":
    if len(sys.argv) > 1:
        print(main(Path(sys.argv[1])))
    else:
        with tempfile.TemporaryDirectory() as d:
            print(main(Path(d)))
