"""The application: the ``sparsify`` command (``demo``, ``report``, ``export``, ``schedule``), its plots and readers.

This subpackage sits on top of everything: it is the one part of
``sparsify`` that may import TensorFlow, torch and the adapters
(``sparsify_tf``, ``sparsify_torch``); it does so only where a subcommand
needs them. The core (every other module of ``sparsify``) never imports it.

* :mod:`.command`: argument parsing and the subcommands (:func:`main`);
* :mod:`.demo`: ``sparsify demo``, one backend per framework;
* :mod:`.report`: ``sparsify report`` (readers, statistics, formatting);
* :mod:`.export`: ``sparsify export`` (TFLite, compressed torch state_dict or .npz, sizes);
* :mod:`.plots`: schedule curve, per-layer sparsity, mask heat-map;
* :mod:`.atomic`: atomic files and run directories committed with a manifest;
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
from .command import CLIError, build_config, build_parser, main

__all__ = ["main", "build_parser", "build_config", "CLIError"]
