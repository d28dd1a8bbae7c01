"""The ``sparsify`` command: ``demo``, ``report`` and ``schedule``.

Examples (shell)::

    sparsify demo                              # TF graph mode, 90% unstructured
    sparsify demo --framework torch --pattern 2:4 --steps 200 --out runs/torch
    sparsify report model.pt --pattern 2:4     # sparsity per tensor + 2:4 conformity
    sparsify report ckpt_dir --json
    sparsify schedule --config prune.yaml --plot schedule.png

Bad input (a missing or unreadable file, an unknown format, a bad config key)
prints one line on stderr and exits with status 1 (2 for command-line usage
errors), without a traceback. Set ``SPARSIFY_DEBUG=1`` to see tracebacks.

Example:
    >>> main(["schedule", "--set", "end_step=4", "--set", "pruning_frequency=2"])  # doctest: +SKIP
    0
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Sequence

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
from .config import load_yaml_mapping, yaml_loader as _yaml_loader  # noqa: E402  (keeps `pattern: 2:4` a string)


def _load_yaml_value(raw: str) -> Any:
    import yaml

    try:
        return yaml.load(raw, Loader=_yaml_loader()) if raw.strip() else ""
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


def build_config(config: str | None = None, sets: Sequence[str] | None = None, **overrides: Any):
    """A validated :class:`~sparsify.PruningConfig` from a YAML file, ``--set`` items and overrides.

    Later sources win: the file, then ``sets`` (``"key=value"``, values parsed
    as YAML), then keyword ``overrides`` that are not None.

    Example:
        >>> build_config(None, ["pattern=2:4"], target_sparsity=0.5).pattern
        '2:4'
    """
    from .config import PruningConfig

    data: dict[str, Any] = _load_config_file(config) if config else {}
    data.update(_parse_set(sets))
    data.update({k: v for k, v in overrides.items() if v is not None})
    return PruningConfig.from_dict(data)


# ----- schedule ----------------------------------------------------------------------------------
def _cmd_schedule(args: argparse.Namespace) -> int:
    import numpy as np

    from .plots import schedule_points

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
        print(f"{cfg.sparsity_decay_type} schedule: {100 * cfg.init_sparsity:g}% -> {100 * cfg.target_sparsity:g}% "
              f"from step {cfg.start_step} to {cfg.end_step}, mask update every {cfg.pruning_frequency} steps, "
              f"pattern {cfg.pattern}")
        print(f"{'step':>8}  {'schedule':>9}  {'applied':>8}  update")
        for s in rows:
            print(f"{int(s):>8}  {100 * float(sched.sparsity(int(s))):>8.2f}%  {100 * float(applied[s]):>7.2f}%  "
                  f"{'yes' if upd[s] else ''}")
    if args.plot:
        from .plots import plot_schedule

        plot_schedule(cfg, args.steps, path=args.plot)
        if not args.json:
            print(f"plot written to {args.plot}")
    return 0


# ----- report ------------------------------------------------------------------------------------
def _cmd_report(args: argparse.Namespace) -> int:
    from .report import build_report, format_report

    rep = build_report(args.path, pattern=args.pattern, include_optimizer=args.all, fmt=args.format)
    if args.json:
        print(json.dumps(rep.to_dict(), indent=2))
    else:
        print(format_report(rep))
    return 0


# ----- demo --------------------------------------------------------------------------------------
def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import default_config, format_result, run_demo

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
def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``sparsify`` command.

    Example:
        >>> build_parser().parse_args(["report", "model.pt", "--json"]).json
        True
    """
    from . import __version__

    p = _Parser(prog=PROG, description="Exact, fast sparsity while training for TensorFlow graphs, Keras and PyTorch.")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="command", metavar="{demo,report,schedule}", parser_class=_Parser)

    d = sub.add_parser("demo", help="train a small model on scikit-learn's digits, dense and pruned",
                       description="Train a small MLP on scikit-learn's bundled digits dense, then with gradual "
                                   "pruning, and print per-layer target vs achieved sparsity and accuracy.")
    d.add_argument("--framework", choices=("tf-graph", "keras", "torch"), default="tf-graph",
                   help="backend (default: tf-graph, TensorFlow compat.v1 graph mode)")
    d.add_argument("--pattern", default=None, help="sparsity pattern: 1x1 (default), 4x1, channelx1, 2:4, ...")
    d.add_argument("--sparsity", type=float, default=None,
                   help="target sparsity in [0, 1) (default 0.9, or N/M for an N:M pattern)")
    d.add_argument("--steps", type=int, default=None, help="training steps per phase (default 300)")
    d.add_argument("--config", metavar="FILE.yaml", help="pruning config (YAML); --pattern/--sparsity override it")
    d.add_argument("--set", action="append", metavar="KEY=VALUE", help="override one config key (repeatable)")
    d.add_argument("--out", metavar="DIR", help="write the pruned model, the config used and plots here")
    d.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    d.add_argument("--no-progress", action="store_true", help="no progress bar")
    d.set_defaults(func=_cmd_demo)

    r = sub.add_parser("report", help="sparsity of a checkpoint, SavedModel, .keras or torch state_dict",
                       description="Read weights without executing code from the file and print per-tensor and "
                                   "total sparsity, and (with --pattern) whether each 2-D view satisfies a pattern.")
    r.add_argument("path", help="torch state_dict (.pt), TF checkpoint (prefix or dir), SavedModel dir, frozen .pb, .keras, .h5, .npz")
    r.add_argument("--pattern", default=None, help="check each weight's 2-D view against a pattern, e.g. 2:4 or 4x1")
    r.add_argument("--json", action="store_true", help="machine-readable output")
    r.add_argument("--all", action="store_true", help="include optimizer state (slots, step counters)")
    r.add_argument("--format", default=None,
                   choices=("torch", "tf-checkpoint", "savedmodel", "graphdef", "keras", "hdf5", "npz"),
                   help="file format (default: detected from the content)")
    r.set_defaults(func=_cmd_report)

    s = sub.add_parser("schedule", help="print or plot the sparsity-vs-step curve of a config",
                       description="Print the sparsity at each mask update point of a config (or plot it).")
    s.add_argument("--config", metavar="FILE.yaml", help="pruning config (YAML); default: PruningConfig()")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help="override one config key (repeatable)")
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

    Example:
        >>> main(["report", "no/such/file.pt"])  # doctest: +SKIP
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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
