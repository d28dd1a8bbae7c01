"""Deprecated path: ``sparsify_tf.optimizer_slots`` is now :mod:`sparsify_tf.common.optimizer_slots`
(kept as a re-export).

Importing it warns with a ``DeprecationWarning``; the names are those of the new module.
``__deprecated__`` keeps it out of the API pages (``bench/update_readme.py``).
"""
import warnings

from .common.optimizer_slots import *  # noqa: F401,F403
from .common.optimizer_slots import __all__  # noqa: F401

__deprecated__ = True

warnings.warn("sparsify_tf.optimizer_slots moved to sparsify_tf.common.optimizer_slots; import from there",
              DeprecationWarning, stacklevel=2)
