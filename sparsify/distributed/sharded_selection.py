"""Exact masks for weights sharded by rows across ranks, without gathering the weights.

Each rank holds a contiguous range of rows (dim 0, the output channels) of
every weight, as FSDP / ZeRO shard parameters, and calls
:func:`sharded_masks` with its own rows. The result on every rank is exactly
its rows of what :meth:`sparsify.Pattern.get_masks` returns for the full
tensors, bit for bit: same counts, same thresholds, same tie breaks (lower
flat index of the 2-D view first, then layer order in global scope), same
per-layer min/max clamps (docs/design.md, rule 9), same monotone previous masks.

How: units (elements, ``NxM`` blocks, ``N:M`` groups) never cross a shard
boundary, so every rank scores its own units with the pattern's own methods.
The k-th lowest unit over all shards is then found with collectives on small
data only: a sample of the candidates is gathered to bracket the k-th value,
the counts below / inside the bracket are exchanged, the bracket shrinks
until its candidates are few enough to gather, and ties at the k-th value
are split by exchanging per-shard tie counts. The bytes moved depend on the
sample sizes, not on the size of the weights (the search itself is
:mod:`sparsify.distributed.sharded_cut`).

A block that would cross a shard boundary (``"4x1"`` on shards of 6 rows,
``"channelx1"`` on more than one non-empty shard) is a ``ValueError`` naming
the layer and the shard sizes. An error on one rank (a NaN score) is raised
on every rank, so no rank is left waiting in a collective.

Example:
    >>> import numpy as np
    >>> from sparsify.patterns import get_pattern
    >>> from sparsify.distributed import ThreadGroup
    >>> w = np.array([[5.0, 1.0], [2.0, 8.0], [3.0, 4.0], [7.0, 6.0]])
    >>> def rank(c):                      # rank c.rank holds rows [2 * rank, 2 * rank + 2)
    ...     shard = RowShard.chunk(w.shape, c.rank, c.world_size)
    ...     return sharded_masks(get_pattern("1x1"), {"w": w[shard.start:shard.stop]}, {"w": shard}, 0.5, c)["w"]
    >>> np.concatenate(ThreadGroup(2).run(rank)).astype(int).tolist()
    [[1, 0], [0, 1], [0, 0], [1, 1]]
    >>> get_pattern("1x1").get_masks({"w": w}, 0.5)["w"].astype(int).tolist()
    [[1, 0], [0, 1], [0, 0], [1, 1]]
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping

import numpy as np

from ..layout import view_shape
from ..patterns.base import Pattern
from ..selection.score_checks import NaNScoreError, check_finite
from .collective import Collective
from .row_shard import RowShard
from .sharded_cut import CutProblem, find_cuts
from .sharded_layer import ShardedLayer

__all__ = ["sharded_masks"]


def _digest(items: Any) -> int:
    raw = hashlib.sha256(json.dumps(items, sort_keys=True, default=str).encode()).digest()
    return int(np.frombuffer(raw[:8], dtype="<i8")[0])


def _block_rows(pattern: Pattern, name: str, shape2d: tuple[int, int]) -> tuple[int, int]:
    """Rows and columns of one unit of ``pattern`` on a 2-D view of ``shape2d`` (whole axes resolved)."""
    try:
        block = pattern.get_block_size_dict({name: np.broadcast_to(np.zeros((), np.float32), shape2d)})[name]
    except NotImplementedError:
        raise ValueError(f"pattern {pattern.pattern!r} (family {pattern.family!r}) does not say its block size "
                         "(get_block_size_dict), so it cannot be selected over shards") from None
    return int(block[0]), int(block[1])


def _crossing_error(pattern: Pattern, layer: ShardedLayer, shape2d: tuple[int, int]) -> str | None:
    br = layer.block_rows
    sizes = [b - a for a, b in zip(layer.starts, layer.stops)]
    if len(layer.shard.shape) == 1 and sum(1 for s in sizes if s) > 1:
        return (f"layer {layer.name!r} is 1-D: its 2-D view is one row, which cannot be split across shards "
                f"(rows per rank: {sizes})")
    bounds = sorted({a for a, b in zip(layer.starts, layer.stops) if b > a} |
                    {b for a, b in zip(layer.starts, layer.stops) if b > a})
    if br > 1 and any(x % br for x in bounds):
        return (f"layer {layer.name!r}: pattern {pattern.pattern!r} makes blocks of {br} rows of the 2-D view "
                f"{shape2d}, but the weight is sharded into rows per rank {sizes}, so a block would cross a shard "
                f"boundary; shard the rows in multiples of {br} (e.g. a number of ranks that divides "
                f"{shape2d[0] // br}), use a pattern whose blocks fit in a shard, or exclude the layer "
                "(excluded_op_names)")
    return None


def _tiling_error(layer: ShardedLayer) -> str | None:
    spans = sorted((a, b) for a, b in zip(layer.starts, layer.stops) if b > a)
    at = 0
    for a, b in spans:
        if a != at:
            break
        at = b
    else:
        if at == layer.shard.shape[0]:
            return None
    shown = [[a, b] for a, b in zip(layer.starts, layer.stops)]
    return (f"layer {layer.name!r}: the ranks' rows {shown} (per rank, [start, stop)) do not tile its "
            f"{layer.shard.shape[0]} rows exactly once")


# ----------------------------------------------------------------------------------------------
# errors raised on every rank
# ----------------------------------------------------------------------------------------------
def _raise_agreed(collective: Collective, flags: list[np.ndarray], local_msg: str | None,
                  global_errors: list[tuple[tuple[int, int], str]]) -> None:
    """Raise the first error (by key, then rank) on every rank; ``flags[r] = [has, key0, key1]``."""
    reported = [(tuple(int(x) for x in f[1:3]), r) for r, f in enumerate(flags) if f[0]]
    # a rank's own error (bad input) before a layout error of the same layer
    candidates = [(k, len(flags), m) for k, m in global_errors] + [(k, r, None) for k, r in reported]
    if not candidates:
        return
    key, rank, msg = min(candidates, key=lambda c: (c[0], c[1]))
    if rank < len(flags):                # a rank's own error: every rank fetches its message
        text = (local_msg or "").encode()
        parts = collective.allgather(np.frombuffer(text, dtype=np.uint8))
        msg = bytes(parts[rank].astype(np.uint8)).decode(errors="replace")
        if rank != collective.rank:
            msg = f"{msg} (raised on rank {rank})"
    raise ValueError(msg)

# ----------------------------------------------------------------------------------------------
# the public entry point
# ----------------------------------------------------------------------------------------------
def sharded_masks(pattern: Pattern, scores: Mapping[str, np.ndarray], shards: Mapping[str, RowShard],
                  target_sparsity_ratio: float, collective: Collective,
                  pre_masks: Mapping[str, np.ndarray] | None = None,
                  max_sparsity_ratio_per_layer: float | None = None, *,
                  sample_size: int | None = None) -> dict[str, np.ndarray]:
    """This rank's rows of ``pattern.get_masks`` over the full weights, bit for bit.

    Every rank calls it with the same layers in the same order (the order breaks
    cross-layer ties in global scope, as in the single-process core).

    Args:
        pattern: the pattern (its scope, clamps and block reduction apply).
        scores: this rank's rows of each layer's element scores, canonical layout,
            shape ``shards[name].local_shape`` (possibly zero rows).
        shards: which rows each score holds (:class:`RowShard`); together, the
            ranks' shards of a layer must tile its rows exactly once.
        target_sparsity_ratio: as in :meth:`sparsify.Pattern.get_masks`.
        collective: the process group (:class:`~sparsify.distributed.Collective`).
        pre_masks: this rank's rows of the previous masks (monotone pruning).
        max_sparsity_ratio_per_layer: overrides the pattern's setting.
        sample_size: candidates sampled per selection round (default: the layer's units / 2048,
            within [256, 8192]); candidates are gathered once at most 4x this many remain.
            Smaller moves fewer bytes per round and needs more rounds; the masks are the same.

    Returns:
        Boolean masks (True = kept) of this rank's rows, keyed like ``scores``.

    Raises:
        ValueError: on every rank, naming the layer: a block that would cross a
            shard boundary (with the shard sizes), shards that do not tile the
            rows, a pattern that does not fit, NaN scores, inputs of the wrong shape.
    """
    ratio = pattern.check_ratio(target_sparsity_ratio)
    if sample_size is not None and (isinstance(sample_size, bool) or not isinstance(sample_size, int)
                                    or sample_size < 1):
        raise ValueError(f"sample_size must be a positive integer or None, got {sample_size!r}")
    max_ratio = pattern.max_sparsity_ratio_per_layer if max_sparsity_ratio_per_layer is None \
        else float(max_sparsity_ratio_per_layer)
    glob = pattern.is_global
    missing = [n for n in scores if n not in shards]
    if missing:
        raise ValueError(f"shards lacks the layers {missing}; give a RowShard per layer")

    def key(phase: int, pos: int) -> tuple[int, int]:     # the error the single-process core raises first
        return (phase, pos) if glob else (pos, phase)

    # local checks and unit scores (errors are raised after the handshake, on every rank)
    layers, local_error = _local_layers(scores, shards, pre_masks, key)
    shapes2d, global_errors = _fit_layers(pattern, layers, key)
    digest = _digest([[l.name, list(l.shard.shape), l.score.dtype.str] for l in layers]
                     + [pattern.pattern, glob, repr(ratio), repr(max_ratio), int(collective.world_size)])
    prepare_ok = local_error is None and not global_errors
    if prepare_ok:                                            # local unit scores before the handshake
        local_error = _prepare_all(pattern, layers, glob, key)
    _handshake(pattern, layers, shapes2d, collective, digest, local_error, global_errors, key)
    if not prepare_ok:                                        # pragma: no cover - an error was raised above
        raise RuntimeError("sharded selection: unreachable")
    # how many units each layer prunes, then the exact cuts
    live = [l for l in layers if not l.skip and l.n_total]
    keeps: dict[str, np.ndarray] = {}
    if live:
        keeps = (_global_keeps if glob else _local_keeps)(pattern, live, ratio, max_ratio, collective, sample_size)
    return {layer.name: _layer_mask(pattern, layer, keeps) for layer in layers}


def _local_layers(scores: Mapping[str, np.ndarray], shards: Mapping[str, RowShard],
                  pre_masks: Mapping[str, np.ndarray] | None, key) -> tuple[list[ShardedLayer], Any]:
    """The layers as :class:`ShardedLayer` and the first local shape error as ``(key, message)`` (or None)."""
    layers: list[ShardedLayer] = []
    local_error = None
    for pos, (name, score) in enumerate(scores.items()):
        shard = shards[name]
        if not isinstance(shard, RowShard):
            raise TypeError(f"shards[{name!r}] must be a RowShard, got {type(shard).__name__}")
        score = np.asarray(score)
        pre = None if pre_masks is None else pre_masks.get(name)
        layer = ShardedLayer(name, pos, shard, score, None if pre is None else np.asarray(pre))
        layers.append(layer)
        if local_error is not None:
            continue
        if score.shape != shard.local_shape:
            local_error = (key(0, pos), f"scores[{name!r}] has shape {score.shape}, but rows "
                                        f"[{shard.start}, {shard.stop}) of shape {shard.shape} have shape "
                                        f"{shard.local_shape}")
        elif layer.pre is not None and layer.pre.shape != shard.local_shape:
            local_error = (key(0, pos), f"pre_masks[{name!r}] has shape {layer.pre.shape}, but the local rows "
                                        f"have shape {shard.local_shape}")
    return layers, local_error


def _fit_layers(pattern: Pattern, layers: list[ShardedLayer], key) -> tuple[dict[str, tuple[int, int]], list]:
    """Each layer's 2-D view and block geometry (or skip); the errors of layers the pattern does not fit."""
    shapes2d: dict[str, tuple[int, int]] = {}
    errors: list[tuple[tuple[int, int], str]] = []
    for layer in layers:
        shape2d = view_shape(layer.shard.shape, layer.name)
        shapes2d[layer.name] = shape2d
        reason = pattern.fits(shape2d)
        if reason is not None:
            if pattern.skip_incompatible_layers:
                layer.skip = True
                continue
            errors.append((key(0, layer.pos), f"layer {layer.name!r} with 2-D view {shape2d} does not fit "
                           f"pattern {pattern.pattern!r}: {reason} (set skip_incompatible_layers=True to "
                           "leave such layers dense)"))
            continue
        br, bc = _block_rows(pattern, layer.name, shape2d)
        layer.block_rows = br
        layer.units_per_row_block = shape2d[1] // bc
        layer.n_total = shape2d[0] // br * layer.units_per_row_block
    return shapes2d, errors


def _handshake(pattern: Pattern, layers: list[ShardedLayer], shapes2d: Mapping[str, tuple[int, int]],
               collective: Collective, digest: int, local_error: Any, global_errors: list, key) -> None:
    """Everyone's rows (and unit dtypes), whether anyone failed locally; raises the agreed error on every rank."""
    hand = np.array([0, 0, 0, digest] + [x for l in layers for x in
                                         (l.shard.start, l.shard.stop, 0 if l.units is None else ord(l.units.dtype.char))],
                    dtype=np.int64)
    if local_error is not None:
        hand[0:3] = (1, *local_error[0])
    gathered = collective.allgather(hand)
    if len({int(g[3]) for g in gathered}) != 1 or len({g.size for g in gathered}) != 1:
        raise ValueError("the ranks called sharded_masks with different layers, shapes, dtypes or settings; "
                         "every rank must pass the same layers in the same order")
    for layer in layers:
        layer.starts = [int(g[4 + 3 * layer.pos]) for g in gathered]
        layer.stops = [int(g[5 + 3 * layer.pos]) for g in gathered]
        if layer.skip:
            continue
        if layer.units is None:                               # no local units: decode the others' with theirs
            codes = [int(g[6 + 3 * layer.pos]) for g in gathered if int(g[6 + 3 * layer.pos])]
            layer.units = np.empty(0, dtype=np.dtype(chr(codes[0])) if codes else np.float64)
        msg = _tiling_error(layer) or _crossing_error(pattern, layer, shapes2d[layer.name])
        if msg is not None:
            global_errors.append((key(0, layer.pos), msg))
    _raise_agreed(collective, [g[:3] for g in gathered], None if local_error is None else local_error[1],
                  global_errors)


def _layer_mask(pattern: Pattern, layer: ShardedLayer, keeps: Mapping[str, np.ndarray]) -> np.ndarray:
    """This rank's rows of ``layer``'s mask from its kept units (dense when skipped or without local units)."""
    if layer.skip:
        return np.ones(layer.score.shape, dtype=bool) if layer.pre is None else np.asarray(layer.pre, dtype=bool).copy()
    if layer.prepared is None:                                # no local units (no rows, or an empty weight)
        return np.ones(layer.score.shape, dtype=bool)
    units_shape = layer.prepared[1].shape
    return pattern.finish_units(layer.score, layer.prepared, keeps[layer.name].reshape(units_shape))


def _prepare_all(pattern: Pattern, layers: list[ShardedLayer], glob: bool, key) -> tuple[tuple[int, int], str] | None:
    """Local unit scores of every layer; the first error (in the core's order) as ``(key, message)``."""
    first = None
    for layer in layers:
        if layer.skip:
            continue
        if layer.n_total == 0 or layer.shard.rows == 0:
            continue                             # no local units (dtype taken from the handshake)
        if layer.shard.start % layer.block_rows or layer.shard.stop % layer.block_rows:
            continue                             # crosses a block: reported after the handshake
        try:
            prepared = pattern.prepare_units(layer.name, layer.score, layer.pre, check_nan=glob)
        except ValueError as e:
            err = (key(1, layer.pos), str(e))
            first = err if first is None or err[0] < first[0] else first
            if not glob:
                return first
            continue
        if prepared is None:                     # pragma: no cover - the full shape fits, so the rows do
            raise RuntimeError(f"layer {layer.name!r}: rows do not fit the pattern")
        layer.prepared = prepared
        layer.units = prepared[1].reshape(-1)
        try:
            check_finite(layer.units, layer.name)
        except NaNScoreError as e:
            err = (key(2, layer.pos), str(pattern.unit_nan_error(layer.name, prepared[0], e)))
            first = err if first is None or err[0] < first[0] else first
            if not glob:
                return first
    return first


def _local_keeps(pattern: Pattern, layers: list[ShardedLayer], ratio: float, max_ratio: float,
                 collective: Collective, sample_size: int | None) -> dict[str, np.ndarray]:
    world = collective.world_size
    problems = []
    for layer in layers:
        lo, hi = pattern.unit_limits(layer.n_total, max_ratio)
        k = min(max(pattern.units_for_ratio(ratio, layer.n_total), lo), hi)
        problems.append(CutProblem([layer], k, world, sample_size))
    find_cuts(collective, problems)
    return {p.members[0].name: p.keep(0, collective.rank) for p in problems}


def _global_keeps(pattern: Pattern, layers: list[ShardedLayer], ratio: float, max_ratio: float,
                  collective: Collective, sample_size: int | None) -> dict[str, np.ndarray]:
    """Mirror of :func:`sparsify.patterns.allocation.allocate_pruned_units` with sharded cuts."""
    world, rank = collective.world_size, collective.rank
    limits = {l.name: pattern.unit_limits(l.n_total, max_ratio) for l in layers}
    total = pattern.units_for_ratio(ratio, sum(l.n_total for l in layers))
    total = min(max(total, sum(lo for lo, _ in limits.values())), sum(hi for _, hi in limits.values()))
    fixed: dict[str, int] = {}
    cut: CutProblem | None = None
    own: dict[str, int] = {}
    for _ in range(len(layers) + 1):
        free = [l for l in layers if l.name not in fixed]
        budget = total - sum(fixed.values())
        if not free:
            own = dict(fixed)
            break
        problem = CutProblem(free, min(max(budget, 0), sum(l.n_total for l in free)), world, sample_size)
        find_cuts(collective, [problem])
        counts = {l.name: int(c) for l, c in zip(free, problem.pruned)}
        clipped = {n: min(max(c, limits[n][0]), limits[n][1]) for n, c in counts.items()}
        excess = sum(clipped.values()) - budget
        if excess == 0:
            cut = problem
            own = {**fixed, **{n: c for n, c in clipped.items() if c != counts[n]}}
            break
        for n in counts:
            if excess > 0 and counts[n] < limits[n][0]:
                fixed[n] = limits[n][0]
            elif excess < 0 and counts[n] > limits[n][1]:
                fixed[n] = limits[n][1]
    else:                                                     # pragma: no cover - as in the core
        raise RuntimeError("global allocation did not converge")
    keeps: dict[str, np.ndarray] = {}
    if cut is not None:
        for j, l in enumerate(cut.members):
            if l.name not in own:
                keeps[l.name] = cut.keep(j, rank)
    by_name = {l.name: l for l in layers}
    problems = [CutProblem([by_name[n]], k, world, sample_size) for n, k in own.items()]
    find_cuts(collective, problems)
    keeps.update({p.members[0].name: p.keep(0, rank) for p in problems})
    return keeps
