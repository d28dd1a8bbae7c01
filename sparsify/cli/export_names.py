"""The names of export artifacts: the targets ``--to`` accepts and where each artifact goes by default.

Kept apart from the export itself so that a run directory (:mod:`sparsify.cli.run_directory`) can name the
exports made beside its outputs without importing the export.

Example:
    >>> default_output("model.pt", "npz"), derived_names("model.pt")[0]
    ('model.sparse.npz', 'model.tflite')
"""
from __future__ import annotations

import os

__all__ = ["TARGETS", "SUFFIXES", "INT8_SUFFIX", "default_output", "derived_names"]

#: What ``--to`` accepts.
TARGETS = ("tflite", "torch", "npz")
#: The suffix of each target's artifact.
SUFFIXES = {"tflite": ".tflite", "torch": ".sparse.pt", "npz": ".sparse.npz"}
#: The suffix of an int8 export (``--int8``, always an ``.npz``).
INT8_SUFFIX = ".int8.npz"


def default_output(path: str | os.PathLike, target: str, int8: bool = False) -> str:
    """Where the artifact goes when no ``out`` is given: beside the source.

    Example:
        >>> default_output("runs/model.pt", "torch"), default_output("runs/saved_model/", "tflite")
        ('runs/model.sparse.pt', 'runs/saved_model.tflite')
        >>> default_output("pruned.keras", "npz"), default_output("pruned.keras", "npz", int8=True)
        ('pruned.sparse.npz', 'pruned.int8.npz')
    """
    p = os.fspath(path).rstrip("/\\") or os.fspath(path)
    stem, ext = os.path.splitext(p)
    if os.path.isdir(p) or ext in (".index",) or not ext:
        stem = p
    return stem + (INT8_SUFFIX if int8 else SUFFIXES[target])


def derived_names(name: str) -> list[str]:
    """The names an export of the top-level output ``name`` of a run directory gets by default, one per target
    (and the int8 ``.npz`` last).

    Example:
        >>> derived_names("model.keras")
        ['model.tflite', 'model.sparse.pt', 'model.sparse.npz', 'model.int8.npz']
    """
    stem, ext = os.path.splitext(name)
    return [(stem if ext else name) + s for s in [*(SUFFIXES[t] for t in TARGETS), INT8_SUFFIX]]
