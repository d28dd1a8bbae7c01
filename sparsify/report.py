"""Read saved weights and report their sparsity and pattern conformity.

Reads, without executing any code stored in the file:

* PyTorch ``state_dict`` files (``torch.load(weights_only=True)``; nested
  dicts such as ``{"model": state_dict}`` are flattened with dotted names),
* TensorFlow checkpoints (a prefix, its ``.index`` file or a directory with a
  ``checkpoint`` file; values are read with ``tf.train.load_checkpoint``),
* SavedModel directories (the variables checkpoint inside ``variables/``, or
  for a frozen inference graph the float constants of ``saved_model.pb``) and
  frozen GraphDef ``.pb`` files (protobuf parsing only),
* Keras ``.keras`` archives (``model.weights.h5`` read with h5py from the zip)
  and HDF5 weight files (``.h5`` / ``.weights.h5``),
* NumPy ``.npz`` archives (``allow_pickle=False``).

TensorFlow and Keras kernels are converted to the canonical (PyTorch) layout
with :func:`sparsify.layout.tf_to_canonical` before a pattern is checked; the
kind is guessed from the name and rank (rank 2: dense, rank >= 3: conv, a
``depthwise`` name: depthwise). TensorFlow and torch are imported lazily
only when a file of theirs is read.

Example:
    >>> import numpy as np
    >>> w = np.array([[0.0, 1.0, 0.0, 2.0], [3.0, 0.0, 0.0, 4.0]])
    >>> pattern_conformity(w, "2:4")["conforms"]
    True
    >>> tensor_stats("fc.weight", w, pattern="2:4").sparsity
    0.5
"""
from __future__ import annotations

import importlib
import io
import os
import re
import zipfile
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

import numpy as np

from ._frameworks import import_tensorflow, import_torch
from .layout import tf_to_canonical, to_2d
from .patterns import PatternNInM, PatternNxM, get_pattern

__all__ = [
    "FORMATS", "TensorStats", "SparsityReport", "detect_format", "read_tensors", "guess_tf_kind",
    "pattern_conformity", "tensor_stats", "build_report", "format_report",
]

#: Formats :func:`read_tensors` understands, with the layout their kernels use.
FORMATS: dict[str, str] = {
    "torch": "torch",          # torch.save'd state_dict
    "tf-checkpoint": "tf",     # tf.train.Checkpoint / Saver checkpoint
    "savedmodel": "tf",        # SavedModel directory (variables, or constants of a frozen graph)
    "graphdef": "tf",          # frozen GraphDef (.pb)
    "keras": "tf",             # Keras 3 .keras archive
    "hdf5": "tf",              # Keras HDF5 weights
    "npz": "canonical",        # NumPy archive, assumed canonical layout
}

_HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
_OPTIMIZER_RX = re.compile(
    r"(^|/)optimizer(/|$)|OPTIMIZER_SLOT|(^|/)(beta[12]_power|global_step|save_counter|iteration)s?(/|$)"
    r"|/(Adam|Adam_1|Momentum|RMSProp|RMSProp_1|Adagrad|ExponentialMovingAverage)$")


# ----- reading -----------------------------------------------------------------------------
def detect_format(path: str | os.PathLike) -> str:
    """Name of the format of ``path`` (a key of :data:`FORMATS`), from its content.

    Raises:
        ValueError: the path does not exist or its format is not recognised.

    Example:
        >>> detect_format("no/such/file.pt")
        Traceback (most recent call last):
        ...
        ValueError: 'no/such/file.pt' does not exist
    """
    p = os.fspath(path)
    if os.path.isdir(p):
        if os.path.exists(os.path.join(p, "saved_model.pb")) or os.path.exists(os.path.join(p, "saved_model.pbtxt")):
            return "savedmodel"
        if os.path.exists(os.path.join(p, "checkpoint")) or any(f.endswith(".index") for f in os.listdir(p)):
            return "tf-checkpoint"
        raise ValueError(f"{p!r} is a directory but neither a SavedModel (no saved_model.pb) "
                         "nor a TensorFlow checkpoint directory (no 'checkpoint' or *.index file)")
    if not os.path.exists(p):
        if os.path.exists(p + ".index"):
            return "tf-checkpoint"
        raise ValueError(f"{p!r} does not exist")
    if p.endswith(".index") or re.search(r"\.data-\d+-of-\d+$", p):
        return "tf-checkpoint"
    if p.endswith(".pb"):
        return "graphdef"
    try:
        with open(p, "rb") as fh:
            head = fh.read(8)
    except OSError as e:
        raise ValueError(f"{p!r} cannot be read: {e.strerror}") from None
    if head.startswith(_HDF5_MAGIC):
        return "hdf5"
    if head.startswith(b"PK"):
        try:
            with zipfile.ZipFile(p) as zf:
                names = zf.namelist()
        except zipfile.BadZipFile:
            raise ValueError(f"{p!r} looks like a zip archive but is corrupt") from None
        if "model.weights.h5" in names:
            return "keras"
        if any(n.endswith("data.pkl") for n in names):
            return "torch"
        if names and all(n.endswith(".npy") for n in names):
            return "npz"
        raise ValueError(f"{p!r} is a zip archive but neither a .keras model, a torch file nor an .npz archive")
    if head[:1] == b"\x80" and p.endswith((".pt", ".pth", ".bin", ".ckpt", ".tar")):
        return "torch"                       # legacy (non-zip) torch serialization
    raise ValueError(f"{p!r}: unknown format; expected a torch state_dict (.pt), a TensorFlow checkpoint, "
                     "a SavedModel directory, a .keras / .h5 Keras file or an .npz archive")


def _read_torch(p: str) -> dict[str, np.ndarray]:
    try:
        torch = import_torch()
    except ImportError:
        raise ValueError(f"{p!r} is a torch file but torch is not installed (pip install 'sparsify[torch]')") from None
    try:
        obj = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises many types for bad files
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{p!r} cannot be read as a torch state_dict (weights_only=True): {msg}") from None
    out: dict[str, np.ndarray] = {}

    def walk(prefix: str, o: Any) -> None:
        if isinstance(o, torch.Tensor):
            t = o.detach().cpu()
            if t.is_floating_point() and t.dtype not in (torch.float32, torch.float64, torch.float16):
                t = t.float()
            out[prefix or "tensor"] = t.numpy()
        elif isinstance(o, Mapping):
            for k, v in o.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(o, (list, tuple)):
            for i, v in enumerate(o):
                walk(f"{prefix}.{i}" if prefix else str(i), v)

    walk("", obj)
    return out


def _tf_reader(prefix: str, what: str):
    try:
        tf = import_tensorflow()
    except ImportError:
        raise ValueError(f"{prefix!r} is a {what} but tensorflow is not installed (pip install 'sparsify[tf]')") from None
    try:
        return tf.train.load_checkpoint(prefix)
    except Exception as e:  # noqa: BLE001 - tf.errors.* for bad files
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{prefix!r} cannot be read as a {what}: {msg}") from None


def _read_tf_checkpoint(p: str, what: str = "TensorFlow checkpoint") -> dict[str, np.ndarray]:
    if p.endswith(".index"):
        p = p[: -len(".index")]
    p = re.sub(r"\.data-\d+-of-\d+$", "", p)
    reader = _tf_reader(p, what)
    out: dict[str, np.ndarray] = {}
    for name in sorted(reader.get_variable_to_shape_map()):
        if name == "_CHECKPOINTABLE_OBJECT_GRAPH":
            continue
        try:
            value = reader.get_tensor(name)
        except Exception:  # noqa: BLE001 - e.g. string tensors that are not numeric
            continue
        if isinstance(value, np.ndarray) and value.dtype.kind in "fcbiu":
            out[name.replace("/.ATTRIBUTES/VARIABLE_VALUE", "")] = value
    return out


def _read_graph_constants(p: str, saved_model: bool) -> dict[str, np.ndarray]:
    """Float constants (rank >= 1) of a frozen GraphDef or of a SavedModel's graphs (protobuf parsing only)."""
    what = "SavedModel" if saved_model else "frozen GraphDef (.pb)"
    try:
        tf = import_tensorflow()
    except ImportError:
        raise ValueError(f"{p!r} is a {what} but tensorflow is not installed (pip install 'sparsify[tf]')") from None
    try:
        with open(p, "rb") as fh:
            raw = fh.read()
        if saved_model:
            proto = importlib.import_module("tensorflow.core.protobuf.saved_model_pb2").SavedModel()
            proto.ParseFromString(raw)
            graphs = [mg.graph_def for mg in proto.meta_graphs]
        else:
            gd = tf.compat.v1.GraphDef()
            gd.ParseFromString(raw)
            graphs = [gd]
    except Exception as e:  # noqa: BLE001 - protobuf DecodeError and friends
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{p!r} cannot be read as a {what}: {msg}") from None
    out: dict[str, np.ndarray] = {}
    for gd in graphs:
        nodes = list(gd.node) + [n for f in gd.library.function for n in f.node_def]
        for node in nodes:
            if node.op != "Const" or "value" not in node.attr:
                continue
            value = tf.make_ndarray(node.attr["value"].tensor)
            if value.dtype.kind == "f" and value.ndim >= 1 and value.size > 1:
                out.setdefault(node.name, value)
    return out


def _read_h5(source: Any, p: str) -> dict[str, np.ndarray]:
    try:
        import h5py
    except ImportError:
        raise ValueError(f"{p!r} holds HDF5 weights but h5py is not installed (pip install h5py)") from None
    out: dict[str, np.ndarray] = {}
    try:
        with h5py.File(source, "r") as f:
            def visit(name: str, obj: Any) -> None:
                if isinstance(obj, h5py.Dataset) and obj.dtype.kind in "fcbiu":
                    out[name] = np.asarray(obj[()])
            f.visititems(visit)
    except OSError as e:
        raise ValueError(f"{p!r} cannot be read as HDF5 weights: {e}") from None
    return out


def _read_keras(p: str) -> dict[str, np.ndarray]:
    try:
        with zipfile.ZipFile(p) as zf:
            data = zf.read("model.weights.h5")
    except (zipfile.BadZipFile, KeyError, OSError) as e:
        raise ValueError(f"{p!r} cannot be read as a .keras archive: {e}") from None
    return _read_h5(io.BytesIO(data), p)


def _read_npz(p: str) -> dict[str, np.ndarray]:
    try:
        with np.load(p, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (ValueError, OSError, zipfile.BadZipFile) as e:
        raise ValueError(f"{p!r} cannot be read as an .npz archive: {e}") from None


def read_tensors(path: str | os.PathLike, fmt: str | None = None) -> tuple[str, dict[str, np.ndarray]]:
    """Read every numeric tensor of a weights file without executing code from it.

    Args:
        path: file or directory (see the module docstring for the formats).
        fmt: a key of :data:`FORMATS`; detected from the content when None.

    Returns:
        ``(format, {name: array})`` with arrays in the file's own layout.

    Raises:
        ValueError: missing, unreadable or unknown file, or a file without tensors.

    Example:
        >>> import numpy as np, tempfile, os
        >>> d = tempfile.mkdtemp(); np.savez(os.path.join(d, "w.npz"), w=np.zeros((2, 2)))
        >>> read_tensors(os.path.join(d, "w.npz"))[0]
        'npz'
    """
    p = os.fspath(path)
    if fmt is None:
        fmt = detect_format(p)
    elif fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {tuple(FORMATS)}, got {fmt!r}")
    if fmt == "torch":
        tensors = _read_torch(p)
    elif fmt == "tf-checkpoint":
        tensors = _read_tf_checkpoint(p)
    elif fmt == "savedmodel":
        prefix = os.path.join(p, "variables", "variables")
        if os.path.exists(prefix + ".index"):
            tensors = _read_tf_checkpoint(prefix, "SavedModel variables checkpoint")
        else:                     # a frozen graph: the weights are constants of saved_model.pb
            tensors = _read_graph_constants(os.path.join(p, "saved_model.pb"), saved_model=True)
    elif fmt == "graphdef":
        tensors = _read_graph_constants(p, saved_model=False)
    elif fmt == "keras":
        tensors = _read_keras(p)
    elif fmt == "hdf5":
        tensors = _read_h5(p, p)
    else:
        tensors = _read_npz(p)
    if not tensors:
        raise ValueError(f"{p!r} ({fmt}) holds no numeric tensors")
    return fmt, tensors


# ----- analysis ------------------------------------------------------------------------------
def guess_tf_kind(name: str, shape: tuple[int, ...]) -> str | None:
    """Guess the TF layout kind of a kernel from its name and rank (None: not a kernel).

    Example:
        >>> guess_tf_kind("conv/kernel", (3, 3, 8, 16)), guess_tf_kind("dense/kernel", (8, 4))
        ('conv', 'dense')
    """
    low = name.lower()
    if len(shape) < 2:
        return None
    if "embedding" in low:
        return "embedding"
    if "depthwise" in low and len(shape) == 4:
        return "depthwise"
    if "transpose" in low and len(shape) >= 3:
        return "conv_transpose"
    return "dense" if len(shape) == 2 else "conv"


def pattern_conformity(w: np.ndarray, pattern: Any) -> dict[str, Any]:
    """Does the zero structure of a canonical weight satisfy ``pattern``?

    For ``"N:M"``: every group of M consecutive weights along the last axis of
    the 2-D view holds at least N zeros. For ``"NxM"`` blocks: every zero lies
    in a block that is entirely zero (``"1x1"`` always conforms).

    Returns:
        ``{"fits": bool, "conforms": bool | None, "units": int, "violations": int,
        "reason": str | None}``; ``conforms`` is None when the 2-D view does not fit.

    Example:
        >>> pattern_conformity(np.array([[0.0, 0.0, 1.0, 1.0]]), "1x2")["conforms"]
        True
        >>> pattern_conformity(np.array([[0.0, 1.0, 1.0, 1.0]]), "2:4")["violations"]
        1
    """
    pat = get_pattern(pattern)
    w2 = to_2d(np.asarray(w))
    reason = pat.fits(w2.shape)
    if reason is not None:
        return {"fits": False, "conforms": None, "units": 0, "violations": 0, "reason": reason}
    nonzero = w2 != 0
    if isinstance(pat, PatternNInM):
        zeros_per_group = (~pat.groups(nonzero)).sum(axis=-1)
        units = int(zeros_per_group.size)
        violations = int((zeros_per_group < pat.N).sum())
    elif isinstance(pat, PatternNxM):
        touched = pat.unit_pre_pruned(nonzero)            # blocks holding at least one zero
        units = int(touched.size)
        violations = int((touched & ~_all_zero(pat, nonzero)).sum())   # ... but not entirely zero
    else:  # a registered pattern we do not know: report fit only
        return {"fits": True, "conforms": None, "units": 0, "violations": 0,
                "reason": f"no conformity rule for pattern family {type(pat).__name__}"}
    return {"fits": True, "conforms": violations == 0, "units": units, "violations": violations, "reason": None}


def _all_zero(pat: PatternNxM, nonzero2d: np.ndarray) -> np.ndarray:
    """Blocks (unit shape) whose elements are all zero."""
    # unit_pre_pruned(m) marks blocks where m has a False; with m = ~nonzero it marks
    # blocks holding a non-zero, so its negation is "entirely zero".
    return ~pat.unit_pre_pruned(~nonzero2d)


@dataclass
class TensorStats:
    """Sparsity of one tensor (and conformity of its 2-D view to a pattern)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    size: int
    zeros: int
    sparsity: float
    is_weight: bool
    pattern: dict[str, Any] | None = None


def tensor_stats(name: str, value: np.ndarray, pattern: Any = None, layout: str = "canonical") -> TensorStats:
    """Statistics of one tensor; ``layout="tf"`` converts kernels to canonical first.

    Example:
        >>> tensor_stats("k", np.zeros((4, 2)), layout="tf").zeros
        8
    """
    value = np.asarray(value)
    zeros = int(value.size - np.count_nonzero(value))
    is_weight = value.ndim >= 2
    conf = None
    if pattern is not None and is_weight:
        canon = value
        if layout == "tf":
            kind = guess_tf_kind(name, value.shape)
            if kind is not None:
                try:
                    canon = tf_to_canonical(value, kind)
                except ValueError:
                    canon = value
        conf = pattern_conformity(canon, pattern)
    return TensorStats(name=name, shape=tuple(int(d) for d in value.shape), dtype=str(value.dtype),
                       size=int(value.size), zeros=zeros, sparsity=(zeros / value.size) if value.size else 0.0,
                       is_weight=is_weight, pattern=conf)


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
               "tensors": [dict(asdict(t), shape=list(t.shape)) for t in self.tensors],
               "total": self.totals(), "weights_total": self.totals(weights_only=True)}
        if self.pattern is not None:
            checked = [t for t in self.tensors if t.pattern is not None and t.pattern["fits"]]
            out["pattern_conforms"] = bool(checked) and all(t.pattern["conforms"] for t in checked)
        return out


def build_report(path: str | os.PathLike, pattern: str | None = None, include_optimizer: bool = False,
                 fmt: str | None = None) -> SparsityReport:
    """Read ``path`` and compute its :class:`SparsityReport`.

    Optimizer state (slots, step counters) is left out unless ``include_optimizer``.

    Example:
        >>> import numpy as np, tempfile, os
        >>> d = tempfile.mkdtemp(); f = os.path.join(d, "w.npz")
        >>> np.savez(f, w=np.array([[0.0, 1.0, 0.0, 2.0]]))
        >>> build_report(f, pattern="2:4").to_dict()["pattern_conforms"]
        True
    """
    if pattern is not None:
        get_pattern(pattern)          # validate before reading anything
    fmt, tensors = read_tensors(path, fmt)
    layout = FORMATS[fmt]
    rep = SparsityReport(path=os.fspath(path), format=fmt, pattern=pattern)
    for name, value in tensors.items():
        if not include_optimizer and _OPTIMIZER_RX.search(name):
            continue
        if value.dtype.kind in "iu" and value.ndim == 0:
            continue                   # counters
        rep.tensors.append(tensor_stats(name, value, pattern, layout))
    if not rep.tensors:
        raise ValueError(f"{os.fspath(path)!r} ({fmt}) holds only optimizer state; use include_optimizer")
    return rep


def _fmt_pattern(conf: dict[str, Any] | None) -> str:
    if conf is None:
        return "-"
    if not conf["fits"]:
        return "does not fit"
    if conf["conforms"] is None:
        return "?"
    if conf["conforms"]:
        return "yes"
    return f"no ({conf['violations']}/{conf['units']} bad)"


def format_report(rep: SparsityReport) -> str:
    """Human-readable table of a :class:`SparsityReport`.

    Example:
        >>> r = SparsityReport("w.npz", "npz", None, [tensor_stats("w", np.zeros((2, 2)))])
        >>> "100.00%" in format_report(r)
        True
    """
    rows = [("name", "shape", "dtype", "sparsity", "zeros / size") + ((rep.pattern,) if rep.pattern else ())]
    for t in rep.tensors:
        row = (t.name, "x".join(map(str, t.shape)) or "scalar", t.dtype, f"{100 * t.sparsity:.2f}%",
               f"{t.zeros} / {t.size}")
        rows.append(row + ((_fmt_pattern(t.pattern),) if rep.pattern else ()))
    for label, tot in (("total (all tensors)", rep.totals()), ("total (weights, rank >= 2)", rep.totals(True))):
        rows.append((label, "", "", f"{100 * tot['sparsity']:.2f}%", f"{tot['zeros']} / {tot['size']}")
                    + (("",) if rep.pattern else ()))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = {3, 4}
    lines = [f"{rep.path} ({rep.format}), {len(rep.tensors)} tensors"]
    for i, r in enumerate(rows):
        cells = [c.rjust(w) if j in right else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join(cells).rstrip())
        if i == 0 or i == len(rep.tensors):
            lines.append("  ".join("-" * w for w in widths))
    if rep.pattern:
        d = rep.to_dict()
        if "pattern_conforms" in d:
            lines.append(f"pattern {rep.pattern}: {'every' if d['pattern_conforms'] else 'NOT every'} "
                         "weight that fits it conforms")
    return "\n".join(lines)
