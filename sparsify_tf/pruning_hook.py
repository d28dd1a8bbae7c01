"""Deprecated path: ``sparsify_tf.pruning_hook`` is now :mod:`sparsify_tf.graph.hook` (kept as a re-export).

Importing it warns with a ``DeprecationWarning``; the names are those of the new module.
``__deprecated__`` keeps it out of the API pages (``bench/update_readme.py``).
"""
import warnings

from .graph.hook import *  # noqa: F401,F403
from .graph.hook import __all__  # noqa: F401

__deprecated__ = True

warnings.warn("sparsify_tf.pruning_hook moved to sparsify_tf.graph.hook; import from there",
              DeprecationWarning, stacklevel=2)
