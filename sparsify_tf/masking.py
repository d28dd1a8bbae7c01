"""Deprecated path: ``sparsify_tf.masking`` is now :mod:`sparsify_tf.common.masking` (kept as a re-export).

Importing it warns with a ``DeprecationWarning``; the names are those of the new module.
``__deprecated__`` keeps it out of the API pages (``bench/update_readme.py``).
"""
import warnings

from .common.masking import *  # noqa: F401,F403
from .common.masking import __all__  # noqa: F401

__deprecated__ = True

warnings.warn("sparsify_tf.masking moved to sparsify_tf.common.masking; import from there",
              DeprecationWarning, stacklevel=2)
