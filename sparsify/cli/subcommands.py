"""The bodies of the ``schedule``, ``report``, ``export`` and ``demo`` subcommands, and the config they read.

Each body takes the parsed arguments (:func:`~sparsify.cli.parser.build_parser`) and returns the exit status;
a user error is a :class:`CLIError` (or a ``ValueError`` / ``OSError`` of the library), which
:func:`~sparsify.cli.command.main` prints as one line. One rule for the command line and YAML configs:
without ``target_sparsity``, the target is 0.9 or the pattern's maximum if lower (N/M for ``"N:M"``),
whether the pattern came from ``--pattern``, ``--set`` or the file (:func:`build_config`).

Example:
    >>> build_config(None, ["pattern=2:4", "end_step=10"]).to_dict()["end_step"]
    10
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

import numpy as np
import yaml

from sparsify.config import PruningConfig
from sparsify.yaml_io import YAMLLimitError, load_yaml_mapping, yaml_loader

from . import interrupts
from .atomic import check_destination, write_text
from .demo import DEFAULT_STEPS as DEFAULT_DEMO_STEPS
from .demo import default_config, format_result, run_demo
from .export import export_model, format_export
from .plots import check_plot_path, plot_path, plot_schedule, schedule_points
from .report import build_report, format_report

__all__ = ["CLIError", "build_config", "MAX_SCHEDULE_STEPS", "schedule_command", "report_command", "export_command",
           "demo_command"]

#: Most steps ``sparsify schedule`` tabulates or plots (one value per step).
MAX_SCHEDULE_STEPS = 10_000_000


class CLIError(Exception):
    """A user error the command reports as one line."""


# ----- config helpers --------------------------------------------------------------------------
def _load_yaml_value(raw: str, key: str = "") -> Any:
    try:            # yaml_loader keeps an unquoted `2:4` a string (YAML 1.1 reads it as base-60 124)
        return yaml.load(raw, Loader=yaml_loader()) if raw.strip() else ""
    except YAMLLimitError as e:
        raise CLIError(f"--set {key}: {e}") from None
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
        out[key.strip()] = _load_yaml_value(raw, key.strip())
    return out


def build_config(config: str | None = None, sets: Sequence[str] | None = None, **overrides: Any) -> PruningConfig:
    """A validated :class:`~sparsify.PruningConfig` from a YAML file, ``--set`` items and overrides.

    Later sources win: the file, then ``sets`` (``"key=value"``, values parsed
    as YAML), then keyword ``overrides`` that are not None. Without
    ``target_sparsity`` the target is 0.9, or the pattern's maximum if lower
    (N/M for ``"N:M"``): the same for the command line and a YAML file.

    Example:
        >>> build_config(None, ["pattern=2:4"]).target_sparsity
        0.5
    """
    data: dict[str, Any] = _load_config_file(config) if config else {}
    data.update(_parse_set(sets))
    data.update({k: v for k, v in overrides.items() if v is not None})
    return PruningConfig.from_dict(data)


# ----- schedule ----------------------------------------------------------------------------------
def _schedule_horizon(cfg: PruningConfig, steps: int | None) -> int:
    if steps is None:
        end = cfg.end_step if cfg.end_step >= 0 else cfg.start_step + 1000
        steps = max(end + max(1, (end - cfg.start_step) // 10), 1) + 1
        if steps > MAX_SCHEDULE_STEPS:
            raise CLIError(f"end_step {cfg.end_step} is too far to tabulate step by step (at most "
                           f"{MAX_SCHEDULE_STEPS} steps); pass --steps N with N <= {MAX_SCHEDULE_STEPS}")
    elif steps < 1 or steps > MAX_SCHEDULE_STEPS:
        raise CLIError(f"--steps must be in [1, {MAX_SCHEDULE_STEPS}] (one value per step is computed), got {steps}")
    return steps


def _emit(text: str, output: str | None) -> None:
    """Print ``text``, or write it atomically to ``output`` and say so."""
    interrupts.check()                      # Ctrl-C while the result was computed: nothing printed or written
    if output is None:
        print(text)
    else:
        write_text(output, text + "\n")
        print(f"wrote {output}")


def schedule_command(args: argparse.Namespace) -> int:
    """``sparsify schedule``: the sparsity at each mask update of a config (or every ``--every`` steps), as a
    table or JSON, printed or written to ``--output``; ``--plot`` draws the curve.

    Example:
        >>> from sparsify.cli import build_parser
        >>> schedule_command(build_parser().parse_args(["schedule", "--set", "end_step=2", "--set", "pruning_frequency=2"]))
        gradual schedule: 0% -> 90%, start_step 0, end_step 2, pruning_frequency 2, pattern 1x1
            step   schedule   applied  update
               0      0.00%     0.00%  yes
               2     90.00%    90.00%  yes
        0
    """
    cfg = build_config(args.config, args.set)
    horizon = _schedule_horizon(cfg, args.steps)
    plot_file = check_plot_path(plot_path(args.plot, "schedule.png")) if args.plot else None
    if args.output is not None:             # refused before anything is printed or written
        check_destination(args.output)
    steps, applied, upd = schedule_points(cfg, horizon)
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
        text = json.dumps({"config": cfg.to_dict(), "steps": [int(s) for s in rows],
                           "sparsity": [float(applied[s]) for s in rows],
                           "update": [bool(upd[s]) for s in rows]}, indent=2)
    else:
        lines = [f"{cfg.sparsity_decay_type} schedule: {100 * cfg.init_sparsity:g}% -> {100 * cfg.target_sparsity:g}%, "
                 f"start_step {cfg.start_step}, end_step {cfg.end_step}, pruning_frequency {cfg.pruning_frequency}, "
                 f"pattern {cfg.pattern}", f"{'step':>8}  {'schedule':>9}  {'applied':>8}  update"]
        for s in rows:
            lines.append(f"{int(s):>8}  {100 * float(sched.sparsity(int(s))):>8.2f}%  {100 * float(applied[s]):>7.2f}%  "
                         f"{'yes' if upd[s] else ''}".rstrip())
        text = "\n".join(lines)
    _emit(text, args.output)
    if plot_file:
        plot_schedule(cfg, horizon, path=plot_file)
        print(f"plot written to {plot_file}", file=sys.stderr if args.json and args.output is None else sys.stdout)
    return 0


# ----- report ------------------------------------------------------------------------------------
def report_command(args: argparse.Namespace) -> int:
    """``sparsify report``: per-tensor and total sparsity of a file (:func:`~sparsify.cli.report.build_report`),
    as a table or JSON, printed or written to ``--output``.

    Example:
        >>> import os, tempfile
        >>> from sparsify.cli import build_parser
        >>> path = os.path.join(tempfile.mkdtemp(), "w.npz")
        >>> np.savez(path, w=np.eye(4))
        >>> report_command(build_parser().parse_args(["report", path])) # doctest: +ELLIPSIS
        /.../w.npz (npz), 1 tensors
        ...
        total (weights, rank >= 2)                    75.00%       12 / 16
        0
    """
    if args.output is not None:             # refused before the file is read
        check_destination(args.output)
    rep = build_report(args.path, pattern=args.pattern, include_optimizer=args.all, fmt=args.format,
                       max_bytes=args.max_bytes)
    _emit(json.dumps(rep.to_dict(), indent=2) if args.json else format_report(rep), args.output)
    return 0


# ----- export ------------------------------------------------------------------------------------
def export_command(args: argparse.Namespace) -> int:
    """``sparsify export``: a smaller artifact of a pruned model (:func:`~sparsify.cli.export.export_model`), and
    its size beside the dense one's.

    Example:
        >>> import os, tempfile
        >>> from sparsify.cli import build_parser
        >>> path = os.path.join(tempfile.mkdtemp(), "w.npz")
        >>> np.savez(path, w=np.eye(64, dtype=np.float32))
        >>> export_command(build_parser().parse_args(["export", path, "--to", "npz", "--json"])) # doctest: +ELLIPSIS
        {...}
        0
    """
    res = export_model(args.path, out=args.out, to=args.to, encoding=args.encoding, fmt=args.format,
                       max_bytes=args.max_bytes, overwrite=args.overwrite,
                       semi_structured=True if args.semi_structured else None, with_optimizer=args.with_optimizer,
                       int8=args.int8)
    print(json.dumps(res.to_dict(), indent=2) if args.json else format_export(res))
    return 0


# ----- demo --------------------------------------------------------------------------------------
def demo_command(args: argparse.Namespace) -> int:
    """``sparsify demo``: the demo (:func:`~sparsify.cli.demo.run_demo`) with the config of ``--config``, ``--set``,
    ``--pattern`` and ``--sparsity``; without a config file, the demo's own schedule fitted to ``--steps``.
    Layers the pattern does not fit stay dense unless the config says otherwise.

    Example:
        >>> from sparsify.cli import build_parser
        >>> demo_command(build_parser().parse_args(["demo", "--steps", "0"]))
        Traceback (most recent call last):
        ...
        sparsify.cli.subcommands.CLIError: --steps must be a positive integer, got 0
    """
    if args.steps is not None and args.steps < 1:
        raise CLIError(f"--steps must be a positive integer, got {args.steps}")
    steps = args.steps if args.steps is not None else DEFAULT_DEMO_STEPS
    data: dict[str, Any] = _load_config_file(args.config) if args.config else {}
    data.update(_parse_set(args.set))
    data.update({k: v for k, v in (("pattern", args.pattern), ("target_sparsity", args.sparsity)) if v is not None})
    if not args.config:          # the demo's own schedule, fitted to --steps; what the user set wins
        base = default_config(steps=steps).to_dict()
        data = {**{k: base[k] for k in ("start_step", "end_step", "pruning_frequency")}, **data}
    data.setdefault("skip_incompatible_layers", True)       # the same with or without a config file
    cfg = PruningConfig.from_dict(data)
    result = run_demo(args.framework, cfg, steps=steps, out=args.out, progress=not args.no_progress,
                      seed=args.seed, prune_classifier=args.prune_classifier, fit_schedule=args.fit_schedule,
                      distillation={} if args.distill else None, backend=args.backend)
    print(format_result(result))
    return 0
