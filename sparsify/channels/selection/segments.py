"""Segments from layer channel sets, and global labels split back into groups.

Example:
    >>> segments_from_layer_channels(6, [[0, 1, 2, 3], [4, 5], range(6)]).tolist()
    [0, 0, 0, 0, 1, 1]
"""
from __future__ import annotations

from numbers import Integral
from typing import Dict, List, Optional, Sequence

import numpy as np

__all__ = ["segments_from_layer_channels", "split_labels_by_group"]


def segments_from_layer_channels(n_channels: int, layer_channels: Sequence[Sequence[int]]) -> np.ndarray:
    """Segment id of every channel of a group, from the channel sets of the layers it touches.

    ``layer_channels[j]`` is the set of group channels that make up *all* of
    some layer's channels (a concat input, a split output). Pruning all of one
    set would empty that layer. Segments are the atoms of these sets (channels
    that lie in the same sets), numbered by first channel, so keeping one
    channel per segment keeps one in every layer. Sets covering the whole group
    (or nothing) add no constraint.

    Example:
        >>> segments_from_layer_channels(6, [[0, 1, 2, 3], [4, 5], range(6)]).tolist()
        [0, 0, 0, 0, 1, 1]
        >>> segments_from_layer_channels(4, [[0, 1], [1, 2, 3]]).tolist()
        [0, 1, 2, 2]
    """
    sets = [frozenset(int(c) for c in s if 0 <= int(c) < n_channels) for s in layer_channels]
    sets = [s for s in sets if 0 < len(s) < n_channels]
    ids: Dict[tuple, int] = {}
    return np.asarray([ids.setdefault(tuple(j for j, s in enumerate(sets) if c in s), len(ids))
                       for c in range(n_channels)], dtype=np.int64)


def split_labels_by_group(labels: Sequence[int], group_offsets: Sequence[int], group_sizes: Sequence[int],
                          prunable: Sequence[bool],
                          group_segments: Optional[Sequence[np.ndarray]] = None) -> Dict[int, np.ndarray]:
    """Turn global labels into ``{group index: sorted local channel indices}``.

    Group ``g`` owns labels ``offsets[g] .. offsets[g] + sizes[g] - 1``.
    ``group_segments`` (one array per group, all groups) gives each channel's
    segment; no segment may lose all its channels.

    Raises:
        ValueError: a label that is not an integer, does not exist, is repeated,
            belongs to an unprunable group, or would leave a group or a segment
            with no channel.

    Example:
        >>> split_labels_by_group([4, 0, 5], [0, 3], [3, 4], [True, True])
        {0: array([0]), 1: array([1, 2])}
        >>> segments = [np.zeros(3, int), np.array([0, 0, 1, 1])]
        >>> split_labels_by_group([3, 4], [0, 3], [3, 4], [True, True], segments)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: labels would prune all 2 channels of segment 0 (labels 3..4) of group 1; at least one ...
    """
    n_total = int(sum(group_sizes))
    values: List[int] = []
    for label in labels:
        if isinstance(label, (bool, np.bool_)) or not isinstance(label, (Integral, np.integer)):
            raise ValueError(f"labels must be integers, got {label!r}")
        if not 0 <= int(label) < n_total:
            raise ValueError(f"label {label} does not exist: labels are 0..{n_total - 1}")
        values.append(int(label))
    arr = np.asarray(values, dtype=np.int64)
    uniq, counts = np.unique(arr, return_counts=True)
    if (counts > 1).any():
        raise ValueError(f"labels are repeated: {uniq[counts > 1].tolist()}")
    offsets = np.asarray(group_offsets, dtype=np.int64)
    group_of = np.searchsorted(offsets, arr, side="right") - 1
    out: Dict[int, np.ndarray] = {}
    for g in np.unique(group_of).tolist():
        local = np.sort(arr[group_of == g] - offsets[g])
        if not prunable[g]:
            raise ValueError(f"labels {sorted((local + offsets[g]).tolist())} belong to group {g}, which is not "
                             "prunable")
        if local.size >= group_sizes[g]:
            raise ValueError(f"labels would prune all {group_sizes[g]} channels of group {g}; "
                             "at least one channel must stay")
        if group_segments is not None:
            seg = np.asarray(group_segments[g], dtype=np.int64)
            ids, sizes = np.unique(seg, return_counts=True)
            for s, size in zip(ids.tolist(), sizes.tolist()):
                if int((seg[local] == s).sum()) >= size:
                    where = np.flatnonzero(seg == s) + offsets[g]
                    span = f"{where[0]}..{where[-1]}" if where[-1] - where[0] + 1 == where.size else where.tolist()
                    raise ValueError(f"labels would prune all {size} channels of segment {s} (labels "
                                     f"{span}) of group {g}; at least one channel of each "
                                     "segment (source layer of a concatenation) must stay")
        out[int(g)] = local
    return dict(sorted(out.items()))
