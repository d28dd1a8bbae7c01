"""Read every numeric tensor of a saved weights file, whatever framework wrote it.

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

Arrays come back in the file's own layout; :data:`FORMATS` says which layout
that is. TensorFlow and torch are imported only when a file of theirs is read.

Example:
    >>> import numpy as np, tempfile, os
    >>> f = os.path.join(tempfile.mkdtemp(), "w.npz"); np.savez(f, w=np.zeros((2, 2)))
    >>> fmt, tensors = read_tensors(f)
    >>> fmt, FORMATS[fmt], tensors["w"].shape
    ('npz', 'canonical', (2, 2))
"""
from __future__ import annotations

import io
import os
import re
import zipfile
from typing import Any, Mapping

import numpy as np

from ..frameworks import import_tensorflow, import_torch

__all__ = ["FORMATS", "detect_format", "read_tensors"]

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
            from tensorflow.core.protobuf import saved_model_pb2

            proto = saved_model_pb2.SavedModel()
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
