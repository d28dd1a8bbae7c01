"""The ``sparsify`` command: :func:`main` parses the arguments, runs the subcommand and ends it as a Unix tool.

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
``sparsify schedule`` never load them. The parser is :mod:`.parser`, the
subcommands' bodies :mod:`.subcommands` (``init``: :mod:`.starter_config`).

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

import os
import select
import sys
from typing import Sequence

from . import interrupts
from .messages import plain_message
from .parser import PROG, build_parser
from .subcommands import CLIError

__all__ = ["main"]


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
