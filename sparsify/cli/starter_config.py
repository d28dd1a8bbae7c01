"""``sparsify init``: write a starter pruning config (YAML) to edit, for ``schedule``, ``demo`` and the adapters.

The file is :data:`STARTER_CONFIG` with its own name in the usage comments; it loads with
``PruningConfig.coerce(path)`` and ``--config path``. An existing file is left alone unless
``--overwrite``; ``-`` prints the config instead of writing it.

Example:
    >>> import os, tempfile
    >>> from sparsify import PruningConfig
    >>> path = os.path.join(tempfile.mkdtemp(), "prune.yaml")
    >>> write_starter_config(path)
    >>> cfg = PruningConfig.coerce(path)
    >>> cfg.pattern, cfg.target_sparsity, cfg.end_step
    ('4x1', 0.8, 1000)
"""
from __future__ import annotations

import argparse
import os
from typing import Any

from .atomic import write_text

__all__ = ["STARTER_CONFIG", "DEFAULT_PATH", "starter_config", "write_starter_config", "add_init_parser"]

#: Where ``sparsify init`` writes without a FILE argument.
DEFAULT_PATH = "prune.yaml"

#: The starter config; ``{path}`` is the file's name in its usage comments.
STARTER_CONFIG = """\
# A starter pruning config, written by `sparsify init`. Edit it; every key is optional (a key left out
# takes its default) and docs/config.md lists them all. Use it with:
#   sparsify schedule --config {path} --plot schedule.png   # the sparsity-vs-step curve
#   sparsify demo --config {path} --fit-schedule            # the demo model, pruned with it
#   PruningConfig.coerce("{path}")                          # in Python, for every adapter
# `pattern: 2:4` may stay unquoted.
pruning:
  pattern: 4x1                 # blocks of 4 output rows x 1 input column
  target_sparsity: 0.8         # without it: 0.9, or the pattern's maximum if lower (N/M for N:M)
  pruning_scope: local
  start_step: 0
  end_step: 1000
  pruning_frequency: 100
  sparsity_decay_type: gradual
  skip_incompatible_layers: true   # layers 4x1 does not fit (e.g. a 10-class output layer) stay dense
"""


def starter_config(path: str = DEFAULT_PATH) -> str:
    """The starter config's text, naming ``path`` in its usage comments.

    Example:
        >>> starter_config("my.yaml").splitlines()[2]
        '#   sparsify schedule --config my.yaml --plot schedule.png   # the sparsity-vs-step curve'
    """
    return STARTER_CONFIG.format(path=path)


def write_starter_config(path: str | os.PathLike = DEFAULT_PATH, overwrite: bool = False) -> None:
    """Write the starter config to ``path`` (atomically).

    Raises:
        FileExistsError: ``path`` exists and ``overwrite`` is False (the file is left as it was).
        OSError: the directory does not exist, or ``path`` is a directory.
    """
    name = os.fspath(path)
    if os.path.lexists(name) and not overwrite and not os.path.isdir(name):
        raise FileExistsError(f"{name!r} exists; pass --overwrite to replace it")
    write_text(name, starter_config(os.path.basename(name)))


def _cmd_init(args: argparse.Namespace) -> int:
    if args.file == "-":
        print(starter_config(), end="")
        return 0
    write_starter_config(args.file, overwrite=args.overwrite)
    print(f"wrote {args.file}: try 'sparsify schedule --config {args.file}'")
    return 0


def add_init_parser(sub: Any) -> None:
    """The ``init`` subcommand's parser (``sub``: the command's subparsers)."""
    i = sub.add_parser("init", help="write a starter pruning config (YAML) to edit",
                       description="Write a starter pruning config: the pattern, target, schedule window and "
                                   "update frequency, commented, for 'sparsify schedule --config', "
                                   "'sparsify demo --config' and PruningConfig.coerce.")
    i.add_argument("file", nargs="?", default=DEFAULT_PATH, metavar="FILE",
                   help=f"where to write it (default {DEFAULT_PATH}; '-' prints it)")
    i.add_argument("--overwrite", action="store_true", help="replace an existing FILE")
    i.set_defaults(func=_cmd_init)
