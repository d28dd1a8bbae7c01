"""Deprecated path: ``sparsify_tf.mask_write`` is now :mod:`sparsify_tf.common.mask_write` (kept as a re-export).

Importing it warns with a ``DeprecationWarning``; the names are those of the new module.
``__deprecated__`` keeps it out of the API pages (``bench/update_readme.py``).
"""
import warnings

from .common.mask_write import *  # noqa: F401,F403
from .common.mask_write import __all__  # noqa: F401

__deprecated__ = True

warnings.warn("sparsify_tf.mask_write moved to sparsify_tf.common.mask_write; import from there",
              DeprecationWarning, stacklevel=2)
