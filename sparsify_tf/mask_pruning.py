"""Deprecated path: ``sparsify_tf.mask_pruning`` is now :mod:`sparsify_tf.seed.mask_pruning` (kept as a re-export).

Importing it warns with a ``DeprecationWarning``; the names are those of the new module.
``__deprecated__`` keeps it out of the API pages (``bench/update_readme.py``).
"""
import warnings

from .seed.mask_pruning import *  # noqa: F401,F403
from .seed.mask_pruning import __all__  # noqa: F401

__deprecated__ = True

warnings.warn("sparsify_tf.mask_pruning moved to sparsify_tf.seed.mask_pruning; import from there",
              DeprecationWarning, stacklevel=2)
