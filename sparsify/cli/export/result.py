"""What ``sparsify export`` reports: :class:`ExportResult`, with sizes on disk and gzipped (:func:`gzip_size`).

Example:
    >>> res = ExportResult("w.npz", "npz", "w.sparse.pt", "torch", 400, 380, 120, 110, "exact")
    >>> res.to_dict()["sparse_bytes"]
    120
"""
from __future__ import annotations

import gzip
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["ExportResult", "gzip_size"]


def gzip_size(data: bytes) -> int:
    """Bytes of ``data`` gzipped at level 9 (how a download or an app bundle would ship it).

    Example:
        >>> gzip_size(bytes(10000)) < 100
        True
    """
    return len(gzip.compress(data, compresslevel=9, mtime=0))


@dataclass
class ExportResult:
    """What an export wrote and measured."""

    source: str
    source_format: str
    out: str
    target: str
    dense_bytes: int
    dense_gzip: int
    sparse_bytes: int
    sparse_gzip: int
    check: str
    encodings: dict[str, int] = field(default_factory=dict)
    semi_structured: dict[str, str | None] | None = None
    notes: list[str] = field(default_factory=list)
    #: an int8 file (``--int8``): ``sparse_bytes`` / ``sparse_gzip`` are its sizes
    int8: bool = False
    #: per quantized tensor: ``size``, ``zeros_before``, ``zeros_after``, ``new_zeros`` (small weights rounded
    #: to 0), ``lost_zeros`` (always 0: a zero turned non-zero stops the export)
    int8_zeros: dict[str, dict[str, int]] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain, JSON-serialisable dict."""
        return asdict(self)
