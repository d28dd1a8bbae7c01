"""Run a pruned model's matrix products on sparse CSR/BSR weights (PyTorch, CPU or GPU).

:func:`to_sparse_inference` returns a copy of a pruned model whose ``nn.Linear``
layers (and ``transformers``' ``Conv1D``, GPT-2's, as the Linear of its transposed
weight; and 1x1 ``nn.Conv2d`` layers with stride 1, no padding, dilation 1,
one group: a matrix product over the channels) hold their weight as a
``torch.sparse_csr`` or ``torch.sparse_bsr`` tensor and multiply with
``weight @ x``. It checks on ``example_inputs`` that the copy's outputs equal
the dense-with-zeros model's within float tolerance, else raises. torch has
no sparse kernel for other convolutions: they stay dense, and naming one in
``modules`` is a ``ValueError``. Inference only: the sparse weights get no
gradient. When it pays (the sparsity above which it is faster than dense, per
layout and batch) is measured by ``bench/bench_deploy.py`` (docs/export.md).

Example:
    >>> import torch, sparsify_torch
    >>> torch.manual_seed(0) and None
    >>> model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    >>> _ = sparsify_torch.prune(model, {"target_sparsity": 0.9, "start_step": 0, "end_step": 0}).remove()
    >>> x = torch.randn(4, 64)
    >>> fast = to_sparse_inference(model, x, layout="bsr", blocksize=(8, 8))
    >>> fast[0].weight.layout, fast[0].weight._nnz() <= 64 * 64
    (torch.sparse_bsr, True)
    >>> torch.allclose(fast(x), model(x), atol=1e-5)
    True
"""
from __future__ import annotations

import copy
import warnings
from typing import Any, Iterable, Sequence

import torch
from torch import nn
from torch.nn.utils import parametrize

from .layers import is_transformers_conv1d

__all__ = ["LAYOUTS", "SparseLinear", "SparseConv1x1", "sparse_inference_plan", "to_sparse_inference", "sparse_layers"]

#: Sparse weight layouts :func:`to_sparse_inference` can build.
LAYOUTS = ("csr", "bsr")
_DTYPES = (torch.float32, torch.float64)


def _sparse(weight: torch.Tensor, layout: str, blocksize: tuple[int, int] | None) -> torch.Tensor:
    w = weight.detach().contiguous()
    with warnings.catch_warnings():     # "Sparse CSR tensor support is in beta state": known, and said in the docs
        warnings.filterwarnings("ignore", message="Sparse (CSR|BSR|BSC|CSC) tensor support is in beta")
        return w.to_sparse_csr() if layout == "csr" else w.to_sparse_bsr(blocksize)


class SparseLinear(nn.Module):
    """``nn.Linear`` on a sparse ``(out, in)`` weight: ``y = (W @ x.T).T + b`` (inference only).

    Example:
        >>> layer = SparseLinear(torch.eye(4), None, "csr")
        >>> layer(torch.arange(8.0).reshape(2, 4)).tolist()
        [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, layout: str,
                 blocksize: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        self.register_buffer("weight", _sparse(weight, layout, blocksize))
        self.register_buffer("bias", None if bias is None else bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        y = (self.weight @ x.reshape(-1, self.in_features).T).T   # sparse @ dense: the kernel torch has
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, layout={self.weight.layout}"


class SparseConv1x1(nn.Module):
    """A 1x1 ``nn.Conv2d`` (stride 1, no padding, one group) as a sparse ``(out, in)`` product over channels.

    Example:
        >>> conv = SparseConv1x1(2 * torch.eye(3), torch.ones(3), "csr")
        >>> conv(torch.ones(1, 3, 2, 2))[0, :, 0, 0].tolist()
        [3.0, 3.0, 3.0]
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, layout: str,
                 blocksize: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.out_channels, self.in_channels = weight.shape[:2]
        self.register_buffer("weight", _sparse(weight.reshape(self.out_channels, self.in_channels), layout, blocksize))
        self.register_buffer("bias", None if bias is None else bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        y = self.weight @ x.transpose(0, 1).reshape(c, n * h * w)
        if self.bias is not None:
            y = y + self.bias[:, None]
        return y.reshape(self.out_channels, n, h, w).transpose(0, 1)

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, kernel_size=(1, 1), layout={self.weight.layout}"


def _conv_refusal(m: nn.Conv2d) -> str | None:
    if tuple(m.kernel_size) != (1, 1):
        return f"a {tuple(m.kernel_size)} convolution: torch has sparse kernels for matrix products only (1x1)"
    for attr, want in (("stride", (1, 1)), ("dilation", (1, 1))):
        if tuple(getattr(m, attr)) != want:
            return f"a 1x1 convolution with {attr} {tuple(getattr(m, attr))}; only {want} is a plain matrix product"
    if isinstance(m.padding, str) and m.padding != "valid" or not isinstance(m.padding, str) and any(m.padding):
        return f"a 1x1 convolution with padding {m.padding!r}; only no padding is a plain matrix product"
    if m.groups != 1:
        return f"a grouped convolution (groups={m.groups})"
    return None


def _base_type(m: nn.Module) -> type:
    """The module's class, seen through torch's parametrization (``ParametrizedLinear`` is a Linear)."""
    return type(m).__bases__[0] if parametrize.is_parametrized(m) else type(m)


def _convertible(m: nn.Module) -> bool:
    """An exact nn.Linear or nn.Conv2d (subclasses, such as attention's out_proj, are used otherwise), or a
    ``transformers`` Conv1D."""
    return _base_type(m) in (nn.Linear, nn.Conv2d) or is_transformers_conv1d(m)


def _linear_weight(m: nn.Module) -> torch.Tensor:
    """The ``(out, in)`` weight of a Linear (a Conv1D's, stored ``(in, out)``, transposed)."""
    return m.weight.T if is_transformers_conv1d(m) else m.weight


def _refusal(m: nn.Module, layout: str, blocksize: tuple[int, int] | None) -> str | None:
    """Why module ``m`` cannot take a sparse weight (None if it can)."""
    if not _convertible(m):
        return f"a {_base_type(m).__name__}; only nn.Linear and 1x1 nn.Conv2d layers are converted (and Conv1D)"
    if _base_type(m) is nn.Conv2d and (why := _conv_refusal(m)):
        return why
    w = _linear_weight(m)
    if w.dtype not in _DTYPES:
        return f"weight dtype {w.dtype}; torch's sparse CSR/BSR products on a CPU take float32 or float64"
    if layout == "bsr":
        rows, cols = w.shape[:2]
        if rows % blocksize[0] or cols % blocksize[1]:
            return f"weight {rows}x{cols} is not divided by blocksize {blocksize[0]}x{blocksize[1]}"
    return None


def _check_args(layout: Any, blocksize: Any, min_sparsity: Any) -> tuple[int, int] | None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if layout == "csr":
        if blocksize is not None:
            raise ValueError(f"blocksize is for layout='bsr'; got blocksize={blocksize!r} with layout='csr'")
    else:
        if isinstance(blocksize, int) and not isinstance(blocksize, bool):
            blocksize = (blocksize, blocksize)
        if (not isinstance(blocksize, (tuple, list)) or len(blocksize) != 2
                or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in blocksize)):
            raise ValueError(f"blocksize must be a positive int or a pair of positive ints for layout='bsr', "
                             f"got {blocksize!r}")
        blocksize = (int(blocksize[0]), int(blocksize[1]))
        if blocksize[0] != blocksize[1]:
            raise ValueError(f"blocksize must be square for layout='bsr' (torch's CPU kernel, MKL, takes square "
                             f"blocks only), got {blocksize!r}")
    if isinstance(min_sparsity, bool) or not isinstance(min_sparsity, (int, float)) or not 0 <= min_sparsity < 1:
        raise ValueError(f"min_sparsity must be a number in [0, 1), got {min_sparsity!r}")
    return blocksize


def sparse_inference_plan(model: nn.Module, layout: str = "csr", blocksize: int | tuple[int, int] | None = None,
                          min_sparsity: float = 0.0) -> dict[str, str | None]:
    """What :func:`to_sparse_inference` does with each Linear, Conv1D and Conv2d: None (converted) or why not.

    Example:
        >>> m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Conv2d(8, 8, 1), torch.nn.Linear(8, 6))
        >>> plan = sparse_inference_plan(m, "bsr", 4)
        >>> plan["1"], plan["2"]
        (None, 'weight 6x8 is not divided by blocksize 4x4')
    """
    bs = _check_args(layout, blocksize, min_sparsity)
    plan = {}
    for name, m in model.named_modules():
        if _convertible(m):
            why = _refusal(m, layout, bs)
            if why is None and min_sparsity > 0:
                sparsity = float((m.weight == 0).float().mean())
                if sparsity < min_sparsity:
                    why = f"sparsity {sparsity:.3f} is below min_sparsity {min_sparsity}"
            plan[name] = why
    return plan


def _as_tuple(x: Any) -> tuple[Any, ...]:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _flat_outputs(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for k in sorted(out) for t in _flat_outputs(out[k])]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat_outputs(o)]
    return []


def _compare(dense: Any, sparse: Any, rtol: float, atol: float) -> None:
    a, b = _flat_outputs(dense), _flat_outputs(sparse)
    if not a or len(a) != len(b):
        raise ValueError(f"the model's outputs are not tensors (or nested tuples/dicts of them): got "
                         f"{type(dense).__name__}; to_sparse_inference cannot check them")
    for i, (x, y) in enumerate(zip(a, b)):
        if x.shape != y.shape or not torch.allclose(x, y, rtol=rtol, atol=atol):
            diff = (x - y).abs().max().item() if x.shape == y.shape else f"shapes {tuple(x.shape)} vs {tuple(y.shape)}"
            raise ValueError(f"the sparse model's output {i} differs from the dense model's (max abs diff {diff}, "
                             f"rtol={rtol}, atol={atol})")


def _replace(root: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, attr = name.rpartition(".")
    setattr(root.get_submodule(parent_name) if parent_name else root, attr, new)


def to_sparse_inference(model: nn.Module, example_inputs: Any, layout: str = "csr",
                        blocksize: int | tuple[int, int] | None = None, *, modules: Iterable[str] | None = None,
                        min_sparsity: float = 0.0, rtol: float = 1e-4, atol: float = 1e-5) -> nn.Module:
    """A copy of ``model`` (in eval mode) whose Linear and 1x1 Conv2d layers multiply with sparse weights.

    Args:
        model: a pruned model (after ``Pruner.remove()``, or still pruning: the masked weight is taken).
            It is not changed.
        example_inputs: a tensor or a tuple of positional inputs; both models run on it and must agree.
        layout: ``"csr"`` (compressed rows, any pattern) or ``"bsr"`` (blocks of ``blocksize``; pairs with
            a block pattern such as ``"16x16"``).
        blocksize: ``(rows, cols)`` of a BSR block, or an int for a square one; required for ``"bsr"``.
        modules: names (as in ``model.named_modules()``) of the layers to convert; each must be convertible,
            else ``ValueError``. Default: every Linear and 1x1 Conv2d that :func:`sparse_inference_plan` takes,
            and an error naming every Linear it cannot take (other convolutions stay dense).
        min_sparsity: layers sparser than this only (default: all); sparse products pay only when sparse.
        rtol, atol: tolerance of the output check (``torch.allclose``).

    Raises:
        ValueError: a bad argument, a layer that cannot be converted, no layer to convert, or outputs that
            differ from the dense model's.
    """
    bs = _check_args(layout, blocksize, min_sparsity)
    plan = sparse_inference_plan(model, layout, bs, min_sparsity)
    if modules is not None:
        names = [modules] if isinstance(modules, str) else list(modules)
        known = dict(model.named_modules())
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"modules {unknown} are not modules of the model")
        bad = {n: plan.get(n) or _refusal(known[n], layout, bs) for n in names
               if plan.get(n) is not None or n not in plan}
    else:
        names = [n for n, why in plan.items() if why is None]
        bad = {n: why for n, why in plan.items() if why and _base_type(model.get_submodule(n)) is not nn.Conv2d
               and "below min_sparsity" not in why}
    if bad:
        raise ValueError("to_sparse_inference cannot convert: " + "; ".join(f"{n!r}: {w}" for n, w in bad.items()))
    if not names:
        raise ValueError(f"model has no layer to convert (nn.Linear, or 1x1 nn.Conv2d, with layout={layout!r}"
                         f"{f', min_sparsity={min_sparsity}' if min_sparsity else ''}): {plan}")
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            dense_out = model(*_as_tuple(example_inputs))
            sparse = copy.deepcopy(model)
            for n in names:
                m = model.get_submodule(n)
                cls = SparseConv1x1 if _base_type(m) is nn.Conv2d else SparseLinear
                _replace(sparse, n, cls(_linear_weight(m), m.bias, layout, bs))
            _compare(dense_out, sparse(*_as_tuple(example_inputs)), rtol, atol)
    finally:
        model.train(was_training)
    return sparse


def sparse_layers(model: nn.Module) -> Sequence[str]:
    """Names of the layers of ``model`` that :func:`to_sparse_inference` made sparse."""
    return [n for n, m in model.named_modules() if isinstance(m, (SparseLinear, SparseConv1x1))]
