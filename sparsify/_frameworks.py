"""Lazy, quiet imports of the frameworks for the command-line tools (private).

The core never imports TensorFlow or torch at module import time; the CLI,
the report reader and the demo backends call :func:`import_tensorflow` /
:func:`import_torch` inside the functions that need them.

A CUDA-enabled TensorFlow wheel on a machine without a GPU writes a few lines
from native code (absl, before its log is initialised, so
``TF_CPP_MIN_LOG_LEVEL`` cannot hide them) while it is imported and while it
first enumerates devices. :func:`import_tensorflow` sends the native stderr
to /dev/null for exactly that first import; Python exceptions still propagate.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import sys
from types import ModuleType
from typing import Iterator

__all__ = ["import_tensorflow", "import_torch"]


@contextlib.contextmanager
def _native_stderr_silenced() -> Iterator[None]:
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):      # no real fd 2 (e.g. some embedded interpreters)
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def import_tensorflow(quiet_python_logs: bool = True) -> ModuleType:
    """``import tensorflow`` without its native start-up noise on stderr.

    Args:
        quiet_python_logs: also lower TensorFlow's Python logger to ERROR
            (hides deprecation warnings of ``tf.compat.v1`` APIs).

    Raises:
        ImportError: TensorFlow is not installed (names the extra to install).
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    first = "tensorflow" not in sys.modules
    try:
        if first:
            with _native_stderr_silenced():
                tf = importlib.import_module("tensorflow")
                tf.config.list_physical_devices()
        else:
            tf = importlib.import_module("tensorflow")
    except ImportError as e:
        raise ImportError(f"tensorflow is not installed ({e}); pip install 'sparsify[tf]'") from None
    if quiet_python_logs:
        tf.get_logger().setLevel("ERROR")
    return tf


def import_torch() -> ModuleType:
    """``import torch``, or an ImportError naming the extra to install."""
    try:
        return importlib.import_module("torch")
    except ImportError as e:
        raise ImportError(f"torch is not installed ({e}); pip install 'sparsify[torch]'") from None
