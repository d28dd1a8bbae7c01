"""TensorBoard scalars of a Keras pruning run, with the ``tensorboard`` package alone (no TensorFlow).

The tags every adapter writes: ``sparsity/total`` and ``sparsity/<weight path>`` at every mask update.

Example:
    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> w = SparsityWriter(d)
    >>> w.write({"sparsity": 0.5, "sparsity/fc/kernel": 0.5}, step=3); w.close()
    >>> from sparsify_torch.tensorboard import read_scalars
    >>> read_scalars(d)["sparsity/fc/kernel"]
    [(3, 0.5)]
"""
from __future__ import annotations

import os
import time
from typing import Any, Mapping

__all__ = ["SparsityWriter"]


class SparsityWriter:
    """Writes sparsity figures as TensorBoard scalar events into ``log_dir``.

    Raises:
        TypeError: ``log_dir`` is not a path.
        ImportError: the ``tensorboard`` package is missing (names what to install).
    """

    def __init__(self, log_dir: str | os.PathLike) -> None:
        if not isinstance(log_dir, (str, os.PathLike)):
            raise TypeError(f"log_dir must be a directory path or None, got {log_dir!r}")
        try:
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError as e:
            raise ImportError(f"log_dir needs TensorBoard ({e}): pip install tensorboard") from None
        self.log_dir = os.fspath(log_dir)
        self._writer: Any = EventFileWriter(self.log_dir)

    def write(self, figures: Mapping[str, float], step: int) -> None:
        """``sparsity/total`` and every ``sparsity/<name>`` of ``figures`` (as ``protocol.figures()`` gives them)."""
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        figures = dict(figures)
        values = [("sparsity/total", figures.pop("sparsity"))] + list(figures.items())
        summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(v)) for tag, v in values])
        self._writer.add_event(Event(summary=summary, step=int(step), wall_time=time.time()))
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file."""
        self._writer.close()
