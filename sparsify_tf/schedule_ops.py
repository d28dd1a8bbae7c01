"""Deprecated path: ``sparsify_tf.schedule_ops`` is now :mod:`sparsify_tf.common.schedule_ops` (kept as a re-export).

Importing it warns with a ``DeprecationWarning``; the names are those of the new module.
``__deprecated__`` keeps it out of the API pages (``bench/update_readme.py``).
"""
import warnings

from .common.schedule_ops import *  # noqa: F401,F403
from .common.schedule_ops import __all__  # noqa: F401

__deprecated__ = True

warnings.warn("sparsify_tf.schedule_ops moved to sparsify_tf.common.schedule_ops; import from there",
              DeprecationWarning, stacklevel=2)
