"""The ``sparsify`` command: argument parsing and the ``demo``, ``report`` and ``schedule`` subcommands.

Examples (shell)::

    sparsify demo                              # the installed framework, 90% unstructured
    sparsify demo --framework torch --pattern 2:4 --steps 200 --out runs/torch
    sparsify report model.pt --pattern 2:4     # sparsity per tensor + 2:4 conformity
    sparsify report ckpt_dir --json --output report.json
    sparsify export runs/torch/model.pt        # compressed state_dict (or TFLite), dense vs sparse bytes
    sparsify init                              # a starter config to edit: prune.yaml
    sparsify schedule --config prune.yaml --plot schedule.png

Bad input (a missing or unreadable file, an unknown format, a bad config key)
prints one line on stderr and exits with status 1 (2 for command-line usage
errors), without a traceback. Set ``SPARSIFY_DEBUG=1`` to see tracebacks.
Ctrl-C stops the command at the next safe point (a training step, between
outputs, around the commit) with "sparsify: interrupted" and status 130; a
second Ctrl-C aborts at once (:mod:`.interrupts`).
Every file the command writes is written atomically (:mod:`.atomic`): an
interrupt or a full disk leaves the previous file, never half of a new one.

One rule for the command line and YAML configs: without ``target_sparsity``,
the target is 0.9 or the pattern's maximum if lower (N/M for ``"N:M"``),
whether the pattern came from ``--pattern``, ``--set`` or the file.

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
import select
import sys
from typing import Any, Sequence

import numpy as np
import yaml

from sparsify import __version__
from sparsify.config import SCHEDULE_TYPES, PruningConfig
from sparsify.patterns import pattern_examples, pattern_summaries
from sparsify.sparse_format import ENCODINGS
from sparsify.yaml_io import YAMLLimitError, load_yaml_mapping, yaml_loader

from .atomic import check_destination, write_text
from .demo import DEFAULT_STEPS as DEFAULT_DEMO_STEPS
from .demo import FRAMEWORKS, MAX_SEED, default_config, format_result, run_demo
from .demo.keras_backend import BACKEND_ORDER as KERAS_BACKENDS
from .export import TARGETS, export_model, format_export
from . import interrupts
from .messages import plain_message
from .plots import check_plot_path, plot_path, plot_schedule, schedule_points
from .starter_config import add_init_parser
from .report import FORMATS, build_report, format_report
from .report.readers import DEFAULT_MAX_BYTES

__all__ = ["main", "build_parser", "build_config", "CLIError", "MAX_SCHEDULE_STEPS"]

PROG = "sparsify"
#: Most steps ``sparsify schedule`` tabulates or plots (one value per step).
MAX_SCHEDULE_STEPS = 10_000_000


class CLIError(Exception):
    """A user error the command reports as one line."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line and exits with status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message} (see '{self.prog} --help')\n")
        raise SystemExit(2)


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


def _cmd_schedule(args: argparse.Namespace) -> int:
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
def _cmd_report(args: argparse.Namespace) -> int:
    if args.output is not None:             # refused before the file is read
        check_destination(args.output)
    rep = build_report(args.path, pattern=args.pattern, include_optimizer=args.all, fmt=args.format,
                       max_bytes=args.max_bytes)
    _emit(json.dumps(rep.to_dict(), indent=2) if args.json else format_report(rep), args.output)
    return 0


# ----- export ------------------------------------------------------------------------------------
def _cmd_export(args: argparse.Namespace) -> int:
    res = export_model(args.path, out=args.out, to=args.to, encoding=args.encoding, fmt=args.format,
                       max_bytes=args.max_bytes, overwrite=args.overwrite,
                       semi_structured=True if args.semi_structured else None, with_optimizer=args.with_optimizer,
                       int8=args.int8)
    print(json.dumps(res.to_dict(), indent=2) if args.json else format_export(res))
    return 0


# ----- demo --------------------------------------------------------------------------------------
def _cmd_demo(args: argparse.Namespace) -> int:
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


# ----- parser ------------------------------------------------------------------------------------
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
                        "temperature 2, weight 1 (torch, keras, tf-keras; docs/distillation.md)")
    d.add_argument("--out", metavar="DIR",
                   help="write the pruned model, the config used, plots and a manifest here, all at the end "
                        "(an interrupted run leaves DIR as it was)")
    d.add_argument("--seed", type=_seed, default=0, help=f"random seed in [0, {MAX_SEED}] (default 0)")
    d.add_argument("--no-progress", action="store_true", help="no progress bar")
    d.set_defaults(func=_cmd_demo)


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
    r.set_defaults(func=_cmd_report)


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
    e.set_defaults(func=_cmd_export)


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
    s.set_defaults(func=_cmd_schedule, subparser=s)


def _one_line(e: BaseException) -> str:
    """One plain line (no escape codes), at most :data:`~.messages.MAX_MESSAGE` characters: whole, yet a
    message never prints an unbounded value."""
    text = str(e)
    if isinstance(e, OSError) and e.strerror:       # "[Errno 2] ..." says nothing to a user: the message, the file
        text = e.strerror + "".join(f": {f!r}" for f in (e.filename, e.filename2) if f is not None)
    return plain_message(text) or type(e).__name__


def _closed_pipe(fd: int) -> bool:
    """Is ``fd`` a pipe whose reader has gone (poll reports an error on its write end)?"""
    try:
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):      # no poll() (Windows), a closed descriptor
        return False


def _reader_gone() -> int:
    """The reader of stdout (or stderr) closed its end: stop quietly with status 0, as ``cat`` or ``grep`` do.

    The closed stream is pointed at the null device, so the interpreter's final flush finds nowhere to
    fail and prints nothing ("Exception ignored ... BrokenPipeError").
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for stream in (sys.stdout, sys.stderr):
            try:
                fd = stream.fileno()
            except (AttributeError, OSError, ValueError):   # a replaced stream (a test's capture)
                continue
            if stream is sys.stdout or _closed_pipe(fd):
                os.dup2(devnull, fd)
    finally:
        os.close(devnull)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status (0 ok, 1 error, 2 usage error).

    Errors go to stderr as one line; the status is what comes back. A reader that closes the pipe
    early (``sparsify report x.pt | head -1``) ends the command quietly with status 0.

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
            args.subparser.error(f"--{opt.replace('_', '-')} must be a positive integer, got {v}")
    if os.environ.get("SPARSIFY_DEBUG"):
        return int(args.func(args))
    try:
        with interrupts.handled():          # Ctrl-C sets a flag the run checks at safe points; twice aborts
            status = int(args.func(args))
            interrupts.check()
            sys.stdout.flush()              # a reader that went away shows here, not at the interpreter's exit
            return status
    except BrokenPipeError:                 # `sparsify report x.pt | head -1`: the reader has all it wanted
        return _reader_gone()
    except KeyboardInterrupt:
        sys.stderr.write(f"{interrupts.MESSAGE}\n")
        return interrupts.EXIT_STATUS
    except (CLIError, ValueError, TypeError, OSError, ImportError) as e:
        sys.stderr.write(f"{PROG} {args.command}: error: {_one_line(e)}\n")
        return 1
    except Exception as e:  # noqa: BLE001 - never a traceback for users; SPARSIFY_DEBUG=1 shows it
        sys.stderr.write(f"{PROG} {args.command}: internal error: {type(e).__name__}: {_one_line(e)} "
                         "(set SPARSIFY_DEBUG=1 for a traceback)\n")
        return 1

