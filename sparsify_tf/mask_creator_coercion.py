"""Deprecated path: ``sparsify_tf.mask_creator_coercion`` is now :mod:`sparsify_tf.seed.mask_creator_coercion`
(kept as a re-export).

Importing it warns with a ``DeprecationWarning``; the names are those of the new module.
``__deprecated__`` keeps it out of the API pages (``bench/update_readme.py``).
"""
import warnings

from .seed.mask_creator_coercion import *  # noqa: F401,F403
from .seed.mask_creator_coercion import __all__  # noqa: F401

__deprecated__ = True

warnings.warn("sparsify_tf.mask_creator_coercion moved to sparsify_tf.seed.mask_creator_coercion; import from there",
              DeprecationWarning, stacklevel=2)
