"""The application: the ``sparsify`` command (``demo``, ``report``, ``export``, ``schedule``, ``init``), its plots and readers.

This subpackage sits on top of everything: it is the one part of
``sparsify`` that may import TensorFlow, torch and the adapters
(``sparsify_tf``, ``sparsify_torch``); it does so only where a subcommand
needs them. The core (every other module of ``sparsify``) never imports it.

* :mod:`.command`: the command (:func:`main`): runs a subcommand, errors as one line, quiet in a closed pipe;
* :mod:`.parser`: the argument parser (:func:`build_parser`);
* :mod:`.subcommands`: the bodies of ``schedule``, ``report``, ``export`` and ``demo``, and the config they
  read (:func:`build_config`); ``init``: :mod:`.starter_config`;
* :mod:`.demo`: ``sparsify demo``, one backend per framework;
* :mod:`.report`: ``sparsify report`` (readers, statistics, formatting);
* :mod:`.export`: ``sparsify export`` (TFLite, compressed torch state_dict or .npz, sizes);
* :mod:`.plots`: schedule curve, per-layer sparsity, mask heat-map;
* :mod:`.atomic`: atomic files (a file is the old one or the whole new one);
* :mod:`.run_directory`: the outputs of a run committed together, with a manifest;
* :mod:`.interrupts`: Ctrl-C only at safe points (a flag the run checks; twice aborts at once);
* :mod:`.compressed_npz`: compressed weights in a NumPy ``.npz`` (export and report without a framework);
* :mod:`.frameworks`: quiet imports of TensorFlow and torch;
* :mod:`.messages`: error text on one plain line (whole, no escape codes, bounded).

``sparsify`` (the console script) and ``python -m sparsify`` call :func:`main`.

Example:
    >>> args = build_parser().parse_args(["demo", "--framework", "torch", "--pattern", "2:4"])
    >>> args.framework, args.pattern
    ('torch', '2:4')
"""
from .command import main
from .parser import build_parser
from .subcommands import CLIError, build_config

__all__ = ["main", "build_parser", "build_config", "CLIError"]
