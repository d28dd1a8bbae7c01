"""The ``sparsify`` command: argument parsing and the ``demo``, ``report`` and ``schedule`` subcommands.

Examples (shell)::

    sparsify demo                              # TF graph mode, 90% unstructured
    sparsify demo --framework torch --pattern 2:4 --steps 200 --out runs/torch
    sparsify report model.pt --pattern 2:4     # sparsity per tensor + 2:4 conformity
    sparsify report ckpt_dir --json
    sparsify schedule --config prune.yaml --plot schedule.png

Bad input (a missing or unreadable file, an unknown format, a bad config key)
prints one line on stderr and exits with status 1 (2 for command-line usage
errors), without a traceback. Set ``SPARSIFY_DEBUG=1`` to see tracebacks.

TensorFlow and torch are imported only where a subcommand needs them (the
demo's backend, reading a file of theirs), so ``sparsify --help`` and
``sparsify schedule`` never load them.

Example:
    >>> main(["schedule", "--set", "target_sparsity=0.5", "--set", "end_step=4", "--set", "pruning_frequency=2"])
    gradual schedule: 0% -> 50%, start_step 0, end_step 4, pruning_frequency 2, pattern 1x1
        step   schedule   applied  update
           0      0.00%     0.00%  yes
           2     43.75%    43.75%  yes
           4     50.00%    50.00%  yes
    0
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Sequence

import numpy as np
import yaml

from sparsify import __version__
from sparsify.config import SCHEDULE_TYPES, PruningConfig, load_yaml_mapping, yaml_loader
from sparsify.patterns import registered_patterns

from .demo import FRAMEWORKS, default_config, format_result, run_demo
from .plots import plot_schedule, schedule_points
from .report import FORMATS, build_report, format_report

__all__ = ["main", "build_parser", "build_config", "CLIError"]

PROG = "sparsify"


class CLIError(Exception):
    """A user error the command reports as one line."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exits with status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message} (see '{self.prog} --help')\n")
        raise SystemExit(2)


# ----- config helpers --------------------------------------------------------------------------
def _load_yaml_value(raw: str) -> Any:
    try:            # yaml_loader keeps an unquoted `2:4` a string (YAML 1.1 reads it as base-60 124)
        return yaml.load(raw, Loader=yaml_loader()) if raw.strip() else ""
    except yaml.YAMLError:
        return raw


def _load_config_file(path: str) -> dict[str, Any]:
    try:
        return load_yaml_mapping(path)
    except ValueError as e:
        raise CLIError(str(e)) from None


def _parse_set(items: Sequence[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or ():
        if "=" not in item:
            raise CLIError(f"--set expects KEY=VALUE, got {item!r}")
        key, raw = item.split("=", 1)
        out[key.strip()] = _load_yaml_value(raw)
    return out


def build_config(config: str | None = None, sets: Sequence[str] | None = None, **overrides: Any) -> PruningConfig:
    """A validated :class:`~sparsify.PruningConfig` from a YAML file, ``--set`` items and overrides.

    Later sources win: the file, then ``sets`` (``"key=value"``, values parsed
    as YAML), then keyword ``overrides`` that are not None.

    Example:
        >>> build_config(None, ["pattern=2:4"], target_sparsity=0.5).pattern
        '2:4'
    """
    data: dict[str, Any] = _load_config_file(config) if config else {}
    data.update(_parse_set(sets))
    data.update({k: v for k, v in overrides.items() if v is not None})
    return PruningConfig.from_dict(data)


# ----- schedule ----------------------------------------------------------------------------------
def _cmd_schedule(args: argparse.Namespace) -> int:
    cfg = build_config(args.config, args.set)
    steps, applied, upd = schedule_points(cfg, args.steps)
    sched = cfg.schedule()
    if args.every:
        rows = steps[:: args.every]
        if rows[-1] != steps[-1]:
            rows = np.append(rows, steps[-1])
    else:
        rows = steps[upd]
        if rows.size > args.max_rows:
            idx = np.unique(np.linspace(0, rows.size - 1, args.max_rows).round().astype(int))
            rows = rows[idx]
    if args.json:
        print(json.dumps({"config": cfg.to_dict(), "steps": [int(s) for s in rows],
                          "sparsity": [float(applied[s]) for s in rows],
                          "update": [bool(upd[s]) for s in rows]}, indent=2))
    else:
        print(f"{cfg.sparsity_decay_type} schedule: {100 * cfg.init_sparsity:g}% -> {100 * cfg.target_sparsity:g}%, "
              f"start_step {cfg.start_step}, end_step {cfg.end_step}, pruning_frequency {cfg.pruning_frequency}, "
              f"pattern {cfg.pattern}")
        print(f"{'step':>8}  {'schedule':>9}  {'applied':>8}  update")
        for s in rows:
            print(f"{int(s):>8}  {100 * float(sched.sparsity(int(s))):>8.2f}%  {100 * float(applied[s]):>7.2f}%  "
                  f"{'yes' if upd[s] else ''}")
    if args.plot:
        plot_schedule(cfg, args.steps, path=args.plot)
        if not args.json:
            print(f"plot written to {args.plot}")
    return 0


# ----- report ------------------------------------------------------------------------------------
def _cmd_report(args: argparse.Namespace) -> int:
    rep = build_report(args.path, pattern=args.pattern, include_optimizer=args.all, fmt=args.format)
    if args.json:
        print(json.dumps(rep.to_dict(), indent=2))
    else:
        print(format_report(rep))
    return 0


# ----- demo --------------------------------------------------------------------------------------
def _cmd_demo(args: argparse.Namespace) -> int:
    if args.steps is not None and args.steps < 1:
        raise CLIError(f"--steps must be a positive integer, got {args.steps}")
    if args.config:
        cfg = build_config(args.config, args.set, pattern=args.pattern, target_sparsity=args.sparsity)
    else:
        cfg = default_config(pattern=args.pattern or "1x1", sparsity=args.sparsity,
                             steps=args.steps if args.steps is not None else None)
        if args.set:
            cfg = cfg.replace(**_parse_set(args.set))
    result = run_demo(args.framework, cfg, steps=args.steps, out=args.out, progress=not args.no_progress,
                      seed=args.seed)
    print(format_result(result))
    return 0


# ----- parser ------------------------------------------------------------------------------------
def _pattern_help(what: str) -> str:
    families = ", ".join(registered_patterns())
    return f"{what}: a pattern of a registered family ({families}), e.g. 1x1, 4x1, channelx1, 2:4"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``sparsify`` command.

    Pattern families and schedule kinds in the help come from the core
    (:func:`sparsify.patterns.registered_patterns`, :data:`sparsify.config.SCHEDULE_TYPES`),
    the demo's frameworks and the report's formats from :mod:`.demo` and :mod:`.report`.

    Example:
        >>> build_parser().parse_args(["report", "model.pt", "--json"]).json
        True
    """
    set_help = "override one config key, e.g. end_step=1000 or pruning_frequency=50 (repeatable)"
    p = _Parser(prog=PROG, description="Exact, fast sparsity while training for TensorFlow graphs, Keras and PyTorch.")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="command", metavar="{demo,report,schedule}", parser_class=_Parser)

    d = sub.add_parser("demo", help="train a small model on scikit-learn's digits, dense and pruned",
                       description="Train a small MLP on scikit-learn's bundled digits dense, then with gradual "
                                   "pruning, and print per-layer target vs achieved sparsity and accuracy.")
    d.add_argument("--framework", choices=tuple(FRAMEWORKS), default="tf-graph",
                   help="backend (default: tf-graph, TensorFlow compat.v1 graph mode)")
    d.add_argument("--pattern", default=None, help=_pattern_help("sparsity pattern (default 1x1)"))
    d.add_argument("--sparsity", type=float, default=None,
                   help="target sparsity in [0, 1) (default 0.9, or N/M for an N:M pattern)")
    d.add_argument("--steps", type=int, default=None, help="training steps per phase (default 300)")
    d.add_argument("--config", metavar="FILE.yaml", help="pruning config (YAML); --pattern/--sparsity override it")
    d.add_argument("--set", action="append", metavar="KEY=VALUE", help=set_help)
    d.add_argument("--out", metavar="DIR", help="write the pruned model, the config used and plots here")
    d.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    d.add_argument("--no-progress", action="store_true", help="no progress bar")
    d.set_defaults(func=_cmd_demo)

    r = sub.add_parser("report", help="sparsity of a checkpoint, SavedModel, .keras or torch state_dict",
                       description="Read weights without executing code from the file and print per-tensor and "
                                   "total sparsity, and (with --pattern) whether each 2-D view satisfies a pattern.")
    r.add_argument("path", help="torch state_dict (.pt), TF checkpoint (prefix or dir), SavedModel dir, frozen .pb, .keras, .h5, .npz")
    r.add_argument("--pattern", default=None, help=_pattern_help("check each weight's 2-D view against a pattern"))
    r.add_argument("--json", action="store_true", help="machine-readable output")
    r.add_argument("--all", action="store_true", help="include optimizer state (slots, step counters)")
    r.add_argument("--format", default=None, choices=tuple(FORMATS),
                   help="file format (default: detected from the content)")
    r.set_defaults(func=_cmd_report)

    s = sub.add_parser("schedule", help="print or plot the sparsity-vs-step curve of a config",
                       description="Print the sparsity at each mask update point of a config (or plot it): "
                                   "from start_step to end_step, a mask update every pruning_frequency steps. "
                                   f"Schedule kinds (sparsity_decay_type): {', '.join(SCHEDULE_TYPES)}.")
    s.add_argument("--config", metavar="FILE.yaml", help="pruning config (YAML); default: PruningConfig()")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help=set_help)
    s.add_argument("--steps", type=int, default=None, help="horizon in steps (default: 10%% past end_step)")
    s.add_argument("--every", type=int, default=None, help="print every N steps instead of the update points")
    s.add_argument("--max-rows", type=int, default=40, help="at most this many update points printed (default 40)")
    s.add_argument("--plot", metavar="FILE.png", help="write the curve to a PNG (needs matplotlib)")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=_cmd_schedule)
    return p


def _one_line(e: BaseException) -> str:
    msg = " ".join(str(e).split()) or type(e).__name__
    return msg


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status (0 ok, 1 error, 2 usage error).

    Errors go to stderr as one line; the status is what comes back.

    Example:
        >>> main(["report", "no/such/file.pt"])
        1
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    for opt in ("every", "max_rows"):
        v = getattr(args, opt, None)
        if v is not None and v < 1:
            parser.error(f"--{opt.replace('_', '-')} must be a positive integer, got {v}")
    if os.environ.get("SPARSIFY_DEBUG"):
        return int(args.func(args))
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    except (CLIError, ValueError, TypeError, OSError, ImportError) as e:
        sys.stderr.write(f"{PROG} {args.command}: error: {_one_line(e)}\n")
        return 1
    except Exception as e:  # noqa: BLE001 - never a traceback for users; SPARSIFY_DEBUG=1 shows it
        sys.stderr.write(f"{PROG} {args.command}: internal error: {type(e).__name__}: {_one_line(e)} "
                         "(set SPARSIFY_DEBUG=1 for a traceback)\n")
        return 1

