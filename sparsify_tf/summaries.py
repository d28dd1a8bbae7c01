"""Deprecated path: ``sparsify_tf.summaries`` is now :mod:`sparsify_tf.common.summaries` (kept as a re-export).

Importing it warns with a ``DeprecationWarning``; the names are those of the new module.
``__deprecated__`` keeps it out of the API pages (``bench/update_readme.py``).
"""
import warnings

from .common.summaries import *  # noqa: F401,F403
from .common.summaries import __all__  # noqa: F401

__deprecated__ = True

warnings.warn("sparsify_tf.summaries moved to sparsify_tf.common.summaries; import from there",
              DeprecationWarning, stacklevel=2)
