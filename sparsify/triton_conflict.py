"""TensorFlow and torch in one process: warn before triton can crash it.

The registry's torch wheel (the CUDA build) installs ``triton``, a GPU kernel compiler. Loaded after
TensorFlow (``import torchvision`` and ``torch.compile`` load it through ``torch._dynamo``), its native
library ends the process with a segmentation fault. The adapters call :func:`warn_if_triton_conflict`
when they are imported into a process that holds both frameworks, so the user hears of it, and of the
fix, before the crash. Nothing is imported here: the check reads ``sys.modules`` and asks the import
system whether ``triton`` could be found.

Example:
    >>> triton_conflict(loaded={"numpy"}, triton_installed=True) is None      # no TensorFlow loaded
    True
    >>> triton_conflict(loaded={"tensorflow", "torch"}, triton_installed=True).startswith("TensorFlow and torch")
    True
"""
from __future__ import annotations

import importlib.util
import sys
import warnings
from typing import Collection

__all__ = ["FIX", "triton_conflict", "warn_if_triton_conflict"]

#: What to do about it, quoted by the warning and the README.
FIX = ("where triton is not needed (CPU training), pip uninstall triton; else run TensorFlow and torch in "
       "separate processes")


def triton_conflict(loaded: Collection[str] | None = None, triton_installed: bool | None = None) -> str | None:
    """The warning for this process, or None when there is nothing to fear.

    Args:
        loaded: names of the loaded modules (default: ``sys.modules``).
        triton_installed: whether ``triton`` can be imported (default: asked of the import system,
            without importing it).

    Returns:
        A message when TensorFlow and torch are both loaded and triton is installed but not loaded yet.
    """
    loaded = sys.modules if loaded is None else loaded
    if not ("tensorflow" in loaded and "torch" in loaded) or "triton" in loaded:
        return None
    if triton_installed is None:
        triton_installed = importlib.util.find_spec("triton") is not None
    if not triton_installed:
        return None
    return ("TensorFlow and torch are loaded in one process and triton (installed with the registry's torch) "
            "can be imported: loading it after TensorFlow, as torchvision and torch.compile do, ends the "
            f"process with a segmentation fault. Fix: {FIX}")


def warn_if_triton_conflict(stacklevel: int = 2) -> bool:
    """Issue a ``RuntimeWarning`` with :func:`triton_conflict`'s message if there is one; returns whether it did.

    ``stacklevel`` counts from the caller (2: the code that imported the adapter calling this).
    """
    message = triton_conflict()
    if message is not None:
        warnings.warn(message, RuntimeWarning, stacklevel=stacklevel + 1)
    return message is not None
