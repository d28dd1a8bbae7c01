"""A battery of values that decide masks, hashed: run in-process and in a subprocess with SIMD off.

``python tests/sparsify/machine_battery.py`` prints JSON: the NumPy dispatch
targets enabled in this process and one SHA-256 per case. Inputs come from
``np.random.default_rng(...).random/integers`` (integer-based generators) so
the inputs themselves never depend on the C library.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sparsify import PruningEngine, get_pattern                                        # noqa: E402
from sparsify.channels.selection import (ChannelScores, cumulative_pruning_cost,        # noqa: E402
                                        pruning_order, uniform_pruning_labels)
from sparsify.criteria import snip_momentum                                            # noqa: E402
from sparsify.schedules import ScheduleSettings, build_schedule, registered_schedules  # noqa: E402
from sparsify.selection.lowest_k import lowest_k_keep                                           # noqa: E402

__all__ = ["dispatch_targets_on", "schedule_digests", "mask_digests", "all_digests"]

#: pattern names covering every family and every code path (block reductions, channel blocks, M > 8)
PATTERNS = ("1x1", "4x1", "1x4", "2x2", "channelx1", "1xchannel", "channelx2", "2xchannel", "2:4", "1:4", "4:8",
            "2:16")
#: (name, shape): conv, linear and large layers (> 2**15 units: the sampled-bracket path; > 2**18: several chunks)
LAYERS = (("conv", (32, 16, 3, 3)), ("fc", (64, 48)), ("big", (1024, 768)), ("wide", (256, 1024)))


def dispatch_targets_on() -> list[str]:
    """NumPy's SIMD dispatch targets that this process uses (e.g. AVX512_SKX, X86_V4 on x86-64)."""
    core = np._core._multiarray_umath
    return [name for name in core.__cpu_dispatch__ if core.__cpu_features__.get(name)]


def _digest(*arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def schedule_digests() -> dict[str, str]:
    """Every registered schedule kind over many steps, several settings (fractional exponents included)."""
    out = {}
    settings = [ScheduleSettings(0.0, 0.9, 0, 1000, 10), ScheduleSettings(0.05, 0.85, 3, 997, 7, 2.5),
                ScheduleSettings(0.1, 0.98, 100, 100_000, 1, 0.7), ScheduleSettings(0.3, 0.5, 5, 64, 0, 3.0)]
    for kind in registered_schedules():
        for i, s in enumerate(settings):
            sched = build_schedule(kind, s)
            steps = np.unique(np.concatenate([np.arange(0, min(s.end_step, 3000) + 5),
                                              np.linspace(0, s.end_step + 10, 2001).astype(np.int64)]))
            values = sched.sparsity(steps)
            scalars = np.array([sched.sparsity(int(t)) for t in steps[::97]])
            out[f"schedule/{kind}/{i}"] = _digest(values, scalars, sched.last_update_step(steps))
    return out


def _scores(seed: int, shape, dtype, ties: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if ties:
        return rng.integers(0, 7, size=shape).astype(dtype)
    return (rng.random(shape) * 3.0).astype(dtype)


def mask_digests() -> dict[str, str]:
    """Masks and unit scores of every pattern family: local and global, ties, dtypes, large layers, inf."""
    out = {}
    for dtype in (np.float32, np.float64, np.float16):
        for ties in (False, True):
            layers = {name: _scores(7 + i, shape, dtype, ties) for i, (name, shape) in enumerate(LAYERS)}
            layers["conv"][0, :2] = np.inf                                  # +inf is a legal score
            for pattern in PATTERNS:
                for scope in ("local", "global"):
                    p = get_pattern({"pattern": pattern, "pruning_scope": scope, "skip_incompatible_layers": True,
                                     "max_sparsity_ratio_per_layer": 0.9})
                    ratio = min(0.7, p.max_ratio)
                    first = p.get_masks(layers, ratio * 0.5)
                    second = p.get_masks({n: v[::-1].copy() for n, v in layers.items()}, ratio, first)
                    key = f"masks/{np.dtype(dtype).name}/{'ties' if ties else 'random'}/{pattern}/{scope}"
                    out[key] = _digest(*first.values(), *second.values())
                units = [get_pattern(pattern).unit_scores(layers[n].reshape(layers[n].shape[0], -1))[0]
                         for n in ("fc", "big") if get_pattern(pattern).fits(layers[n].reshape(
                             layers[n].shape[0], -1).shape) is None]
                out[f"units/{np.dtype(dtype).name}/{'ties' if ties else 'random'}/{pattern}"] = _digest(*units)
    for reduce in ("mean", "max"):
        p = get_pattern({"pattern": "4x1", "block_score_reduce": reduce, "pruning_scope": "global"})
        layers = {name: _scores(3, shape, np.float32, False) for name, shape in LAYERS}
        out[f"masks/reduce/{reduce}"] = _digest(*p.get_masks(layers, 0.6).values())
    erk = get_pattern({"pattern": "1x1", "pruning_scope": "erk"})
    layers = {name: _scores(4, shape, np.float32, False) for name, shape in LAYERS}
    out["masks/erk"] = _digest(*[m for r in (0.3, 0.77, 0.95) for m in erk.get_masks(layers, r).values()])
    flat = _scores(11, (3_000_000,), np.float32, False)
    out["kernel/lowest_k_keep"] = _digest(lowest_k_keep(flat, 1_234_567), lowest_k_keep(flat.astype(np.float64), 7))
    w = _scores(5, (128, 256), np.float32, False) - 1.5
    g = _scores(6, (128, 256), np.float32, False) - 1.5
    momentum = snip_momentum(snip_momentum(None, w, g), w * 0.5, g * 2.0)
    out["criteria/snip_momentum"] = _digest(momentum, get_pattern("2:4").get_mask_single(momentum, 0.5))
    engine = PruningEngine({"target_sparsity": 0.9, "end_step": 997, "pruning_frequency": 7, "exponent": 2.5,
                            "pattern": "4x1", "pruning_scope": "global"})
    targets = np.array([engine.target_sparsity(t) for t in range(0, 1000, 3)])
    out["engine/targets"] = _digest(targets, *engine.compute_masks({n: _scores(1, s, np.float32, False) - 1.5
                                                                   for n, s in LAYERS}, step=500).values())
    crit = [_scores(20 + i, (n,), np.float64, i % 2 == 0) for i, n in enumerate((64, 256, 37, 1000))]
    labels, start = [], 0
    for c in crit:
        labels.append(np.arange(start, start + c.size))
        start += c.size
    info = ChannelScores(labels, crit, [np.arange(c.size) % 3 for c in crit])
    out["channels/selection"] = _digest(np.array(uniform_pruning_labels(info, 0.6)),
                                        *[pruning_order(c, np.arange(c.size) % 3) for c in crit],
                                        *[cumulative_pruning_cost(c) for c in crit])
    return out


def all_digests() -> dict[str, str]:
    """Schedule and mask digests together."""
    return {**schedule_digests(), **mask_digests()}


if __name__ == "__main__":
    print(json.dumps({"dispatch_targets_on": dispatch_targets_on(), "digests": all_digests()}))
