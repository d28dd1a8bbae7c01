"""Sparsity statistics of saved weights: per tensor and in total (:class:`SparsityReport`).

:func:`build_report` reads a file (:mod:`sparsify.cli.report.readers`) and
measures every tensor (:mod:`sparsify.cli.report.tensor_measures`); of an int8 ``.npz``
(``sparsify export --int8``) also how each tensor is stored and its bytes
(:mod:`sparsify.cli.report.int8_npz`). Optimizer state (slots, step counters) is
recognised by its name (:func:`is_optimizer_state`) and left out unless asked for.

Example:
    >>> is_optimizer_state("optimizer/vars/1"), is_optimizer_state("fc1/kernel")
    (True, False)
"""
from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from sparsify.patterns import get_pattern

from ..compressed_npz import FORMAT_KEY
from .int8_npz import int8_npz_stats, is_int8_members
from .npz_stream import check_declared_npz, streamed_tensor_stats
from .stats_record import TensorStats
from .tensor_measures import tensor_stats
from .readers import DEFAULT_MAX_BYTES, FORMATS, read_tensors, resolve_format

__all__ = ["SparsityReport", "is_optimizer_state", "build_report"]

_OPTIMIZER_RX = re.compile(
    r"(^|/)optimizer(/|$)|OPTIMIZER_SLOT|(^|/)(beta[12]_power|global_step|save_counter|iteration)s?(/|$)"
    r"|/(Adam|Adam_1|Momentum|RMSProp|RMSProp_1|Adagrad|ExponentialMovingAverage)$"
    r"|^metrics/[^/]+/vars/\d+$")          # a .keras archive's compiled metrics (tf-keras saves their counters)


def is_optimizer_state(name: str) -> bool:
    """Is the tensor called ``name`` training state (an optimizer slot, a step counter, a compiled metric's
    counter in a ``.keras`` archive) rather than a model weight?

    Example:
        >>> [is_optimizer_state(n) for n in ("dense/kernel/Adam", "global_step", "dense/kernel")]
        [True, True, False]
        >>> is_optimizer_state("metrics/mean/vars/0"), is_optimizer_state("metrics/kernel")
        (True, False)
    """
    return _OPTIMIZER_RX.search(name) is not None


@dataclass
class SparsityReport:
    """Per-tensor and total sparsity of one weights file."""

    path: str
    format: str
    pattern: str | None
    tensors: list[TensorStats] = field(default_factory=list)

    def totals(self, weights_only: bool = False) -> dict[str, Any]:
        """``{"size", "zeros", "sparsity"}`` over all tensors (or only those of rank >= 2)."""
        ts = [t for t in self.tensors if t.is_weight or not weights_only]
        size = sum(t.size for t in ts)
        zeros = sum(t.zeros for t in ts)
        return {"tensors": len(ts), "size": size, "zeros": zeros, "sparsity": zeros / size if size else 0.0}

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-serialisable dict."""
        out = {"path": self.path, "format": self.format, "pattern": self.pattern,
               "tensors": [{k: v for k, v in dict(asdict(t), shape=list(t.shape)).items()
                            if v is not None or k not in ("encoding", "stored_bytes")} for t in self.tensors],
               "total": self.totals(), "weights_total": self.totals(weights_only=True)}
        stored = [t for t in self.tensors if t.stored_bytes is not None]
        if stored:                      # an int8 .npz: its int8 tensors and the bytes stored
            out["int8_tensors"] = [t.name for t in stored if t.dtype == "int8"]
            out["stored_bytes"] = sum(t.stored_bytes for t in stored)
        if self.pattern is not None:
            checked = [t for t in self.tensors if t.pattern is not None and t.pattern["fits"]]
            out["pattern_checked"] = len(checked)
            # None when the pattern fits no weight: nothing was checked, so nothing conforms or violates
            out["pattern_conforms"] = all(t.pattern["conforms"] for t in checked) if checked else None
        return out


def build_report(path: str | os.PathLike, pattern: str | None = None, include_optimizer: bool = False,
                 fmt: str | None = None, max_bytes: int | None = DEFAULT_MAX_BYTES) -> SparsityReport:
    """Read ``path`` and compute its :class:`SparsityReport`.

    Optimizer state (slots, step counters) is left out unless ``include_optimizer``;
    ``max_bytes`` caps what is loaded (see :func:`~sparsify.cli.report.readers.read_tensors`).

    Example:
        >>> import numpy as np, tempfile, os
        >>> d = tempfile.mkdtemp(); f = os.path.join(d, "w.npz")
        >>> np.savez(f, w=np.array([[0.0, 1.0, 0.0, 2.0]]))
        >>> build_report(f, pattern="2:4").to_dict()["pattern_conforms"]
        True
    """
    if pattern is not None:
        get_pattern(pattern)          # validate before reading anything
    fmt = resolve_format(path, fmt, max_bytes)
    rep = SparsityReport(path=os.fspath(path), format=fmt, pattern=pattern)
    members = check_declared_npz(path, max_bytes) if fmt == "npz" else []
    int8 = int8_npz_stats(path, pattern, max_bytes) if is_int8_members(m.name for m in members) else None
    streamed = fmt == "npz" and int8 is None and not any(m.name == FORMAT_KEY for m in members)  # a plain .npz
    if int8 is not None:               # sparsify export --int8: per tensor its int8 / exact encoding and bytes
        counters = {t.name for t in int8 if not t.shape and t.stored_bytes is not None and t.dtype != "int8"
                    and np.dtype(t.dtype).kind in "iu"}
        rep.tensors = [t for t in int8 if (include_optimizer or not is_optimizer_state(t.name)) and t.name not in counters]
        tensors = {}
    elif streamed:                       # in bounded chunks: memory does not grow with the declared size
        members = [m for m in members if m.dtype.kind in "fcbiu"]
        if not members:
            raise ValueError(f"{os.fspath(path)!r} ({fmt}) holds no numeric tensors")
        tensors: Any = {m.name: m for m in members}
    else:
        fmt, tensors = read_tensors(path, fmt, max_bytes)
    for name, value in tensors.items():
        if not include_optimizer and is_optimizer_state(name):
            continue
        if value.dtype.kind in "iu" and len(value.shape) == 0:
            continue                   # counters
        rep.tensors.append(streamed_tensor_stats(path, value, pattern) if streamed
                           else tensor_stats(name, value, pattern, FORMATS[fmt]))
    if not rep.tensors:
        raise ValueError(f"{os.fspath(path)!r} ({fmt}) holds only optimizer state; use include_optimizer")
    return rep
