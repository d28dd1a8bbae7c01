"""Deprecated path: ``sparsify_tf.pruning_scope`` is now :mod:`sparsify_tf.common.pruning_scope` (kept as a re-export).

Importing it warns with a ``DeprecationWarning``; the names are those of the new module.
``__deprecated__`` keeps it out of the API pages (``bench/update_readme.py``).
"""
import warnings

from .common.pruning_scope import *  # noqa: F401,F403
from .common.pruning_scope import __all__  # noqa: F401

__deprecated__ = True

warnings.warn("sparsify_tf.pruning_scope moved to sparsify_tf.common.pruning_scope; import from there",
              DeprecationWarning, stacklevel=2)
