"""Quiet, on-demand imports of TensorFlow and PyTorch for the application.

``sparsify --help``, ``sparsify schedule`` and ``sparsify report`` on an
``.npz`` file need neither framework, so the command imports one only inside
the function that needs it: :func:`import_tensorflow` / :func:`import_torch`.

A CUDA-enabled TensorFlow wheel on a machine without a GPU writes a few lines
from native code (absl, before its log is initialised, so
``TF_CPP_MIN_LOG_LEVEL`` cannot hide them) while it is imported and while it
first enumerates devices. :func:`import_tensorflow` sends the native stderr
to /dev/null for exactly that first import (:func:`native_stderr_silenced`);
Python exceptions still propagate.

Example:
    >>> import sparsify.native_stderr
    >>> native_stderr_silenced is sparsify.native_stderr.native_stderr_silenced   # one helper for app and adapters
    True
"""
from __future__ import annotations

import importlib.util
import os
from types import ModuleType

from sparsify.extras import install_command
from sparsify.native_stderr import native_stderr_silenced

__all__ = ["import_tensorflow", "import_torch", "native_stderr_silenced", "installed"]

_DEVICES_PROBED = False


def import_tensorflow(quiet_python_logs: bool = True) -> ModuleType:
    """``import tensorflow`` without its native start-up noise on stderr.

    Args:
        quiet_python_logs: also lower TensorFlow's Python logger to ERROR
            (hides deprecation warnings of ``tf.compat.v1`` APIs).

    Raises:
        ImportError: TensorFlow is not installed (names the extra to install).
    """
    global _DEVICES_PROBED
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        if not _DEVICES_PROBED:     # also when something else imported TensorFlow first (torch.utils.tensorboard)
            with native_stderr_silenced():
                import tensorflow as tf

                tf.config.list_physical_devices()      # the CUDA probe's "failed call to cuInit" line
            _DEVICES_PROBED = True
        else:
            import tensorflow as tf
    except ImportError as e:
        raise ImportError(f"tensorflow is not installed ({e}); {install_command('tf')}") from None
    if quiet_python_logs:
        tf.get_logger().setLevel("ERROR")
    return tf


def import_torch() -> ModuleType:
    """``import torch``, or an ImportError naming the extra to install."""
    try:
        import torch
    except ImportError as e:
        raise ImportError(f"torch is not installed ({e}); {install_command('torch')}") from None
    return torch


def installed(module: str) -> bool:
    """Is ``module`` importable (asked without importing it)? A name blocked in ``sys.modules`` counts as absent.

    Example:
        >>> installed("numpy"), installed("no_such_module_here")
        (True, False)
    """
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):       # ValueError: sys.modules[module] is None or has no spec
        return False
