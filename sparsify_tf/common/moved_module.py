"""Old module paths kept after ``sparsify_tf`` was grouped into folders: one re-export that warns.

A shim at an old path calls :func:`reexport` with its namespace and the new module; it then holds the new
module's public names (the same objects) and importing it warns with a ``DeprecationWarning`` naming the new
path. Shims set ``__deprecated__ = True``, which keeps them out of the API pages (``scripts/update_docs.py``).

Example:
    >>> import warnings
    >>> namespace = {"__name__": "sparsify_tf.old_scope"}
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     reexport(namespace, "sparsify_tf.common.pruning_scope")
    >>> "PruningScope" in namespace["__all__"], str(caught[0].message).split(";")[0]
    (True, 'sparsify_tf.old_scope moved to sparsify_tf.common.pruning_scope')
"""
from __future__ import annotations

import importlib
import warnings
from typing import Any

__all__ = ["reexport"]


def reexport(namespace: dict[str, Any], new: str) -> None:
    """Put the public names of module ``new`` into ``namespace`` (an old module's globals) and warn."""
    module = importlib.import_module(new)
    names = list(module.__all__)
    namespace.update({n: getattr(module, n) for n in names}, __all__=names)
    warnings.warn(f"{namespace['__name__']} moved to {new}; import from there", DeprecationWarning, stacklevel=3)
