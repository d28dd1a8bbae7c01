"""Deprecated path: :mod:`sparsify_tf.common.graph_utils` (docs/tf_graph.md named it; kept as a re-export).

Importing it warns with a ``DeprecationWarning``; the names are those of the new module.

Example:
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", DeprecationWarning)
    ...     from sparsify_tf.graph_utils import unmaskable_weight_uses
    >>> unmaskable_weight_uses.__module__
    'sparsify_tf.common.graph_utils'
"""
import warnings

from .common.graph_utils import *  # noqa: F401,F403
from .common.graph_utils import __all__  # noqa: F401

warnings.warn("sparsify_tf.graph_utils moved to sparsify_tf.common.graph_utils; import from there "
              "(or the public names from sparsify_tf)", DeprecationWarning, stacklevel=2)
