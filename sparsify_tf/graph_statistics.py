"""Deprecated path: ``sparsify_tf.graph_statistics`` is now :mod:`sparsify_tf.graph.statistics` (kept as a re-export).

Importing it warns with a ``DeprecationWarning``; the names are those of the new module.
``__deprecated__`` keeps it out of the API pages (``bench/update_readme.py``).
"""
import warnings

from .graph.statistics import *  # noqa: F401,F403
from .graph.statistics import __all__  # noqa: F401

__deprecated__ = True

warnings.warn("sparsify_tf.graph_statistics moved to sparsify_tf.graph.statistics; import from there",
              DeprecationWarning, stacklevel=2)
