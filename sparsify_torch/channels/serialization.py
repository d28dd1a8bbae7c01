"""Save and load a structured-pruned model without pickling code.

``torch.save(small)`` pickles the module classes (``torch.load`` then needs
``weights_only=False``, which runs whatever the file says), and a plain
``state_dict`` does not fit the original architecture any more: channel
pruning changed layer widths. :func:`save_pruned_model` stores instead

* the ``state_dict`` (tensors only),
* per module, the integer attributes channel pruning changes
  (``in_channels``/``out_channels``, ``in_features``/``out_features``,
  ``num_features``, ``groups``, ... see :data:`ATTRIBUTES`, plus the channel
  counts named when a layer type was registered with
  :func:`~.tracing.register_layer_kind`) and its type name,
* optionally the dense model's constructor, as ``"package.module:function"``
  plus keyword arguments of plain values.

:func:`load_pruned_model` rebuilds the dense model (from the constructor you
pass, or the stored one when its package is trusted), narrows every module to
the stored widths and loads the ``state_dict``. The file is an ordinary
``torch.save`` file of tensors, strings, ints and lists: ``torch.load(f,
weights_only=True)`` reads it, and so does ``sparsify report``.

Example:
    >>> import torch, tempfile, os
    >>> from sparsify_torch.channels import calibrate_and_prune_model_equal
    >>> def build():
    ...     return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 2, 1))
    >>> small = calibrate_and_prune_model_equal(build(), [torch.randn(2, 3, 8, 8)], lambda out, x: out.pow(2).mean())
    >>> path = os.path.join(tempfile.mkdtemp(), "small.pt")
    >>> save_pruned_model(small, path)
    >>> again = load_pruned_model(path, build)
    >>> again[0].out_channels, torch.equal(again[2].weight, small[2].weight)
    (4, True)
"""
from __future__ import annotations

import importlib
import math
from typing import Any, Callable, Mapping

import torch
from torch import nn

from .tracing import custom_layer

__all__ = ["FORMAT", "VERSION", "ATTRIBUTES", "TRUSTED_PACKAGES", "pruned_model_document", "save_pruned_model",
           "load_pruned_model", "restore_pruned_architecture"]

#: The ``"format"`` of the saved document (``sparsify report`` recognises it).
FORMAT = "sparsify_torch.channels.pruned_model"
VERSION = 1
#: Module attributes that describe layer widths; saved for every module that has them as integers.
ATTRIBUTES = ("in_channels", "out_channels", "groups", "in_features", "out_features", "num_features",
              "normalized_shape", "num_channels", "num_groups", "num_parameters", "embedding_dim",
              "num_embeddings", "embed_dim", "kdim", "vdim", "head_dim", "num_heads", "hidden_size",
              "input_size", "proj_size")
#: Packages whose constructors :func:`load_pruned_model` calls from a file's own constructor spec.
TRUSTED_PACKAGES = ("torchvision", "timm")

_PLAIN = (bool, int, float, str, type(None))


def _width_attributes(module: nn.Module) -> tuple:
    spec = custom_layer(module)
    named = (spec.in_channels, spec.out_channels) if spec is not None else ()
    return ATTRIBUTES + tuple(a for a in named if a and a not in ATTRIBUTES)


def _is_int_attr(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return True
    return isinstance(v, (tuple, list)) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)


def _check_plain(value: Any, where: str) -> None:
    if isinstance(value, _PLAIN):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{where} must be finite, got {value!r}")
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_plain(v, f"{where}[{i}]")
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"{where} keys must be strings, got {k!r}")
            _check_plain(v, f"{where}[{k!r}]")
        return
    raise TypeError(f"{where} must be a plain value (bool, int, float, str, None, list, dict), "
                    f"got {type(value).__name__}")


def pruned_model_document(model: nn.Module, constructor: str | None = None,
                          constructor_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The document :func:`save_pruned_model` saves (no file written).

    Raises:
        TypeError: not a module, or constructor arguments that are not plain values.
        ValueError: a constructor that is not ``"package.module:function"``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    spec = None
    if constructor is not None:
        _split_constructor(constructor)
        kwargs = dict(constructor_kwargs or {})
        _check_plain(kwargs, "constructor_kwargs")
        spec = {"name": constructor, "kwargs": kwargs}
    elif constructor_kwargs:
        raise ValueError("constructor_kwargs given without a constructor")
    modules = {}
    for name, m in model.named_modules():
        attrs = {a: (list(getattr(m, a)) if isinstance(getattr(m, a), (tuple, list)) else getattr(m, a))
                 for a in _width_attributes(m) if hasattr(m, a) and _is_int_attr(getattr(m, a))}
        if attrs:
            modules[name] = {"type": type(m).__name__, "attributes": attrs}
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    return {"format": FORMAT, "version": VERSION, "constructor": spec, "modules": modules,
            "shapes": {k: list(v.shape) for k, v in state.items()}, "state_dict": state}


def save_pruned_model(model: nn.Module, f: Any, constructor: str | None = None, **constructor_kwargs: Any) -> None:
    """Save a (structured-pruned) model so it loads without pickled code.

    Args:
        model: the pruned model.
        f: a path or a writable binary file (as for ``torch.save``).
        constructor: optional ``"package.module:function"`` that builds the dense
            model, e.g. ``"torchvision.models:resnet18"``; then
            :func:`load_pruned_model` needs no ``model`` argument for a
            :data:`TRUSTED_PACKAGES` constructor.
        constructor_kwargs: its keyword arguments (plain values only), e.g. ``num_classes=10``.
    """
    torch.save(pruned_model_document(model, constructor, constructor_kwargs), f)


def _split_constructor(name: Any) -> tuple[str, str]:
    if not isinstance(name, str) or name.count(":") != 1:
        raise ValueError(f"constructor must look like 'package.module:function', got {name!r}")
    module, func = name.split(":")
    if not module or not func or not all(p.isidentifier() for p in module.split(".")) or not func.isidentifier():
        raise ValueError(f"constructor must look like 'package.module:function', got {name!r}")
    return module, func


def _build_from_spec(spec: Any, trusted: tuple[str, ...]) -> nn.Module:
    if not isinstance(spec, Mapping) or "name" not in spec:
        raise ValueError("the file stores no constructor of the dense model; pass model= (the dense model, or a "
                         "function that builds it)")
    module, func = _split_constructor(spec["name"])
    if module.split(".")[0] not in trusted:
        raise ValueError(f"the file names the constructor {spec['name']!r}, whose package is not trusted "
                         f"({', '.join(trusted)}); pass model= (the dense model, or a function that builds it), "
                         "or add the package to trusted_packages")
    kwargs = spec.get("kwargs") or {}
    if not isinstance(kwargs, Mapping):
        raise ValueError(f"constructor kwargs must be a mapping, got {type(kwargs).__name__}")
    _check_plain(kwargs, "constructor kwargs")
    try:
        fn = getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"constructor {spec['name']!r} cannot be found: {e}") from None
    model = fn(**kwargs)
    if not isinstance(model, nn.Module):
        raise ValueError(f"constructor {spec['name']!r} returned {type(model).__name__}, not an nn.Module")
    return model


def _resize(module: nn.Module, tensor_name: str, like: torch.Tensor) -> None:
    """Replace a parameter or buffer by an empty tensor shaped like ``like`` (same kind, grad flag, device)."""
    if tensor_name in module._parameters and module._parameters[tensor_name] is not None:
        old = module._parameters[tensor_name]
        module._parameters[tensor_name] = nn.Parameter(torch.empty(like.shape, dtype=like.dtype, device=old.device),
                                                       requires_grad=old.requires_grad)
    elif tensor_name in module._buffers and module._buffers[tensor_name] is not None:
        old = module._buffers[tensor_name]
        module._buffers[tensor_name] = torch.empty(like.shape, dtype=like.dtype, device=old.device)


def _check_document(doc: Any) -> None:
    if not isinstance(doc, Mapping) or doc.get("format") != FORMAT:
        raise ValueError(f"not a pruned model saved by save_pruned_model (expected format {FORMAT!r})")
    if doc.get("version") != VERSION:
        raise ValueError(f"pruned model format version {doc.get('version')!r} is not supported (expected {VERSION})")
    for key, kind in (("modules", Mapping), ("state_dict", Mapping)):
        if not isinstance(doc.get(key), kind):
            raise ValueError(f"pruned model file: {key!r} must be a mapping")
    if not all(isinstance(v, torch.Tensor) for v in doc["state_dict"].values()):
        raise ValueError("pruned model file: 'state_dict' must hold tensors only")


def restore_pruned_architecture(model: nn.Module, document: Mapping[str, Any]) -> nn.Module:
    """Narrow the dense ``model`` (in place) to the widths in ``document`` and load its weights.

    Raises:
        ValueError: the model is not the architecture that was pruned (a module
            missing or of another type, keys that do not match), naming it.
    """
    _check_document(document)
    for name, entry in document["modules"].items():
        try:
            m = model.get_submodule(name)
        except AttributeError:
            raise ValueError(f"the model has no module {name!r}; is it the architecture that was pruned?") from None
        if not isinstance(entry, Mapping) or entry.get("type") != type(m).__name__:
            raise ValueError(f"module {name!r} is a {type(m).__name__}, the file has a "
                             f"{entry.get('type') if isinstance(entry, Mapping) else entry!r}")
        attrs = entry.get("attributes", {})
        for a, v in attrs.items():
            if a not in _width_attributes(m) or not _is_int_attr(v):
                raise ValueError(f"module {name!r}: attribute {a!r} = {v!r} is not an allowed integer width")
            setattr(m, a, tuple(v) if isinstance(getattr(m, a, None), tuple) or isinstance(v, list) else v)
    state = document["state_dict"]
    own = model.state_dict(keep_vars=True)
    missing, extra = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    if missing or extra:
        raise ValueError(f"the model does not match the file: missing in the file {missing[:5]}, "
                         f"not in the model {extra[:5]}")
    for key, value in state.items():
        owner, _, tensor_name = key.rpartition(".")
        module = model.get_submodule(owner) if owner else model
        if tuple(own[key].shape) != tuple(value.shape) or own[key].dtype != value.dtype:
            _resize(module, tensor_name, value)
    model.load_state_dict(state, strict=True)
    return model


def load_pruned_model(f: Any, model: nn.Module | Callable[[], nn.Module] | None = None, *,
                      trusted_packages: tuple[str, ...] = TRUSTED_PACKAGES, map_location: Any = "cpu") -> nn.Module:
    """Load a model saved by :func:`save_pruned_model` (``torch.load(weights_only=True)`` underneath).

    Args:
        f: a path or a readable binary file.
        model: the dense model to narrow (modified in place), or a zero-argument
            function building it; None builds it from the file's constructor,
            if its package is in ``trusted_packages``.
        trusted_packages: top-level packages whose constructors a file may name.
        map_location: as for ``torch.load``.

    Returns:
        The pruned model, with the saved weights.

    Raises:
        ValueError: not such a file, an untrusted or missing constructor, or a
            model that is not the pruned architecture.
    """
    doc = torch.load(f, map_location=map_location, weights_only=True)
    _check_document(doc)
    if model is None:
        base = _build_from_spec(doc.get("constructor"), tuple(trusted_packages))
    elif isinstance(model, nn.Module):
        base = model
    elif callable(model):
        base = model()
        if not isinstance(base, nn.Module):
            raise TypeError(f"model() must return an nn.Module, got {type(base).__name__}")
    else:
        raise TypeError(f"model must be an nn.Module, a function building one, or None; got {type(model).__name__}")
    return restore_pruned_architecture(base, doc)
