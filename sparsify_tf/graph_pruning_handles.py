"""Deprecated path: ``sparsify_tf.graph_pruning_handles`` is now :mod:`sparsify_tf.graph.handles` (kept as a re-export).

Importing it warns with a ``DeprecationWarning``; the names are those of the new module.
``__deprecated__`` keeps it out of the API pages (``bench/update_readme.py``).
"""
import warnings

from .graph.handles import *  # noqa: F401,F403
from .graph.handles import __all__  # noqa: F401

__deprecated__ = True

warnings.warn("sparsify_tf.graph_pruning_handles moved to sparsify_tf.graph.handles; import from there",
              DeprecationWarning, stacklevel=2)
