"""Our distribution's name and the extra that brings each framework: the words of every "install it" message.

The registry's ``sparsify`` is an unrelated project that happens to share our import name; ours is
installed as ``sparsify-train`` (``pip install "sparsify-train[torch]"``) and imported as ``sparsify``,
``sparsify_tf``, ``sparsify_keras`` and ``sparsify_torch``.

Example:
    >>> from sparsify.extras import install_command
    >>> install_command("torch")
    'pip install "sparsify-train[torch]"'
"""
from __future__ import annotations

__all__ = ["DISTRIBUTION", "EXTRAS", "install_command", "missing_framework"]

DISTRIBUTION = "sparsify-train"
# The extras of setup.cfg that a message may name (tests/test_install_lines.py checks they exist there).
EXTRAS = ("tf", "jax", "keras-torch", "torch", "structured", "deploy", "plot", "test", "docs", "all")


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


def missing_framework(user: str, module: str, extra: str, error: ImportError, note: str = "") -> ImportError:
    """The ``ImportError`` an adapter raises when its framework cannot be imported: it says what to install.

    The core imports no framework (not even dynamically): the adapter imports its own and, when that fails,
    raises this error (``from None``: the message carries the reason).

    Args:
        user: the package that needs the framework, named in the message (``"sparsify_torch"``).
        module: the framework's module (``"torch"``, ``"tensorflow"``, ``"keras"``).
        extra: the extra of our distribution that installs it (one of :data:`EXTRAS`).
        error: the ``ImportError`` the import raised.
        note: more advice, appended to the message (other extras, an environment variable).

    Raises:
        ValueError: ``extra`` is not one of our extras.

    Example:
        >>> try:
        ...     import no_such_framework
        ... except ImportError as e:
        ...     print(missing_framework("sparsify_torch", "torch", "torch", e))    # doctest: +NORMALIZE_WHITESPACE
        sparsify_torch needs torch, which cannot be imported
        (No module named 'no_such_framework'): pip install "sparsify-train[torch]"
    """
    command = install_command(extra)
    return ImportError(f"{user} needs {module}, which cannot be imported ({error}): {command}{note}", name=module)
