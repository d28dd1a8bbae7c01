"""Which weights of a torch model can be pruned, under which names, and in which layout.

A prunable weight is named like its parameter in ``model.named_parameters()``
of the plain model (``"features.0.weight"``, ``"attn.out_proj.weight"``);
``op_names``/``excluded_op_names`` regexes are matched against these names.
MultiheadAttention's fused ``in_proj_weight`` ``(3E, E)`` is three weights for
the core, as in every framework (docs/design.md, rule 1): ``"attn.in_proj_weight.q"``,
``".k"`` and ``".v"``, each ``(E, E)`` (separate ``q/k/v_proj_weight`` keep
their own names).

Most torch layouts already are the core's canonical layout (Linear
``(out, in)``, Conv ``(out, in/groups, *k)``, Embedding ``(num, dim)``);
ConvTranspose ``(in, out/groups, *k)`` is converted so that rows are output
channels (:func:`sparsify.layout.conv_transpose_to_canonical`). Linear-like
layers that store their weight transposed, ``(in, out)`` — ``transformers``'
``Conv1D`` (GPT-2's blocks) — are transposed to ``(out, in)``: their masks are
those of an ``nn.Linear`` holding the transposed weight, N:M groups run along
the input dimension. ``Conv1D`` is recognised by its class name, without
importing ``transformers``; :func:`register_prunable` adds a user's own layer type.

Example:
    >>> import torch
    >>> m = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4, 2))
    >>> [(w.name, w.shape) for w in prunable_weights(m)]
    [('0.weight', (4, 1, 3, 3)), ('2.weight', (2, 4))]
    >>> [(w.name, w.shape) for w in prunable_weights(torch.nn.ConvTranspose1d(2, 6, 3))]
    [('weight', (6, 2, 3))]
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from sparsify.layout import canonical_to_conv_transpose, conv_transpose_to_canonical

_NUMPY_DTYPES = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16, torch.bool: np.bool_}

__all__ = ["PrunableWeight", "prunable_weights", "hooked_weights", "has_spectral_norm", "SPECTRAL_NORM_ORIGINAL",
           "SUPPORTED_MODULES", "WEIGHT_LAYOUTS", "register_prunable", "unregister_prunable", "registered_layout",
           "is_linear_like", "is_prunable_type", "is_transformers_conv1d"]

#: Module types whose weights are prunable, with the tensor names pruned.
SUPPORTED_MODULES: tuple[type[nn.Module], ...] = (
    nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d,
    nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d,
    nn.Embedding, nn.EmbeddingBag, nn.MultiheadAttention,
)

_MHA_TENSORS = ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight")
_CONV_TRANSPOSE = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)

#: Layouts of a registered weight: ``"out_in"`` is the core's (``nn.Linear``'s ``(out, in)``, a conv's
#: ``(out, in, *k)``), ``"in_out"`` a 2-D weight stored transposed (``transformers``' ``Conv1D``).
WEIGHT_LAYOUTS = ("out_in", "in_out")


@dataclass(frozen=True)
class _Registration:
    """What :func:`register_prunable` recorded for a layer type: the tensor pruned and its layout."""

    tensor_name: str
    layout: str


#: Layer types registered by users (:func:`register_prunable`), matched along the class's MRO.
_REGISTERED: dict[type, _Registration] = {}
#: Layer types known by ``(module, qualname)``: matched without importing their library.
_BY_NAME: dict[tuple[str, str], _Registration] = {
    ("transformers.pytorch_utils", "Conv1D"): _Registration("weight", "in_out"),
}


def _registration(module: nn.Module) -> _Registration | None:
    """The registration of ``module``'s most specific class (a built-in supported class stops the search)."""
    for cls in type(module).__mro__:
        reg = _REGISTERED.get(cls) or _BY_NAME.get((cls.__module__, cls.__qualname__))
        if reg is not None:
            return reg
        if cls in SUPPORTED_MODULES:
            return None
    return None


def registered_layout(module: nn.Module) -> tuple[str, str] | None:
    """``(tensor_name, layout)`` of a registered layer (a user's or ``transformers``' ``Conv1D``), else None.

    Example:
        >>> class Dense(nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.kernel = nn.Parameter(torch.ones(3, 2))     # (in, out)
        >>> register_prunable(Dense, tensor_name="kernel", layout="in_out")
        >>> registered_layout(Dense()), registered_layout(nn.Linear(2, 2))
        (('kernel', 'in_out'), None)
        >>> unregister_prunable(Dense)
    """
    reg = _registration(module)
    return None if reg is None else (reg.tensor_name, reg.layout)


def is_transformers_conv1d(module: nn.Module) -> bool:
    """Is ``module`` a ``transformers.pytorch_utils.Conv1D`` (or a subclass)? ``transformers`` is not imported.

    Example:
        >>> is_transformers_conv1d(nn.Linear(2, 2))
        False
    """
    return any((c.__module__, c.__qualname__) == ("transformers.pytorch_utils", "Conv1D") for c in type(module).__mro__)


def is_linear_like(module: nn.Module, tensor_name: str | None = None) -> bool:
    """Does ``module`` multiply the last dimension of its first input by its 2-D ``tensor_name`` (default: its
    prunable tensor) as a linear layer does? ``nn.Linear`` (and subclasses), ``Conv1D``, and registered layers
    whose tensor is 2-D.

    Example:
        >>> is_linear_like(nn.Linear(2, 3)), is_linear_like(nn.Conv1d(2, 3, 1))
        (True, False)
    """
    reg = _registration(module)
    if reg is None:
        return isinstance(module, nn.Linear) and tensor_name in (None, "weight")
    p = _get(module, reg.tensor_name)
    return tensor_name in (None, reg.tensor_name) and p is not None and p.dim() == 2


def register_prunable(module_type: type[nn.Module], tensor_name: str = "weight", layout: str = "out_in") -> None:
    """Make the weights of a user's layer type prunable (its subclasses too).

    Args:
        module_type: the ``nn.Module`` subclass (not one of :data:`SUPPORTED_MODULES`, already supported).
        tensor_name: the parameter pruned (an attribute holding an ``nn.Parameter``).
        layout: ``"out_in"`` if the tensor is ``(out, in)`` like ``nn.Linear``'s (or ``(out, in, *k)`` like a
            convolution's), ``"in_out"`` if it is a 2-D weight stored ``(in, out)`` (``y = x @ W``): it is then
            transposed for the core, so masks and N:M groups are those of an ``nn.Linear`` holding ``W.T``.

    Criteria that read the inputs (``"wanda"``) and ``prune_oneshot(method="sparsegpt")`` take a registered
    layer with a 2-D tensor as a linear layer: its first input's last dimension must be the input features.
    Registering a type again replaces its registration.

    Raises:
        TypeError: ``module_type`` is not an ``nn.Module`` subclass, or ``tensor_name`` is not a string.
        ValueError: a built-in supported type, an empty ``tensor_name`` or an unknown ``layout``.

    Example:
        >>> import sparsify_torch
        >>> class Dense(nn.Module):                  # y = x @ kernel, kernel stored (in, out)
        ...     def __init__(self, n_in, n_out):
        ...         super().__init__()
        ...         self.kernel = nn.Parameter(torch.randn(n_in, n_out))
        ...     def forward(self, x):
        ...         return x @ self.kernel
        >>> sparsify_torch.register_prunable(Dense, tensor_name="kernel", layout="in_out")
        >>> m = nn.Sequential(Dense(8, 4))
        >>> [(w.name, w.shape) for w in prunable_weights(m)]            # the core's (out, in)
        [('0.kernel', (4, 8))]
        >>> p = sparsify_torch.prune(m, {"target_sparsity": 0.5, "pattern": "2:4", "start_step": 0, "end_step": 0})
        >>> m[0].kernel.T.reshape(4, 2, 4).ne(0).sum(-1).unique().tolist()     # 2 of 4 along the input
        [2]
        >>> _ = p.remove()
        >>> sparsify_torch.unregister_prunable(Dense)
    """
    if not isinstance(module_type, type) or not issubclass(module_type, nn.Module):
        raise TypeError(f"module_type must be an nn.Module subclass, got {module_type!r}")
    if module_type in SUPPORTED_MODULES:
        raise ValueError(f"module_type {module_type.__name__} is supported already (SUPPORTED_MODULES); register "
                         "your own layer types")
    if not isinstance(tensor_name, str):
        raise TypeError(f"tensor_name must be the name of the layer's weight parameter (str), got {tensor_name!r}")
    if not tensor_name.isidentifier():
        raise ValueError(f"tensor_name must be an attribute name such as 'weight', got {tensor_name!r}")
    if layout not in WEIGHT_LAYOUTS:
        raise ValueError(f"layout must be one of {WEIGHT_LAYOUTS} ('out_in': (out, in) like nn.Linear; 'in_out': "
                         f"a 2-D weight stored (in, out)), got {layout!r}")
    _REGISTERED[module_type] = _Registration(tensor_name, layout)


def unregister_prunable(module_type: type[nn.Module]) -> None:
    """Forget a :func:`register_prunable` registration.

    Raises:
        ValueError: ``module_type`` was not registered.
    """
    if module_type not in _REGISTERED:
        raise ValueError(f"module_type {module_type!r} is not registered (register_prunable)")
    del _REGISTERED[module_type]


def is_prunable_type(module: nn.Module) -> bool:
    """Is ``module`` of a supported or registered layer type (``Conv1D`` included)?"""
    return _registration(module) is not None or isinstance(module, SUPPORTED_MODULES)


@dataclass(frozen=True)
class PrunableWeight:
    """One weight as the core sees it: ``module.<tensor_name>`` (or rows of it), called ``name``.

    Attributes:
        name: the name configs, masks and the core use.
        module: the module owning the tensor.
        tensor_name: the tensor's attribute name (``"weight"``, ``"in_proj_weight"``).
        shape: the canonical shape (what the core sees).
        rows: ``(start, stop)`` rows of the tensor this weight is (fused q/k/v), or None for all.
        conv_transpose_groups: the ``groups`` of a transposed conv (its layout is converted), else 0.
        transposed: the tensor is a 2-D weight stored ``(in, out)`` (``Conv1D``, a registered ``"in_out"``
            layer): the core sees its transpose.
    """

    name: str
    module: nn.Module
    tensor_name: str
    shape: tuple[int, ...]
    rows: tuple[int, int] | None = None
    conv_transpose_groups: int = 0
    transposed: bool = False

    def parameter(self) -> torch.Tensor | None:
        """The tensor itself: the parameter (``original`` of a parametrized one; None for several originals)."""
        return _get(self.module, self.tensor_name)

    def part(self, tensor: torch.Tensor) -> torch.Tensor:
        """This weight's part of the full tensor (a view, torch layout)."""
        return tensor if self.rows is None else tensor[self.rows[0]:self.rows[1]]

    def to_canonical(self, part: torch.Tensor) -> np.ndarray:
        """Torch-layout part (see :meth:`part`) -> canonical NumPy array (no copy for float32 CPU
        weights in canonical layout)."""
        a = part.detach().to(torch.float32).cpu().numpy() if part.is_floating_point() else part.cpu().numpy()
        if self.transposed:
            return np.ascontiguousarray(a.T)
        return conv_transpose_to_canonical(a, self.conv_transpose_groups) if self.conv_transpose_groups else a

    def from_canonical(self, array: np.ndarray) -> torch.Tensor:
        """Canonical NumPy array -> CPU tensor in this weight's torch layout."""
        if self.transposed:
            a = np.asarray(array).T
        else:
            a = canonical_to_conv_transpose(array, self.conv_transpose_groups) if self.conv_transpose_groups else array
        return torch.from_numpy(np.require(a, requirements=["C", "W"]))

    def mask_like(self, mask: np.ndarray, like: torch.Tensor) -> torch.Tensor:
        """Canonical mask -> tensor in this weight's torch layout with ``like``'s dtype and device.

        The type conversion is done by NumPy where it has the dtype: torch's CPU cast from bool is
        several times slower than the multiply or copy the mask is used for.
        """
        np_dtype = _NUMPY_DTYPES.get(like.dtype)
        if np_dtype is None:
            return self.from_canonical(mask).to(device=like.device, dtype=like.dtype)
        return self.from_canonical(np.asarray(mask).astype(np_dtype)).to(device=like.device)


def _tensor_names(module: nn.Module) -> list[str]:
    reg = _registration(module)
    if reg is not None:
        if _get(module, reg.tensor_name) is not None:
            return [reg.tensor_name]
        return [SPECTRAL_NORM_ORIGINAL] if reg.tensor_name == "weight" and has_spectral_norm(module) else []
    if isinstance(module, nn.MultiheadAttention):
        # out_proj is an nn.Linear sub-module and is found on its own.
        return [t for t in _MHA_TENSORS if _get(module, t) is not None]
    if isinstance(module, SUPPORTED_MODULES):
        if _get(module, "weight") is not None:
            return ["weight"]
        return [SPECTRAL_NORM_ORIGINAL] if has_spectral_norm(module) else []
    return []


#: The parameter torch.nn.utils.spectral_norm keeps instead of ``weight`` (``weight = weight_orig / sigma``).
SPECTRAL_NORM_ORIGINAL = "weight_orig"


def has_spectral_norm(module: nn.Module) -> bool:
    """Does an old-style ``torch.nn.utils.spectral_norm`` hook compute ``module.weight`` from ``weight_orig``?

    Such a weight is pruned by masking ``weight_orig``: the hook divides it by
    one positive number (its largest singular value), so the zeros reach the
    weight and the order of magnitudes within the layer is the weight's. It
    keeps the name ``"<layer>.weight"``.

    Example:
        >>> has_spectral_norm(torch.nn.utils.spectral_norm(torch.nn.Linear(2, 2)))
        True
        >>> [w.name for w in prunable_weights(torch.nn.utils.spectral_norm(torch.nn.Linear(2, 2)))]
        ['weight']
    """
    from torch.nn.utils.spectral_norm import SpectralNorm

    return SPECTRAL_NORM_ORIGINAL in module._parameters and "weight" not in module._parameters and any(
        isinstance(h, SpectralNorm) and h.name == "weight" for h in module._forward_pre_hooks.values())


def _get(module: nn.Module, tensor_name: str):
    """The raw parameter, looking through existing parametrizations (None if there is no single one:
    a parametrization with several originals, such as weight_norm's, is reported when pruning)."""
    if hasattr(module, "parametrizations") and tensor_name in module.parametrizations:
        plist = module.parametrizations[tensor_name]
        return plist.original if hasattr(plist, "original") else plist.original0
    return module._parameters.get(tensor_name)


#: Parameters that old-style weight hooks create instead of ``weight`` where the weight they compute
#: cannot be masked (weight_norm rescales each row by its own norm; spectral_norm is pruned).
_HOOKED = {"weight_g": "weight_norm", "weight_v": "weight_norm", "weight_orig": "an old-style weight hook"}


def hooked_weights(model: nn.Module) -> dict[str, str]:
    """``{layer name: hook}`` for supported layers whose weight is computed by an old-style hook
    that pruning cannot follow (``torch.nn.utils.weight_norm``; spectral_norm is pruned).

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")          # weight_norm is deprecated
        ...     m = torch.nn.Sequential(torch.nn.utils.weight_norm(torch.nn.Linear(2, 2)))
        >>> hooked_weights(m)
        {'0': 'weight_norm'}
    """
    out = {}
    for name, module in model.named_modules():
        if is_prunable_type(module) and "weight" not in module._parameters \
                and not has_spectral_norm(module):
            for p, hook in _HOOKED.items():
                if p in module._parameters:
                    out[name] = hook
                    break
    return out


def _weights_of(name: str, module: nn.Module, tensor_name: str, shape: tuple[int, ...]) -> list[PrunableWeight]:
    if tensor_name == "in_proj_weight":
        e = shape[0] // 3
        return [PrunableWeight(f"{name}.{part}", module, tensor_name, (e, *shape[1:]), (i * e, (i + 1) * e))
                for i, part in enumerate("qkv")]
    reg = _registration(module)
    if reg is not None and reg.layout == "in_out":
        if len(shape) != 2:
            raise ValueError(f"{type(module).__name__} was registered with layout='in_out' (a 2-D weight stored "
                             f"(in, out)), but its {tensor_name!r} ({name!r}) has shape {shape}")
        return [PrunableWeight(name, module, tensor_name, (shape[1], shape[0]), transposed=True)]
    if isinstance(module, _CONV_TRANSPOSE):
        g = int(module.groups)
        return [PrunableWeight(name, module, tensor_name, (shape[1] * g, shape[0] // g, *shape[2:]), None, g)]
    return [PrunableWeight(name, module, tensor_name, shape)]


def prunable_weights(model: nn.Module) -> list[PrunableWeight]:
    """Every weight of a supported layer, in ``named_modules()`` order (= ``named_parameters()`` order).

    Uninitialized (lazy) parameters are left out. Names ignore any
    ``parametrizations.`` indirection, so they stay stable once pruned.

    Example:
        >>> [w.name for w in prunable_weights(torch.nn.MultiheadAttention(4, 2))]
        ['in_proj_weight.q', 'in_proj_weight.k', 'in_proj_weight.v', 'out_proj.weight']
    """
    out: list[PrunableWeight] = []
    for mod_name, module in model.named_modules():
        for t in _tensor_names(module):
            p = _get(module, t)
            if isinstance(p, nn.parameter.UninitializedParameter):
                continue
            public = "weight" if t == SPECTRAL_NORM_ORIGINAL else t
            name = f"{mod_name}.{public}" if mod_name else public
            out.extend(_weights_of(name, module, t, tuple(p.shape)))
    return out
