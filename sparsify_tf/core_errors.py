"""Deprecated path: ``sparsify_tf.core_errors`` is now :mod:`sparsify_tf.common.core_errors` (kept as a re-export).

Importing it warns with a ``DeprecationWarning``; the names are those of the new module.
``__deprecated__`` keeps it out of the API pages (``bench/update_readme.py``).
"""
import warnings

from .common.core_errors import *  # noqa: F401,F403
from .common.core_errors import __all__  # noqa: F401

__deprecated__ = True

warnings.warn("sparsify_tf.core_errors moved to sparsify_tf.common.core_errors; import from there",
              DeprecationWarning, stacklevel=2)
