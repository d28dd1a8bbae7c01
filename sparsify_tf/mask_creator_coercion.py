"""Deprecated path: now :mod:`sparsify_tf.seed.mask_creator_coercion` (a re-export that warns; :mod:`sparsify_tf.common.moved_module`)."""
from .common.moved_module import reexport

__deprecated__ = True
reexport(globals(), "sparsify_tf.seed.mask_creator_coercion")
