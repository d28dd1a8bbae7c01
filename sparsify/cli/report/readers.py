"""Read every numeric tensor of a saved weights file, whatever framework wrote it.

Reads, without executing any code stored in the file:

* PyTorch ``state_dict`` files (``torch.load(weights_only=True)``; nested
  dicts such as ``{"model": state_dict}`` are flattened with dotted names),
* TensorFlow checkpoints (a prefix, its ``.index`` file or a directory with a
  ``checkpoint`` state file, :mod:`~sparsify.cli.report.checkpoint_dir`; values are
  read with ``tf.train.load_checkpoint``),
* SavedModel directories (the variables checkpoint inside ``variables/``, or
  for a frozen inference graph the float constants of ``saved_model.pb``) and
  frozen GraphDef ``.pb`` files (protobuf parsing only),
* Keras ``.keras`` archives (``model.weights.h5`` read with h5py from the zip, its weights named after
  the layers of ``config.json``: ``fc1/kernel``, :mod:`~sparsify.cli.report.keras_names`)
  and HDF5 weight files (``.h5`` / ``.weights.h5``),
* NumPy ``.npz`` archives (``allow_pickle=False``; :mod:`~sparsify.cli.report.npz_reader`), a
  compressed or int8 one (``sparsify export --to npz`` / ``--int8``) decoded to dense tensors.

Arrays come back in the file's own layout; :data:`FORMATS` says which layout
that is. TensorFlow and torch are imported only when a file of theirs is read.
A compressed ``state_dict`` (``sparsify export``) is decoded to its dense
tensors, and a structured-pruned model saved by
``sparsify_torch.channels.save_pruned_model`` reports its ``state_dict``.

Hostile or broken files fail cleanly: only regular files and directories are
opened (a named pipe would block), and what a file *declares* (zip entry
sizes, array headers, checkpoint shapes, HDF5 dataset shapes) is checked
against ``max_bytes`` (default :data:`DEFAULT_MAX_BYTES`, ``--max-bytes`` on
the command line) before anything is read. A SavedModel whose graph has
variables but no ``variables/`` checkpoint, or a checkpoint whose data shard
is missing or truncated, is reported as incomplete.

Example:
    >>> import numpy as np, tempfile, os
    >>> f = os.path.join(tempfile.mkdtemp(), "w.npz"); np.savez(f, w=np.zeros((2, 2)))
    >>> fmt, tensors = read_tensors(f)
    >>> fmt, FORMATS[fmt], tensors["w"].shape
    ('npz', 'canonical', (2, 2))
"""
from __future__ import annotations

import io
import json
import os
import re
import zipfile
from typing import Any, Mapping

import numpy as np

from sparsify import sparse_format
from sparsify.extras import install_command

from ..frameworks import import_tensorflow, import_torch
from ..messages import plain_message
from .checkpoint_dir import STATE_FILE, checkpoint_prefixes, data_shard_prefixes, directory_checkpoint_prefix
from .keras_names import keras_weight_names
from .limits import DEFAULT_MAX_BYTES, check_declared, check_regular, format_bytes, zip_declared
from .npz_reader import read_npz

__all__ = ["FORMATS", "DEFAULT_MAX_BYTES", "PRUNED_MODEL_FORMAT", "detect_format", "resolve_format", "read_tensors",
           "format_bytes", "check_regular"]

#: ``"format"`` of a structured-pruned model saved by ``sparsify_torch.channels.save_pruned_model``.
PRUNED_MODEL_FORMAT = "sparsify_torch.channels.pruned_model"

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
    if os.path.exists(p):
        check_regular(p)
    if os.path.isdir(p):
        if os.path.exists(os.path.join(p, "saved_model.pb")) or os.path.exists(os.path.join(p, "saved_model.pbtxt")):
            return "savedmodel"
        if os.path.isfile(os.path.join(p, STATE_FILE)) or checkpoint_prefixes(p) or data_shard_prefixes(p):
            return "tf-checkpoint"           # directory_checkpoint_prefix says what is missing, if anything
        inside = sorted(f + "/" for f in os.listdir(p) if os.path.isdir(os.path.join(p, f)))
        raise ValueError(f"{p!r} is a directory but neither a SavedModel (no saved_model.pb) "
                         "nor a TensorFlow checkpoint directory (no 'checkpoint' state file and no *.index file)"
                         + (f"; it holds the directories {', '.join(inside[:4])}: pass one of them" if inside else ""))
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


def _read_torch(p: str, max_bytes: int | None) -> dict[str, np.ndarray]:
    if zipfile.is_zipfile(p):
        check_declared(p, zip_declared(p), max_bytes)
    else:
        check_declared(p, os.path.getsize(p), max_bytes)
    try:
        torch = import_torch()
    except ImportError:
        raise ValueError(f"{p!r} is a torch file but torch is not installed "
                         f"({install_command('torch')})") from None
    try:
        obj = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises many types for bad files
        msg = plain_message(str(e))              # whole: torch says what failed and what to do after line one
        msg = msg if len(msg) > 20 else f"{type(e).__name__}{': ' + msg if msg else ''}"
        raise ValueError(f"{p!r} cannot be read as a torch state_dict (weights_only=True): {msg}") from None
    if sparse_format.is_compressed_document(obj):          # written by `sparsify export`
        entries = obj.get("tensors") if isinstance(obj.get("tensors"), Mapping) else {}
        np_doc = {**obj, "tensors": {n: {k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in e.items()}
                                     if isinstance(e, Mapping) else e for n, e in entries.items()}}
        try:                                              # every element takes at least one byte
            return sparse_format.decompress_tensors(np_doc, max_elements=max_bytes)
        except ValueError as e:
            raise ValueError(f"{p!r}: {e}") from None
    if isinstance(obj, Mapping) and obj.get("format") == PRUNED_MODEL_FORMAT and isinstance(obj.get("state_dict"), Mapping):
        obj = obj["state_dict"]                            # a structured-pruned model: its weights
    out: dict[str, np.ndarray] = {}

    def walk(prefix: str, o: Any) -> None:
        if isinstance(o, torch.Tensor):
            t = o.detach().cpu()
            if t.layout != torch.strided:
                t = t.to_dense()
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
        raise ValueError(f"{prefix!r} is a {what} but tensorflow is not installed "
                         f"({install_command('tf')})") from None
    try:
        return tf, tf.train.load_checkpoint(prefix)
    except Exception as e:  # noqa: BLE001 - tf.errors.* for bad files
        msg = plain_message(str(e)) or type(e).__name__
        raise ValueError(f"{prefix!r} cannot be read as a {what}: {msg}") from None


def _read_tf_checkpoint(p: str, max_bytes: int | None, what: str = "TensorFlow checkpoint") -> dict[str, np.ndarray]:
    if p.endswith(".index"):
        p = p[: -len(".index")]
    p = re.sub(r"\.data-\d+-of-\d+$", "", p)
    for f in (p + ".index", *(os.path.join(os.path.dirname(p) or ".", n) for n in _shards(p))):
        if os.path.exists(f):
            check_regular(f)
    tf, reader = _tf_reader(p, what)
    shapes = reader.get_variable_to_shape_map()
    dtypes = reader.get_variable_to_dtype_map()
    numeric = {n for n, dt in dtypes.items() if n != "_CHECKPOINTABLE_OBJECT_GRAPH" and dt != tf.string}
    declared = sum(int(np.prod(shapes[n], dtype=np.int64)) * dtypes[n].size for n in numeric)
    check_declared(p, declared, max_bytes)
    out: dict[str, np.ndarray] = {}
    for name in sorted(numeric):
        try:
            value = reader.get_tensor(name)
        except Exception as e:  # noqa: BLE001 - a missing or truncated data shard
            msg = " ".join(str(e).split())[:200] or type(e).__name__
            raise ValueError(f"{p!r}: incomplete {what}: tensor {name!r} cannot be read ({msg}); a data shard "
                             f"({p}.data-*) is missing or truncated") from None
        value = np.asarray(value)
        if value.dtype.kind in "fcbiu":
            out[name.replace("/.ATTRIBUTES/VARIABLE_VALUE", "")] = value
    return out


def _shards(prefix: str) -> list[str]:
    base = os.path.basename(prefix)
    d = os.path.dirname(prefix) or "."
    try:
        return [n for n in os.listdir(d) if re.fullmatch(re.escape(base) + r"\.data-\d+-of-\d+", n)]
    except OSError:
        return []


def _load_pb(p: str, what: str, max_bytes: int | None) -> bytes:
    check_regular(p)
    check_declared(p, os.path.getsize(p), max_bytes, "protobuf")
    with open(p, "rb") as fh:
        return fh.read()


_VARIABLE_OPS = ("VarHandleOp", "VariableV2", "Variable")


def _parse_graphs(p: str, saved_model: bool, max_bytes: int | None) -> tuple[Any, list[Any]]:
    what = "SavedModel" if saved_model else "frozen GraphDef (.pb)"
    try:
        tf = import_tensorflow()
    except ImportError:
        raise ValueError(f"{p!r} is a {what} but tensorflow is not installed "
                         f"({install_command('tf')})") from None
    raw = _load_pb(p, what, max_bytes)
    try:
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
    return tf, graphs


def _graph_nodes(graphs: list[Any]) -> list[Any]:
    return [n for gd in graphs for n in list(gd.node) + [n for f in gd.library.function for n in f.node_def]]


def _read_graph_constants(p: str, saved_model: bool, max_bytes: int | None) -> dict[str, np.ndarray]:
    """Float constants (rank >= 1) of a frozen GraphDef or of a SavedModel's graphs (protobuf parsing only)."""
    tf, graphs = _parse_graphs(p, saved_model, max_bytes)
    out: dict[str, np.ndarray] = {}
    for node in _graph_nodes(graphs):
        if node.op != "Const" or "value" not in node.attr:
            continue
        value = tf.make_ndarray(node.attr["value"].tensor)
        if value.dtype.kind == "f" and value.ndim >= 1 and value.size > 1:
            out.setdefault(node.name, value)
    return out


def _read_saved_model(p: str, max_bytes: int | None) -> dict[str, np.ndarray]:
    if not os.path.isdir(p):
        raise ValueError(f"{p!r} is not a directory; a SavedModel is a directory holding saved_model.pb")
    pb = os.path.join(p, "saved_model.pb")
    prefix = os.path.join(p, "variables", "variables")
    if os.path.exists(prefix + ".index"):
        return _read_tf_checkpoint(prefix, max_bytes, "SavedModel variables checkpoint")
    if not os.path.exists(pb):
        raise ValueError(f"{p!r} holds no saved_model.pb (a text saved_model.pbtxt is not read) and no "
                         "variables/ checkpoint")
    _, graphs = _parse_graphs(pb, True, max_bytes)
    variables = [n.name for n in _graph_nodes(graphs) if n.op in _VARIABLE_OPS]
    if variables:
        where = "variables/ is missing" if not os.path.isdir(os.path.join(p, "variables")) \
            else "variables/variables.index is missing"
        raise ValueError(f"{p!r}: incomplete SavedModel: its graph has {len(variables)} variables "
                         f"(e.g. {variables[0]!r}) but {where}")
    return _read_graph_constants(pb, True, max_bytes)      # a frozen graph: the weights are constants


def _read_h5(source: Any, p: str, max_bytes: int | None) -> dict[str, np.ndarray]:
    try:
        import h5py
    except ImportError:
        raise ValueError(f"{p!r} holds HDF5 weights but h5py is not installed (pip install h5py)") from None
    out: dict[str, np.ndarray] = {}
    try:
        with h5py.File(source, "r") as f:
            datasets: list[Any] = []

            def visit(name: str, obj: Any) -> None:
                if isinstance(obj, h5py.Dataset) and obj.dtype.kind in "fcbiu":
                    datasets.append((name, obj))
            f.visititems(visit)
            check_declared(p, sum(int(d.size) * d.dtype.itemsize for _, d in datasets), max_bytes)
            for name, d in datasets:
                out[name] = np.asarray(d[()])
    except OSError as e:
        raise ValueError(f"{p!r} cannot be read as HDF5 weights: {e}") from None
    return out


#: Largest ``config.json`` of a ``.keras`` archive read for its layer names (a larger one: the file's own names).
MAX_KERAS_CONFIG_BYTES = 16 << 20


def _keras_config(zf: zipfile.ZipFile) -> Any:
    """The archive's ``config.json`` as plain JSON, or None (missing, too large, not JSON)."""
    try:
        info = zf.getinfo("config.json")
        if info.file_size > MAX_KERAS_CONFIG_BYTES:
            return None
        return json.loads(zf.read(info).decode("utf-8"))
    except (KeyError, OSError, ValueError, RecursionError, zipfile.BadZipFile):
        return None


def _read_keras(p: str, max_bytes: int | None) -> dict[str, np.ndarray]:
    """The weights of a ``.keras`` archive under its layers' names (``fc1/kernel``; :mod:`.keras_names`)."""
    check_declared(p, zip_declared(p, lambda n: n == "model.weights.h5"), max_bytes, "weights")
    try:
        with zipfile.ZipFile(p) as zf:
            data = zf.read("model.weights.h5")
            config = _keras_config(zf)
    except (zipfile.BadZipFile, KeyError, OSError) as e:
        raise ValueError(f"{p!r} cannot be read as a .keras archive: {e}") from None
    tensors = _read_h5(io.BytesIO(data), p, max_bytes)
    if config is None:
        return tensors
    return {name: tensors[path] for path, name in keras_weight_names(config, tensors).items()}


def resolve_format(path: str | os.PathLike, fmt: str | None = None, max_bytes: int | None = DEFAULT_MAX_BYTES) -> str:
    """The format :func:`read_tensors` reads ``path`` as, after checking ``fmt`` and ``max_bytes``.

    Raises:
        ValueError: a bad ``max_bytes`` or ``fmt``, a ``fmt`` that contradicts the content, or what
            :func:`detect_format` raises.

    Example:
        >>> import numpy as np, tempfile, os
        >>> f = os.path.join(tempfile.mkdtemp(), "w.npz"); np.savez(f, w=np.zeros(2))
        >>> resolve_format(f)
        'npz'
    """
    p = os.fspath(path)
    if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1):
        raise ValueError(f"max_bytes must be a positive integer or None, got {max_bytes!r}")
    if fmt is None:
        fmt = detect_format(p)
    elif fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {tuple(FORMATS)}, got {fmt!r}")
    else:
        try:
            detected = detect_format(p)
        except ValueError:
            detected = None                        # unknown content: let the chosen reader say what is wrong
        if detected is not None and detected != fmt:
            raise ValueError(f"--format {fmt} does not match {p!r}, which is a {detected} file; "
                             f"drop --format or pass --format {detected}")
    if os.path.exists(p):
        check_regular(p)
    return fmt


def read_tensors(path: str | os.PathLike, fmt: str | None = None,
                 max_bytes: int | None = DEFAULT_MAX_BYTES) -> tuple[str, dict[str, np.ndarray]]:
    """Read every numeric tensor of a weights file without executing code from it.

    Args:
        path: file or directory (see the module docstring for the formats).
        fmt: a key of :data:`FORMATS`; detected from the content when None. A
            ``fmt`` that contradicts what the content clearly is (``npz`` for a
            torch file) is a ``ValueError`` naming both.
        max_bytes: refuse a file declaring more tensor bytes than this (None: no cap).

    Returns:
        ``(format, {name: array})`` with arrays in the file's own layout.

    Raises:
        ValueError: missing, unreadable, non-regular, unknown, incomplete or
            too large a file, or a file without tensors.

    Example:
        >>> import numpy as np, tempfile, os
        >>> d = tempfile.mkdtemp(); np.savez(os.path.join(d, "w.npz"), w=np.zeros((2, 2)))
        >>> read_tensors(os.path.join(d, "w.npz"))[0]
        'npz'
    """
    p = os.fspath(path)
    fmt = resolve_format(p, fmt, max_bytes)
    if fmt == "torch":
        tensors = _read_torch(p, max_bytes)
    elif fmt == "tf-checkpoint":
        if os.path.isdir(p):
            tensors = _read_tf_checkpoint(directory_checkpoint_prefix(p), max_bytes)
        else:
            tensors = _read_tf_checkpoint(p, max_bytes)
    elif fmt == "savedmodel":
        tensors = _read_saved_model(p, max_bytes)
    elif fmt == "graphdef":
        tensors = _read_graph_constants(p, False, max_bytes)
    elif fmt == "keras":
        tensors = _read_keras(p, max_bytes)
    elif fmt == "hdf5":
        check_regular(p)
        tensors = _read_h5(p, p, max_bytes)
    else:
        tensors = read_npz(p, max_bytes)
    if not tensors:
        raise ValueError(f"{p!r} ({fmt}) holds no numeric tensors")
    return fmt, tensors
