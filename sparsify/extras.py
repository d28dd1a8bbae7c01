"""Our distribution's name and the extra that brings each framework: the words of every "install it" message.

The registry's ``sparsify`` is an unrelated project that happens to share our import name; ours is
installed as ``sparsify-train`` (``pip install "sparsify-train[torch]"``) and imported as ``sparsify``,
``sparsify_tf``, ``sparsify_keras`` and ``sparsify_torch``.

Example:
    >>> from sparsify.extras import install_command, require
    >>> install_command("torch")
    'pip install "sparsify-train[torch]"'
    >>> require("numpy", "torch", "sparsify_torch").__name__
    'numpy'
"""
from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["DISTRIBUTION", "EXTRAS", "install_command", "require"]

DISTRIBUTION = "sparsify-train"
# The extras of setup.cfg that a message may name (tests/test_install_lines.py checks they exist there).
EXTRAS = ("tf", "jax", "keras-torch", "torch", "structured", "plot", "test", "docs", "all")


def install_command(extra: str) -> str:
    """The pip command that installs our distribution with ``extra``.

    Args:
        extra: one of :data:`EXTRAS`.

    Raises:
        ValueError: ``extra`` is not one of our extras.

    Example:
        >>> install_command("jax")
        'pip install "sparsify-train[jax]"'
    """
    if extra not in EXTRAS:
        raise ValueError(f"extra must be one of {', '.join(EXTRAS)}, got {extra!r}")
    return f'pip install "{DISTRIBUTION}[{extra}]"'


def require(module: str, extra: str, user: str) -> ModuleType:
    """Import ``module``, or raise an ``ImportError`` that says which extra brings it.

    Args:
        module: the framework module to import (``"torch"``, ``"tensorflow"``, ``"keras"``).
        extra: the extra of our distribution that installs it (one of :data:`EXTRAS`).
        user: the package that needs it, named in the message (``"sparsify_torch"``).

    Returns:
        The imported module.

    Raises:
        ImportError: ``module`` cannot be imported; the message names ``user``, the reason and the command.

    Example:
        >>> try:
        ...     require("no_such_framework", "torch", "sparsify_torch")
        ... except ImportError as e:
        ...     print(e)    # doctest: +NORMALIZE_WHITESPACE
        sparsify_torch needs no_such_framework, which cannot be imported
        (No module named 'no_such_framework'): pip install "sparsify-train[torch]"
    """
    command = install_command(extra)
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{user} needs {module}, which cannot be imported ({e}): {command}", name=module) from None
