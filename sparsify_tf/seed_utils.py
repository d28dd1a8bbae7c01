"""Deprecated path: ``sparsify_tf.seed_utils`` is now :mod:`sparsify_tf.seed.utils` (kept as a re-export).

Importing it warns with a ``DeprecationWarning``; the names are those of the new module.
``__deprecated__`` keeps it out of the API pages (``bench/update_readme.py``).
"""
import warnings

from .seed.utils import *  # noqa: F401,F403
from .seed.utils import __all__  # noqa: F401

__deprecated__ = True

warnings.warn("sparsify_tf.seed_utils moved to sparsify_tf.seed.utils; import from there",
              DeprecationWarning, stacklevel=2)
