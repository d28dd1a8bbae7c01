"""Deprecated path: ``sparsify_tf.core_update`` is now :mod:`sparsify_tf.common.guarded_update` (kept as a re-export).

Importing it warns with a ``DeprecationWarning``; the names are those of the new module.
``__deprecated__`` keeps it out of the API pages (``bench/update_readme.py``).
"""
import warnings

from .common.guarded_update import *  # noqa: F401,F403
from .common.guarded_update import __all__  # noqa: F401

__deprecated__ = True

warnings.warn("sparsify_tf.core_update moved to sparsify_tf.common.guarded_update; import from there",
              DeprecationWarning, stacklevel=2)
