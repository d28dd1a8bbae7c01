"""The human-readable table of a :class:`~sparsify.cli.report.statistics.SparsityReport`.

Example:
    >>> import numpy as np
    >>> from sparsify.cli.report.statistics import SparsityReport
    >>> from sparsify.cli.report.tensor_measures import tensor_stats
    >>> rep = SparsityReport("w.npz", "npz", "2:4", [tensor_stats("fc", np.array([[0.0, 1.0, 0.0, 2.0]]), "2:4")])
    >>> print(format_report(rep))
    w.npz (npz), 1 tensors
    name                        shape  dtype    sparsity  zeros / size  2:4
    --------------------------  -----  -------  --------  ------------  ---
    fc                          1x4    float64    50.00%         2 / 4  yes
    --------------------------  -----  -------  --------  ------------  ---
    total (all tensors)                           50.00%         2 / 4
    total (weights, rank >= 2)                    50.00%         2 / 4
    pattern 2:4: every weight that fits it conforms
"""
from __future__ import annotations

import os
from typing import Any

from .statistics import SparsityReport

__all__ = ["format_report", "format_conformity", "SKIPPED_CELL"]

#: The cell of a weight the pattern does not fit: pruning skips it (``skip_incompatible_layers``) or refuses.
SKIPPED_CELL = "skipped: does not fit"


def format_conformity(conf: dict[str, Any] | None) -> str:
    """One table cell for a :func:`~sparsify.cli.report.tensor_measures.pattern_conformity` result.

    Example:
        >>> format_conformity({"fits": True, "conforms": False, "units": 4, "violations": 1, "reason": None})
        'no (1/4 bad)'
    """
    if conf is None:
        return "-"
    if not conf["fits"]:
        return SKIPPED_CELL
    if conf["conforms"] is None:
        return "?"
    if conf["conforms"]:
        return "yes"
    return f"no ({conf['violations']}/{conf['units']} bad)"


def format_report(rep: SparsityReport) -> str:
    """Human-readable table of a :class:`SparsityReport`.

    The last line says whether every weight the pattern fits conforms to it
    (when the report was built with a pattern). An int8 ``.npz``'s table also says how each
    tensor is stored (``bitmask_int8`` / ``int8`` / ``bitmask`` / ``dense``) and its bytes.
    """
    stored = any(t.stored_bytes is not None for t in rep.tensors)       # an int8 .npz: how each is stored
    pat = (rep.pattern,) if rep.pattern else ()
    rows = [("name", "shape", "dtype", "sparsity", "zeros / size") + (("stored as", "bytes") if stored else ()) + pat]
    for t in rep.tensors:
        row = (t.name, "x".join(map(str, t.shape)) or "scalar", t.dtype, f"{100 * t.sparsity:.2f}%",
               f"{t.zeros} / {t.size}") + ((t.encoding or "-", str(t.stored_bytes)) if stored else ())
        rows.append(row + ((format_conformity(t.pattern),) if rep.pattern else ()))
    for label, weights_only in (("total (all tensors)", False), ("total (weights, rank >= 2)", True)):
        tot = rep.totals(weights_only)
        nbytes = sum(t.stored_bytes or 0 for t in rep.tensors if t.is_weight or not weights_only)
        rows.append((label, "", "", f"{100 * tot['sparsity']:.2f}%", f"{tot['zeros']} / {tot['size']}")
                    + (("", str(nbytes)) if stored else ()) + (("",) if rep.pattern else ()))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = {3, 4, 6} if stored else {3, 4}
    head = f"{rep.path} ({rep.format}), {len(rep.tensors)} tensors"
    if stored:
        n_int8 = sum(t.dtype == "int8" for t in rep.tensors)
        on_disk = f", {os.path.getsize(rep.path)} bytes on disk" if os.path.isfile(rep.path) else ""
        head += (f", {n_int8} stored as int8 ({sum(t.stored_bytes or 0 for t in rep.tensors)} bytes stored before "
                 f"the file's deflate{on_disk})")
    lines = [head]
    for i, r in enumerate(rows):
        cells = [c.rjust(w) if j in right else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(cells).rstrip())
        if i == 0 or i == len(rep.tensors):
            lines.append("  ".join("-" * w for w in widths))
    if rep.pattern:
        d = rep.to_dict()
        if d["pattern_conforms"] is None:
            lines.append(f"pattern {rep.pattern}: fits none of the weights (see the '{SKIPPED_CELL}' cells), "
                         "so nothing was checked")
        else:
            skipped = [t.name for t in rep.tensors if t.pattern is not None and not t.pattern["fits"]]
            if skipped:
                shown = ", ".join(skipped[:8]) + (f" and {len(skipped) - 8} more" if len(skipped) > 8 else "")
                lines.append(f"pattern {rep.pattern}: does not fit {shown}: skipped (pruning with "
                             "skip_incompatible_layers=True leaves such weights dense)")
            lines.append(f"pattern {rep.pattern}: {'every' if d['pattern_conforms'] else 'NOT every'} "
                         "weight that fits it conforms")
    return "\n".join(lines)
