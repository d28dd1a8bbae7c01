"""``sparsify report``: the sparsity of saved weights, per tensor and in total, and pattern conformity.

Three steps, one module each:

* :mod:`~sparsify.cli.report.readers`: read every numeric tensor of a torch
  ``state_dict``, TF checkpoint, SavedModel, frozen GraphDef, ``.keras`` /
  HDF5 file or ``.npz`` archive, without executing code from the file
  (:mod:`~sparsify.cli.report.npz_reader` reads an ``.npz``, plain, compressed or int8,
  :mod:`~sparsify.cli.report.int8_npz` an int8 one's tensors with how each is stored and its bytes,
  :mod:`~sparsify.cli.report.npz_stream` reads an ``.npz`` in bounded chunks,
  :mod:`~sparsify.cli.report.limits` holds the cap on declared bytes,
  :mod:`~sparsify.cli.report.checkpoint_dir` finds the checkpoint a directory's
  state file names);
* :mod:`~sparsify.cli.report.statistics`: per-tensor and total sparsity,
  and whether each 2-D view satisfies a pattern (:class:`SparsityReport`);
* :mod:`~sparsify.cli.report.formatting`: the table the command prints.

Example:
    >>> import numpy as np, tempfile, os
    >>> f = os.path.join(tempfile.mkdtemp(), "w.npz")
    >>> np.savez(f, w=np.array([[0.0, 1.0, 0.0, 2.0]]))
    >>> rep = build_report(f, pattern="2:4")
    >>> rep.to_dict()["pattern_conforms"], format_report(rep).splitlines()[-1]
    (True, 'pattern 2:4: every weight that fits it conforms')
"""
from .formatting import format_conformity, format_report
from .readers import FORMATS, detect_format, read_tensors
from .statistics import SparsityReport, build_report, is_optimizer_state
from .stats_record import TensorStats
from .tensor_measures import guess_tf_kind, pattern_conformity, tensor_stats

__all__ = [
    "FORMATS", "detect_format", "read_tensors",
    "TensorStats", "SparsityReport", "guess_tf_kind", "is_optimizer_state", "pattern_conformity", "tensor_stats",
    "build_report", "format_report", "format_conformity",
]
