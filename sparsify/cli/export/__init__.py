"""``sparsify export``: a smaller artifact of a pruned model, and what it saves.

From any file ``sparsify report`` reads:

* a **TFLite flatbuffer** with TensorFlow's sparsity optimisation
  (``tf.lite.Optimize.EXPERIMENTAL_SPARSITY``) for a Keras ``.keras`` model or
  a SavedModel (:mod:`.tflite`); its outputs are checked against the pruned
  model's on random inputs;
* **compressed weights in an .npz** (:mod:`sparsify.cli.compressed_npz`, NumPy only: the export of
  a ``.keras`` model without TensorFlow, the default there when TensorFlow is
  not installed; ``.npz`` written by it are read back with NumPy alone);
* **int8 weights in an .npz** (``int8=True``, ``sparsify export --int8``; :mod:`sparsify.int8_format`,
  NumPy only): every weight quantized to symmetric per-channel int8 and stored as a packed bitmask +
  its non-zero int8 values + float32 scales, every pruned zero kept (checked);
  :func:`sparsify.int8_format.load_int8_npz` reads it back;
* a **compressed torch state_dict** (packed bitmask + values, or CSR; see
  :mod:`sparsify.sparse_format`) for every other file: ``torch.load(...,
  weights_only=True)`` reads it and
  :func:`sparsify_torch.export.load_compressed_state_dict` gives back the
  exact dense ``state_dict``, which is checked after writing. For 2-D weights
  that look 2:4 the export also says whether they meet what
  ``torch.sparse.to_sparse_semi_structured`` accepts (checked without a GPU).

Both print the dense and the sparse artifact's bytes on disk and gzipped,
side by side. The artifact is written atomically (a temporary file beside it,
then renamed, after its check passed: a failed check leaves nothing behind)
and an existing file is only replaced with ``overwrite=True``.

Example:
    >>> import numpy as np, tempfile, os
    >>> d = tempfile.mkdtemp(); src = os.path.join(d, "w.npz")
    >>> w = np.random.default_rng(0).normal(size=(64, 64)).astype(np.float32)
    >>> np.savez(src, w=np.where(np.abs(w) > 1.6, w, 0))      # about 90% zeros
    >>> res = export_model(src)
    >>> res.out.endswith("w.sparse.pt"), res.dense_bytes > 2 * res.sparse_bytes
    (True, True)
"""
from __future__ import annotations

import io
import os
from typing import Any

import numpy as np

from sparsify import int8_format, sparse_format
from sparsify.extras import install_command

from .. import interrupts
from ..atomic import OutputError, atomic_path, check_destination
from ..frameworks import import_torch, installed
from ..run_directory import MANIFEST, register_derived
from ..report.readers import DEFAULT_MAX_BYTES, FORMATS, detect_format, format_bytes, read_tensors
from ..report.statistics import is_optimizer_state
from ..compressed_npz import document_npz_bytes, load_compressed_npz
from .result import ExportResult, gzip_size
from ..export_names import TARGETS, default_output, derived_names
from .tflite import export_tflite

__all__ = ["TARGETS", "NEEDS", "ExportResult", "export_model", "default_output", "default_target", "derived_names",
           "format_export", "gzip_size"]

#: What each target needs beyond NumPy (the extra that brings it).
NEEDS = {"tflite": ("tensorflow", "tf"), "torch": ("torch", "torch"), "npz": None}
_MODEL_FORMATS = ("keras", "savedmodel")
_INT8_MIN_ELEMENTS = 64                             # smaller weights stay exact (as compress_int8's default)


def _looks_2_4(t: Any) -> bool:
    """A 2-D weight pruned 2:4 (every group of 4 has at most 2 non-zeros, about half of it zero)."""
    if t.shape[1] % 4 or not t.numel():
        return False
    zero = float((t == 0).float().mean())
    return 0.45 <= zero <= 0.55 and bool(((t.reshape(t.shape[0], -1, 4) != 0).sum(-1) <= 2).all())


def _torch_export(src: str, fmt: str, tensors: dict[str, np.ndarray], out: str, encoding: str,
                  semi_structured: bool | None) -> ExportResult:
    torch = import_torch()
    from sparsify_torch.export import compressed_document, load_compressed_state_dict, semi_structured_report

    state = {n: torch.from_numpy(np.asarray(a, order="C")) for n, a in tensors.items()}
    dense_buf = io.BytesIO()
    torch.save(state, dense_buf)
    doc = compressed_document(state, encoding)
    buf = io.BytesIO()
    torch.save(doc, buf)
    sparse = buf.getvalue()
    interrupts.check()                              # Ctrl-C before the file is written: nothing is
    with atomic_path(out) as tmp:                   # renamed into place only if the round trip passes
        with open(tmp, "wb") as fh:
            fh.write(sparse)
        back = load_compressed_state_dict(tmp)       # the round trip, from the file as written
        bad = [n for n, a in tensors.items()
               if n not in back or not np.array_equal(back[n].numpy(), a, equal_nan=a.dtype.kind == "f")]
        if bad or set(back) != set(tensors):
            raise OutputError(5, f"{out!r}: the compressed state_dict does not give back "
                                 f"{bad[:3] or 'the same names'}; nothing was written")
    encodings = _encodings(doc)
    semi = None
    two_d = {n: t for n, t in state.items() if t.dim() == 2 and t.is_floating_point()}
    if semi_structured or (semi_structured is None and any(_looks_2_4(t) for t in two_d.values())):
        semi = semi_structured_report(two_d, dtype=torch.float16)
    return ExportResult(src, fmt, out, "torch", len(dense_buf.getvalue()), gzip_size(dense_buf.getvalue()),
                        len(sparse), gzip_size(sparse),
                        f"torch.load(weights_only=True) + load_compressed_state_dict give back all {len(tensors)} "
                        "tensors exactly", encodings, semi)


def export_model(path: str | os.PathLike, out: str | os.PathLike | None = None, to: str | None = None,
                 encoding: str = "bitmask", fmt: str | None = None, max_bytes: int | None = DEFAULT_MAX_BYTES,
                 overwrite: bool = False, semi_structured: bool | None = None,
                 with_optimizer: bool = False, int8: bool = False) -> ExportResult:
    """Write the compressed artifact of ``path`` and measure dense vs sparse sizes.

    Args:
        path: any file ``sparsify report`` reads.
        out: the artifact's path (default :func:`default_output`).
        to: ``"tflite"`` (a ``.keras`` model or SavedModel; needs TensorFlow),
            ``"torch"`` (any file; needs torch) or ``"npz"`` (any file, NumPy
            only); default: :func:`default_target`.
        encoding: for ``"torch"`` and ``"npz"``: ``"bitmask"`` or ``"csr"``.
        fmt: the source's format (detected when None).
        max_bytes: cap on the tensor bytes read from ``path``.
        overwrite: replace an existing ``out``.
        semi_structured: for ``"torch"``: check the 2-D weights against
            ``torch.sparse.to_sparse_semi_structured`` (None: when they look 2:4).
        with_optimizer: for ``"torch"`` and ``"npz"``: also write the optimizer state the file holds (a
            ``.keras`` model's Adam moments and step counter, a checkpoint's slots); by default only the
            model's weights are written (:func:`~sparsify.cli.report.is_optimizer_state` tells them apart).
        int8: write the weights as symmetric per-channel int8 in an ``.npz`` (``to`` None or ``"npz"``;
            default ``out``: ``<stem>.int8.npz``): a packed bitmask + the non-zero int8 values + one
            float32 scale per output channel (the last axis of a TensorFlow / Keras kernel, the first of
            every other format's weights) for every floating-point tensor of 2 or more axes and 64 or
            more elements; other tensors (and optimizer state, with ``with_optimizer``) exact.
            :func:`sparsify.int8_format.save_checked_int8_npz` writes it and reads it back: every int8
            value, every other tensor, and no pruned zero turned non-zero, or nothing is written.

    An artifact written beside a run's output in the run's directory (``sparsify demo --out``) is recorded
    in its manifest (:func:`~sparsify.cli.run_directory.register_derived`): the next run into the directory
    removes it with the old run's files.

    Raises:
        ValueError: bad arguments, an unreadable source, a TFLite export of a
            weights-only file, an existing ``out`` without ``overwrite``.
        ImportError: the target needs a framework that is not installed (names the extra).
        OutputError: the artifact could not be written (nothing is left behind).
    """
    if to is not None and to not in TARGETS:
        raise ValueError(f"to must be one of {TARGETS} or None, got {to!r}")
    if not isinstance(with_optimizer, bool):
        raise TypeError(f"with_optimizer must be a bool, got {with_optimizer!r}")
    if not isinstance(int8, bool):
        raise TypeError(f"int8 must be a bool, got {int8!r}")
    if int8 and to not in (None, "npz"):
        raise ValueError("int8 (--int8) applies to --to npz")
    if int8 and encoding != "bitmask":
        raise ValueError(f"encoding {encoding!r} (--encoding) does not apply to int8 (--int8): it stores a bitmask "
                         "+ int8 values")
    if int8 and semi_structured:
        raise ValueError("semi_structured (--semi-structured) applies to --to torch, not to int8 (--int8)")
    if encoding not in sparse_format.ENCODINGS:
        raise ValueError(f"encoding must be one of {sparse_format.ENCODINGS}, got {encoding!r}")
    src = os.fspath(path)
    fmt = fmt or detect_format(src)
    target, notes = (to, []) if to is not None else ("npz", []) if int8 else default_target(fmt)
    if with_optimizer and target == "tflite":
        raise ValueError("with_optimizer (--with-optimizer) applies to --to torch and --to npz: a TFLite model "
                         "holds no optimizer")
    if target == "tflite" and fmt not in _MODEL_FORMATS:
        raise ValueError(f"--to tflite needs a model (a .keras file or a SavedModel directory), but {src!r} is a "
                         f"{fmt} file holding weights only; use --to torch or --to npz")
    if NEEDS[target] is not None and not installed(NEEDS[target][0]):
        module, extra = NEEDS[target]
        raise ImportError(f"--to {target} needs {module}, which is not installed ({install_command(extra)}); "
                          "--to npz writes the compressed weights with NumPy only")
    dest = os.fspath(out) if out is not None else default_output(src, target, int8)
    if os.path.isdir(dest):
        raise ValueError(f"out {dest!r} is a directory; pass a file path")
    if os.path.exists(dest) and not overwrite:
        raise ValueError(f"out {dest!r} already exists; pass --overwrite to replace it")
    check_destination(dest)                         # before the source is read
    if target == "tflite":
        res = export_tflite(src, fmt, dest, max_bytes)
    else:
        fmt, tensors = read_tensors(src, fmt, max_bytes)
        left_out = [] if with_optimizer else [n for n in tensors if is_optimizer_state(n)]
        if left_out and len(left_out) == len(tensors):
            raise ValueError(f"{src!r} ({fmt}) holds only optimizer state ({len(left_out)} tensors); pass "
                             "--with-optimizer to export it")
        tensors = {n: a for n, a in tensors.items() if n not in set(left_out)}
        if int8:
            res = _int8_export(src, fmt, tensors, dest)
        elif target == "npz":
            res = _npz_export(src, fmt, tensors, dest, encoding)
        else:
            res = _torch_export(src, fmt, tensors, dest, encoding, semi_structured)
        if left_out:
            notes = [f"left out {len(left_out)} optimizer tensors ({left_out[0]}, ...): the model's weights only "
                     "(--with-optimizer writes them too)", *notes]
    res.notes += notes
    if register_derived(src, dest):
        res.notes.append(f"recorded in {os.path.join(os.path.dirname(dest) or '.', MANIFEST)}: a new run into "
                         "that directory removes it with the old run's files")
    return res


def default_target(fmt: str) -> tuple[str, list[str]]:
    """The target when ``--to`` is not given, and a note when it is not the usual one.

    A model (``.keras``, SavedModel) becomes TFLite when TensorFlow is installed, else compressed weights
    in an ``.npz``; weights become a compressed torch state_dict when torch is installed, else an ``.npz``.
    """
    usual, needs = ("tflite", "tensorflow") if fmt in _MODEL_FORMATS else ("torch", "torch")
    if installed(needs):
        return usual, []
    extra = NEEDS[usual][1]
    return "npz", [f"{needs} is not installed: wrote compressed weights (.npz, NumPy only) instead of "
                   f"{'TFLite' if usual == 'tflite' else 'a torch state_dict'} ({install_command(extra)} "
                   f"for --to {usual})"]


def _npz_export(src: str, fmt: str, tensors: dict[str, np.ndarray], out: str, encoding: str) -> ExportResult:
    dense_buf = io.BytesIO()
    np.savez(dense_buf, **{f"t{i}": a for i, a in enumerate(tensors.values())})
    doc = sparse_format.compress_tensors(tensors, encoding)
    sparse = document_npz_bytes(doc)
    interrupts.check()                              # Ctrl-C before the file is written: nothing is
    with atomic_path(out) as tmp:                   # renamed into place only if the round trip passes
        with open(tmp, "wb") as fh:
            fh.write(sparse)
        back = load_compressed_npz(tmp)
        bad = [n for n, a in tensors.items()
               if n not in back or not np.array_equal(back[n], a, equal_nan=a.dtype.kind == "f")]
        if bad or set(back) != set(tensors):
            raise OutputError(5, f"{out!r}: the compressed .npz does not give back {bad[:3] or 'the same names'}; "
                                 "nothing was written")
    return ExportResult(src, fmt, out, "npz", len(dense_buf.getvalue()), gzip_size(dense_buf.getvalue()),
                        len(sparse), gzip_size(sparse),
                        f"sparsify.cli.compressed_npz.load_compressed_npz gives back all {len(tensors)} tensors "
                        "exactly (NumPy only)", _encodings(doc))


def _int8_export(src: str, fmt: str, tensors: dict[str, np.ndarray], out: str) -> ExportResult:
    """The int8 ``.npz`` of ``tensors``: the model's weights quantized, optimizer state (if any) exact."""
    quantize = [n for n, a in tensors.items() if not is_optimizer_state(n) and np.asarray(a).dtype.kind == "f"
                and np.ndim(a) >= 2 and np.size(a) >= _INT8_MIN_ELEMENTS]
    if not quantize:
        raise ValueError(f"{src!r} ({fmt}) holds no floating-point weight of 2 or more axes and "
                         f"{_INT8_MIN_ELEMENTS} or more elements to quantize; export it without --int8")
    dense_buf = io.BytesIO()
    np.savez(dense_buf, **{f"t{i}": a for i, a in enumerate(tensors.values())})
    layout = "keras" if FORMATS.get(fmt) == "tf" else "torch"
    axes = int8_format.channel_axes(tensors, layout)
    interrupts.check()                              # Ctrl-C before the file is written: nothing is
    with atomic_path(out) as tmp:                   # renamed into place only if the read-back check passes
        try:
            size, report = int8_format.save_checked_int8_npz(tmp, tensors, axes=axes, quantize=quantize)
        except ValueError as e:                     # name the file the user asked for, not the temporary one
            raise ValueError(str(e).replace(repr(os.fspath(tmp)), repr(out))) from None
        with open(tmp, "rb") as fh:
            data = fh.read()
        doc = int8_format.load_int8_npz(io.BytesIO(data))
    zeros = {n: {"size": r.size, "zeros_before": r.zeros_before, "zeros_after": r.zeros_after,
                 "new_zeros": r.new_zeros, "lost_zeros": r.lost_zeros} for n, r in report.items()}
    kept = sum(r.zeros_before for r in report.values())
    rounded = sum(r.new_zeros for r in report.values())
    check = (f"sparsify.int8_format.load_int8_npz gives back every int8 value and scale of {len(report)} quantized "
             f"tensors ({layout} layout: one scale per output channel) and the {len(tensors) - len(report)} others "
             f"exactly (NumPy only); no zero became non-zero ({kept} zeros kept); {rounded} small weights rounded "
             "to 0")
    return ExportResult(src, fmt, out, "npz", len(dense_buf.getvalue()), gzip_size(dense_buf.getvalue()),
                        size, gzip_size(data), check, _encodings(doc), int8=True, int8_zeros=zeros)


def _encodings(doc: dict[str, Any]) -> dict[str, int]:
    kinds = [e["encoding"] for e in doc["tensors"].values()]
    return {k: kinds.count(k) for k in ("bitmask_int8", "int8", "bitmask", "csr", "dense") if kinds.count(k)}


def format_export(res: ExportResult) -> str:
    """The table ``sparsify export`` prints.

    Example:
        >>> r = ExportResult("m.pt", "torch", "m.sparse.pt", "torch", 40000, 37000, 6000, 5500, "ok")
        >>> print(format_export(r))
        sparsify export: m.pt (torch) -> m.sparse.pt (compressed torch state_dict)
                         on disk         gzip
        dense           39.1 KiB     36.1 KiB
        sparse           5.9 KiB      5.4 KiB
        dense/sparse       6.67x        6.73x
        check: ok

    With ``int8``, the int8 file's row (and its size as a fraction of dense):

        >>> r = ExportResult("m.pt", "torch", "m.int8.npz", "npz", 40000, 37000, 2000, 1900, "ok", int8=True)
        >>> print("\\n".join(format_export(r).splitlines()[:6]))
        sparsify export: m.pt (torch) -> m.int8.npz (int8 weights .npz: bitmask + int8 values + float32 scales)
                         on disk         gzip
        dense           39.1 KiB     36.1 KiB
        int8             2.0 KiB      1.9 KiB
        dense/int8        20.00x       19.47x
        int8/dense        0.050x       0.051x
    """
    kind = {"tflite": "TFLite flatbuffer, sparsity optimisation", "npz": "compressed weights .npz"}.get(
        res.target, "compressed torch state_dict")
    label = "sparse"
    if res.int8:
        kind, label = "int8 weights .npz: bitmask + int8 values + float32 scales", "int8"
    rows = [("", "on disk", "gzip"),
            ("dense", format_bytes(res.dense_bytes), format_bytes(res.dense_gzip)),
            (label, format_bytes(res.sparse_bytes), format_bytes(res.sparse_gzip)),
            (f"dense/{label}", f"{res.dense_bytes / max(res.sparse_bytes, 1):.2f}x",
             f"{res.dense_gzip / max(res.sparse_gzip, 1):.2f}x")]
    if res.int8:
        rows.append((f"{label}/dense", f"{res.sparse_bytes / max(res.dense_bytes, 1):.3f}x",
                     f"{res.sparse_gzip / max(res.dense_gzip, 1):.3f}x"))
    lines = [f"sparsify export: {res.source} ({res.source_format}) -> {res.out} ({kind})"]
    for r in rows:
        lines.append(f"{r[0]:<12}  {r[1]:>10}   {r[2]:>10}".rstrip())
    if res.encodings:
        lines.append("tensors: " + ", ".join(f"{n} {k}" for k, n in res.encodings.items()))
    lines.append(f"check: {res.check}")
    if res.semi_structured is not None:
        ok = [n for n, why in res.semi_structured.items() if why is None]
        lines.append(f"2:4 semi-structured (torch.sparse.to_sparse_semi_structured, float16): {len(ok)} of "
                     f"{len(res.semi_structured)} 2-D weights qualify")
        lines += [f"  {n}: {why}" for n, why in res.semi_structured.items() if why is not None]
    lines += res.notes
    return "\n".join(lines)
