"""The argument parser of the ``sparsify`` command: one subparser per subcommand, usage errors on one line.

The help text's pattern families and schedule kinds come from the core, the demo's frameworks and the
report's formats from :mod:`.demo` and :mod:`.report`, so the help lists what the code accepts.
Each subparser sets ``func``, the subcommand's body (:mod:`.subcommands`; ``init``: :mod:`.starter_config`).

Example:
    >>> args = build_parser().parse_args(["schedule", "--set", "end_step=10", "--json"])
    >>> args.set, args.json, args.func.__name__
    (['end_step=10'], True, 'schedule_command')
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from sparsify import __version__
from sparsify.config import SCHEDULE_TYPES
from sparsify.patterns import pattern_examples, pattern_summaries
from sparsify.sparse_format import ENCODINGS

from .demo import DEFAULT_STEPS as DEFAULT_DEMO_STEPS
from .demo import FRAMEWORKS, MAX_SEED
from .demo.keras_backend import BACKEND_ORDER as KERAS_BACKENDS
from .export import TARGETS
from .report import FORMATS
from .report.readers import DEFAULT_MAX_BYTES
from .starter_config import add_init_parser
from .subcommands import MAX_SCHEDULE_STEPS, demo_command, export_command, report_command, schedule_command

__all__ = ["PROG", "build_parser"]

PROG = "sparsify"


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exits with status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message} (see '{self.prog} --help')\n")
        raise SystemExit(2)


def _seed(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, {MAX_SEED}], got {text!r}") from None
    if not 0 <= v <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, {MAX_SEED}], got {v}")
    return v


def _max_bytes(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number of bytes, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive number of bytes, got {v}")
    return v


def _pattern_help(what: str) -> str:
    families = "; ".join(pattern_summaries().values())
    return f"{what}, e.g. {', '.join(pattern_examples())}. Families: {families}"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``sparsify`` command.

    Pattern families and schedule kinds in the help come from the core
    (:func:`sparsify.patterns.pattern_summaries`, :data:`sparsify.config.SCHEDULE_TYPES`),
    the demo's frameworks and the report's formats from :mod:`.demo` and :mod:`.report`.

    Example:
        >>> build_parser().parse_args(["report", "model.pt", "--json"]).json
        True
    """
    set_help = "override one config key, e.g. end_step=1000 or pruning_frequency=50 (repeatable)"
    p = _Parser(prog=PROG, description="Exact, fast sparsity while training for TensorFlow graphs, Keras and PyTorch.")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="command", metavar="{demo,report,export,schedule,init}", parser_class=_Parser)

    _add_demo(sub, set_help)
    max_help = f"refuse files declaring more tensor bytes than this (default {DEFAULT_MAX_BYTES}, 1 GiB)"
    _add_report(sub, max_help)
    _add_export(sub, max_help)
    _add_schedule(sub, set_help)
    add_init_parser(sub)
    return p


def _add_demo(sub: Any, set_help: str) -> None:
    """The ``demo`` subcommand's parser."""
    d = sub.add_parser("demo", help="train a small model on the 8x8 digits, dense and pruned",
                       description="Train a small MLP on the 8x8 digits (shipped with sparsify) dense, then "
                                   "with gradual pruning, and print per-layer target vs achieved sparsity and "
                                   "accuracy. The 'exact' column says whether a layer holds exactly the number "
                                   "of zeros the core prescribes for the target (round(target * units), at least "
                                   "one unit kept).")
    d.add_argument("--framework", choices=tuple(FRAMEWORKS), default=None,
                   help="tf-graph: TensorFlow compat.v1 graph mode; keras: Keras 3 (see --backend); tf-keras: "
                        "Keras 2; torch: PyTorch (default: the installed one, in this order: tf-graph, torch, "
                        "keras on JAX; keras when --backend is given)")
    d.add_argument("--backend", choices=KERAS_BACKENDS, default=None,
                   help="Keras 3's backend for --framework keras (default: KERAS_BACKEND, else the keras.json "
                        "backend if it is installed, else the installed one: tensorflow, jax, torch)")
    d.add_argument("--pattern", default=None, help=_pattern_help("sparsity pattern (default 1x1)"))
    d.add_argument("--sparsity", type=float, default=None,
                   help="target sparsity in [0, 1) (default 0.9, or the pattern's maximum if lower: N/M for N:M)")
    d.add_argument("--steps", type=int, default=None, help=f"training steps per phase (default {DEFAULT_DEMO_STEPS})")
    d.add_argument("--config", metavar="FILE.yaml",
                   help="pruning config (YAML); --pattern/--sparsity/--set override it; its schedule is used as "
                        "written unless --fit-schedule")
    d.add_argument("--set", action="append", metavar="KEY=VALUE", help=set_help)
    d.add_argument("--fit-schedule", action="store_true",
                   help="scale the config's start_step/end_step/pruning_frequency so pruning ends at 2/3 of --steps")
    d.add_argument("--prune-classifier", action="store_true",
                   help="also prune the output layer's rows with a pattern that removes whole rows (default: such "
                        "patterns leave the classifier dense, as each row is a class)")
    d.add_argument("--distill", action="store_true",
                   help="the dense model (frozen when pruning begins) teaches the pruned one: KL of the softmaxes at "
                        "temperature 2, weight fading from 1 to 0 over the first half of pruning (torch, keras, tf-keras; "
                        "docs/distillation.md)")
    d.add_argument("--out", metavar="DIR",
                   help="write the pruned model, the config used, plots and a manifest here, all at the end "
                        "(an interrupted run leaves DIR as it was)")
    d.add_argument("--seed", type=_seed, default=0, help=f"random seed in [0, {MAX_SEED}] (default 0)")
    d.add_argument("--no-progress", action="store_true", help="no progress bar")
    d.set_defaults(func=demo_command)


def _add_report(sub: Any, max_help: str) -> None:
    """The ``report`` subcommand's parser."""
    r = sub.add_parser("report", help="sparsity of a checkpoint, SavedModel, .keras or torch state_dict",
                       description="Read weights without executing code from the file and print per-tensor and "
                                   "total sparsity, and (with --pattern) whether each 2-D view satisfies a pattern.")
    r.add_argument("path", help="torch state_dict (.pt), TF checkpoint (prefix or dir), SavedModel dir, frozen .pb, .keras, .h5, .npz")
    r.add_argument("--pattern", default=None, help=_pattern_help("check each weight's 2-D view against a pattern"))
    r.add_argument("--json", action="store_true", help="machine-readable output")
    r.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE (atomically) instead of stdout")
    r.add_argument("--all", action="store_true", help="include optimizer state (slots, step counters)")
    r.add_argument("--format", default=None, choices=tuple(FORMATS),
                   help="file format (default: detected from the content)")
    r.add_argument("--max-bytes", type=_max_bytes, default=DEFAULT_MAX_BYTES, metavar="N", help=max_help)
    r.set_defaults(func=report_command)


def _add_export(sub: Any, max_help: str) -> None:
    """The ``export`` subcommand's parser."""
    e = sub.add_parser("export", help="write a smaller artifact of a pruned model: TFLite, a compressed "
                                      "state_dict or .npz",
                       description="From any file 'report' reads, write a TFLite flatbuffer with TensorFlow's "
                                   "sparsity optimisation (a .keras model or a SavedModel; its outputs are checked "
                                   "against the model's) or a compressed torch state_dict (packed bitmask + values "
                                   "or CSR; torch.load(weights_only=True) reads it, "
                                   "sparsify_torch.export.load_compressed_state_dict restores the dense tensors) "
                                   "or the same compressed weights in a NumPy .npz (no framework needed; "
                                   "sparsify.cli.compressed_npz.load_compressed_npz restores them), and print "
                                   "dense vs sparse bytes on disk and gzipped.")
    e.add_argument("path", help="the pruned model or weights (any file 'sparsify report' reads)")
    e.add_argument("--to", choices=TARGETS, default=None,
                   help="tflite (a .keras model or SavedModel; needs TensorFlow), torch (any file; needs torch) or "
                        "npz (any file; NumPy only). Default: tflite for models, torch for weights, npz when "
                        "that framework is not installed or with --int8")
    e.add_argument("--out", metavar="FILE", help="the artifact (default: beside PATH, .tflite or .sparse.pt)")
    e.add_argument("--encoding", choices=ENCODINGS, default="bitmask", help="torch, npz: bitmask (default) or csr")
    e.add_argument("--semi-structured", action="store_true",
                   help="torch: check every 2-D weight against torch.sparse.to_sparse_semi_structured "
                        "(default: when the weights look 2:4)")
    e.add_argument("--with-optimizer", action="store_true",
                   help="torch, npz: also write the optimizer state PATH holds (a .keras model's Adam moments, a "
                        "checkpoint's slots); default: the model's weights only")
    e.add_argument("--int8", action="store_true",
                   help="npz: weights as symmetric per-channel int8 (bitmask + int8 values + float32 scales, every "
                        "pruned zero kept); sparsify.int8_format.load_int8_npz reads it. Default --out: beside PATH, "
                        ".int8.npz")
    e.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    e.add_argument("--format", default=None, choices=tuple(FORMATS), help="PATH's format (default: detected)")
    e.add_argument("--max-bytes", type=_max_bytes, default=DEFAULT_MAX_BYTES, metavar="N", help=max_help)
    e.add_argument("--json", action="store_true", help="machine-readable output")
    e.set_defaults(func=export_command)


def _add_schedule(sub: Any, set_help: str) -> None:
    """The ``schedule`` subcommand's parser."""
    s = sub.add_parser("schedule", help="print or plot the sparsity-vs-step curve of a config",
                       description="Print the sparsity at each mask update point of a config (or plot it): "
                                   "from start_step to end_step, a mask update every pruning_frequency steps. "
                                   f"Schedule kinds (sparsity_decay_type): {', '.join(SCHEDULE_TYPES)}.")
    s.add_argument("--config", metavar="FILE.yaml", help="pruning config (YAML); default: PruningConfig()")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help=set_help)
    s.add_argument("--steps", type=int, default=None,
                   help=f"horizon in steps (default: 10%% past end_step; at most {MAX_SCHEDULE_STEPS})")
    s.add_argument("--every", type=int, default=None, help="print every N steps instead of the update points")
    s.add_argument("--max-rows", type=int, default=40, help="at most this many update points printed (default 40)")
    s.add_argument("--plot", metavar="FILE.png",
                   help="write the curve to an image (needs matplotlib; a directory gets schedule.png)")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument("--output", "-o", metavar="FILE", help="write the table or JSON to FILE (atomically)")
    s.set_defaults(func=schedule_command, subparser=s)
