"""sparsify: exact, fast sparsity while training — the framework-neutral core.

NumPy only: the core never imports TensorFlow, PyTorch or an adapter. The
adapters ``sparsify_tf`` and ``sparsify_torch`` convert weights to the
canonical layout, follow :class:`PruningProtocol` (which calls
:class:`PruningEngine`) and write masks back. The application (``sparsify``
command, demo, report, plots) lives in :mod:`sparsify.cli`, the one place that
imports the adapters.

Example:
    >>> import numpy as np, sparsify
    >>> cfg = sparsify.PruningConfig(target_sparsity=0.5, pattern="2:4", end_step=0)
    >>> sparsify.PruningEngine(cfg).compute_masks({"w": np.array([[4.0, 1.0, 3.0, 2.0]])}, step=0)["w"].tolist()
    [[True, False, True, False]]
"""
from .config import PruningConfig
from .criteria import get_criterion, magnitude, register_criterion, registered_criteria, snip, snip_momentum, wanda
from .engine import PruningEngine, select_names
from .protocol import MaskUpdate, PruningProtocol, sparsity_figures
from .adapter import ActivationReader, GradientReader, MaskWriter, WeightReader, collect_reads
from .layout import canonical_to_tf, from_2d, tf_to_canonical, to_2d
from .patterns import (Pattern, PatternNInM, PatternNxM, get_pattern, pattern_examples, register_pattern,
                       registered_patterns)
from .schedules import (ConstantSchedule, DecaySchedule, GradualSchedule, get_schedule, register_schedule,
                        registered_schedules)
from .selection.lowest_k import exact_prune_count, lowest_k_mask
from .target_check import TargetNotReachedWarning

from typing import TYPE_CHECKING
if TYPE_CHECKING:          # loaded on first use (``__getattr__`` below); named here for readers and tools
    from .distillation import DistillationConfig
    from .nm_permutation import nm_channel_permutation, nm_kept_magnitude
    from .runtime_presets import RUNTIME_PRESETS, runtime_config, runtime_layers

__version__ = "0.1.0"

__all__ = [
    "PruningConfig", "DistillationConfig", "PruningEngine", "select_names", "PruningProtocol", "MaskUpdate",
    "sparsity_figures",
    "WeightReader", "GradientReader", "ActivationReader", "MaskWriter", "collect_reads",
    "register_criterion", "get_criterion", "registered_criteria", "wanda",
    "GradualSchedule", "ConstantSchedule", "DecaySchedule", "get_schedule", "register_schedule",
    "registered_schedules",
    "Pattern", "PatternNxM", "PatternNInM", "get_pattern", "register_pattern", "registered_patterns",
    "pattern_examples",
    "exact_prune_count", "lowest_k_mask", "magnitude", "snip", "snip_momentum",
    "to_2d", "from_2d", "tf_to_canonical", "canonical_to_tf", "__version__",
    "nm_channel_permutation", "nm_kept_magnitude", "TargetNotReachedWarning",
    "runtime_config", "runtime_layers", "RUNTIME_PRESETS",
]

#: names loaded on first use (PEP 562), so that ``import sparsify`` stays light
_LAZY = ("DistillationConfig", "nm_channel_permutation", "nm_kept_magnitude", "RUNTIME_PRESETS", "runtime_config", "runtime_layers")


def __getattr__(name: str):
    if name == "DistillationConfig":
        from . import distillation as module
    elif name in ("nm_channel_permutation", "nm_kept_magnitude"):
        from . import nm_permutation as module
    elif name in ("RUNTIME_PRESETS", "runtime_config", "runtime_layers"):
        from . import runtime_presets as module
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value = getattr(module, name)
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
