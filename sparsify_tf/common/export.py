"""Export a pruned ``tf.compat.v1`` graph for inference, masks baked in.

The exported graph reads the original weights (now constants equal to
``weight * mask``); it holds no mask variables, no update ops and no
py-function ops, and its outputs equal the pruned training graph's.

Freezing is done here on the ``GraphDef`` (variables become constants,
variable reads identities) rather than with TensorFlow's deprecated
``convert_variables_to_constants`` / ``build_tensor_info``, so exporting
prints no deprecation warnings.

Example:
        after training with prune_graph(...):
        gd = export_frozen_graph(sess, ["logits"], path="model.pb")
        export_saved_model(sess, "export_dir", {"x": x}, {"logits": logits})
"""
from __future__ import annotations

import os
from typing import Mapping, Sequence

import numpy as np
import tensorflow as tf

from .graph_utils import get_tensor_var
from .masking import pruned_inputs

__all__ = ["export_frozen_graph", "export_saved_model", "FORBIDDEN_EXPORT_OPS"]

tf1 = tf.compat.v1

_VARIABLE_OPS = ("VarHandleOp", "VariableV2", "Variable")

FORBIDDEN_EXPORT_OPS = ("VariableV2", "Variable", "VarHandleOp", "ReadVariableOp", "Assign", "AssignVariableOp",
                        "PyFunc", "PyFuncStateless", "EagerPyFunc", "Switch", "RefSwitch", "Merge")


def _op_name(x) -> str:
    name = x if isinstance(x, str) else x.name
    return name.split(":")[0]


def _input_ref(tensor_name: str) -> str:
    op, _, idx = tensor_name.partition(":")
    return op if idx in ("", "0") else f"{op}:{idx}"


def _graph_variables(graph: tf.Graph) -> dict[str, tf.Variable]:
    out = {}
    for key in (tf1.GraphKeys.GLOBAL_VARIABLES, tf1.GraphKeys.LOCAL_VARIABLES, tf1.GraphKeys.MODEL_VARIABLES):
        for v in graph.get_collection(key):
            out.setdefault(v.op.name, v)
    return out


def _reachable(nodes: dict, names: Sequence[str]) -> set[str]:
    keep: set[str] = set()
    stack = list(names)
    while stack:
        name = stack.pop()
        if name in keep:
            continue
        keep.add(name)
        stack.extend(i.lstrip("^").split(":")[0] for i in nodes[name].input)
    return keep


def _freeze(sess: tf1.Session, gd: tf1.GraphDef, names: Sequence[str]) -> tf1.GraphDef:
    """The part of ``gd`` that ``names`` need, every variable a constant of its current value."""
    nodes = {n.name: n for n in gd.node}
    keep = _reachable(nodes, names)
    var_names = [n for n in keep if nodes[n].op in _VARIABLE_OPS]
    variables = _graph_variables(sess.graph)
    missing = [n for n in var_names if n not in variables]
    if missing:
        raise ValueError(f"outputs depend on variables outside the graph's variable collections: {missing[:5]}")
    values = sess.run({n: variables[n] for n in var_names}) if var_names else {}
    frozen = tf1.GraphDef()
    frozen.versions.CopyFrom(gd.versions)
    frozen.library.CopyFrom(gd.library)
    resource_vars = {n for n in var_names if nodes[n].op == "VarHandleOp"}
    for node in gd.node:
        if node.name not in keep:
            continue
        out = frozen.node.add()
        if node.name in values:
            value = np.asarray(values[node.name])
            out.op, out.name = "Const", node.name
            out.attr["dtype"].CopyFrom(node.attr["dtype"])
            out.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value, dtype=node.attr["dtype"].type))
            continue
        out.CopyFrom(node)
        source = node.input[0].split(":")[0] if node.input else None
        if node.op == "ReadVariableOp" and source in resource_vars:
            out.op = "Identity"
            out.attr["T"].CopyFrom(node.attr["dtype"])
            del out.attr["dtype"]
        elif node.op == "ResourceGather" and source in resource_vars:
            if node.attr["batch_dims"].i != 0:
                raise ValueError(f"cannot freeze {node.name!r}: ResourceGather with batch_dims != 0")
            out.op = "Gather"
            out.attr["Tparams"].CopyFrom(node.attr["dtype"])
            for key in ("dtype", "batch_dims"):
                if key in out.attr:
                    del out.attr[key]
        elif any(i.lstrip("^").split(":")[0] in resource_vars for i in node.input if not i.startswith("^")):
            raise ValueError(f"cannot freeze {node.name!r}: op {node.op} reads a resource variable directly")
    return frozen


def export_frozen_graph(sess: tf1.Session, outputs: Sequence[str | tf.Tensor | tf.Operation],
                        path: str | os.PathLike | None = None) -> tf1.GraphDef:
    """Frozen inference ``GraphDef`` of ``sess.graph`` for ``outputs``, masks baked in.

    Args:
        sess: the training session (holds the current weights and masks).
        outputs: output tensors, ops or their names.
        path: optional file to write the binary ``GraphDef`` to.

    Returns:
        The frozen ``GraphDef`` (only the ops ``outputs`` need, weights as constants).

    Raises:
        ValueError: for an empty or unknown output; RuntimeError if a mask,
            variable or py-function op would remain.
    """
    if isinstance(outputs, (str, tf.Tensor, tf.Operation)):
        outputs = [outputs]
    names = [_op_name(o) for o in outputs]
    if not names:
        raise ValueError("outputs must name at least one output tensor or op, got []")
    graph = sess.graph
    for n in names:
        try:
            graph.get_operation_by_name(n)
        except KeyError:
            raise ValueError(f"outputs: no op named {n!r} in the session's graph") from None
    gd = graph.as_graph_def()
    nodes = {n.name: n for n in gd.node}
    rewires = pruned_inputs(graph)
    for r in rewires:
        node = nodes[r["op"]]
        node.input[r["index"]] = _input_ref(r["original"])
    frozen = _freeze(sess, gd, names)
    baked = {}
    for r in rewires:
        if r["var"] in baked:
            continue
        w, m = sess.run([get_tensor_var(graph, r["var"]), get_tensor_var(graph, r["mask"])])
        baked[r["var"]] = (np.asarray(w) * np.asarray(m)).astype(np.asarray(w).dtype)
    for node in frozen.node:
        if node.op == "Const" and node.name in baked:
            node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(baked[node.name]))
    bad = [f"{n.name} ({n.op})" for n in frozen.node
           if n.op in FORBIDDEN_EXPORT_OPS or "_nm_ks/" in n.name or n.name.startswith("nm_ks_ops/")]
    if bad:
        raise RuntimeError(f"exported graph still holds training/pruning ops: {bad[:10]}")
    if path is not None:
        with tf.io.gfile.GFile(os.fspath(path), "wb") as fh:
            fh.write(frozen.SerializeToString())
    return frozen


def export_saved_model(sess: tf1.Session, export_dir: str | os.PathLike, inputs: Mapping[str, tf.Tensor],
                       outputs: Mapping[str, tf.Tensor]) -> str:
    """Write a SavedModel (tag ``serve``, signature ``serving_default``) of the frozen pruned graph.

    Args:
        sess: the training session.
        export_dir: a directory that must not exist yet.
        inputs, outputs: signature names -> tensors of ``sess.graph``.

    Returns:
        ``export_dir`` as a string. Load with ``tf.compat.v1.saved_model.load(sess, ["serve"], export_dir)``.
    """
    for what, m in (("inputs", inputs), ("outputs", outputs)):
        if not isinstance(m, Mapping) or not m or not all(isinstance(t, tf.Tensor) for t in m.values()):
            raise TypeError(f"{what} must be a non-empty dict of signature name -> tf.Tensor, got {m!r}")
    export_dir = os.fspath(export_dir)
    if os.path.exists(export_dir):
        raise ValueError(f"export_dir {export_dir!r} already exists; pass a new directory")
    frozen = export_frozen_graph(sess, list(outputs.values()))
    g = tf.Graph()
    with g.as_default():
        tf.import_graph_def(frozen, name="")
        sig = _signature({k: g.get_tensor_by_name(t.name) for k, t in inputs.items()},
                         {k: g.get_tensor_by_name(t.name) for k, t in outputs.items()})
        with tf1.Session(graph=g) as s2:
            builder = tf1.saved_model.Builder(export_dir)
            builder.add_meta_graph_and_variables(s2, [tf1.saved_model.tag_constants.SERVING],
                                                 signature_def_map={"serving_default": sig},
                                                 strip_default_attrs=True)
            builder.save()
    return export_dir


def _signature(inputs: Mapping[str, tf.Tensor], outputs: Mapping[str, tf.Tensor]):
    """A ``serving_default`` predict SignatureDef, built from protos (no deprecated ``build_tensor_info``)."""
    from tensorflow.core.protobuf import meta_graph_pb2

    sig = meta_graph_pb2.SignatureDef(method_name="tensorflow/serving/predict")
    for field, tensors in ((sig.inputs, inputs), (sig.outputs, outputs)):
        for key, t in tensors.items():
            info = field[key]
            info.name = t.name
            info.dtype = t.dtype.as_datatype_enum
            info.tensor_shape.CopyFrom(t.shape.as_proto())
    return sig
