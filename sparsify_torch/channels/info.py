"""``ModelPruningInfo``: what calibration learned about a model's channels.

Channel *labels* are global channel indices: group ``g`` owns labels
``offset[g] .. offset[g] + n_channels[g] - 1`` (unprunable groups included, so
a label never changes meaning). Criteria are first-order Taylor importances
(higher = more important) and exist for prunable groups only.

Example:
    >>> import torch
    >>> from sparsify_torch.channels import PruningCalibrator
    >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Conv2d(4, 2, 1))
    >>> with PruningCalibrator(net) as calibrator:
    ...     net(torch.randn(2, 3, 8, 8)).sum().backward()
    >>> info = calibrator.pruning_info
    >>> info.n_prunable_groups, info.group_labels[0].tolist()
    (1, [0, 1, 2, 3])
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from sparsify.channel_selection import split_labels_by_group

from .graph import ChannelGroup

__all__ = ["ModelPruningInfo"]


class ModelPruningInfo:
    """Channel groups, labels and importance criteria of one calibrated model.

    Args:
        groups: every channel group found by the dependency analysis.
        criteria: ``{group index: importance array}`` for the prunable groups.
        entry_point: the traced method (``"forward"``, ``"backbone.forward"``, ...).
        example_inputs: ``(args, kwargs)`` the entry point was traced with.
        n_steps: number of calibration forward passes the criteria come from.
    """

    def __init__(self, groups: Sequence[ChannelGroup], criteria: Dict[int, np.ndarray], entry_point: str,
                 example_inputs: Tuple[Tuple[Any, ...], Dict[str, Any]], n_steps: int = 0) -> None:
        self.groups: List[ChannelGroup] = list(groups)
        self.entry_point = entry_point
        self.example_inputs = example_inputs
        self.n_steps = int(n_steps)
        sizes = [g.n_channels for g in self.groups]
        self.group_offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if sizes \
            else np.zeros(0, np.int64)
        self._criteria = {int(k): np.asarray(v, dtype=np.float64) for k, v in criteria.items()}
        self._prunable_ids = [i for i, g in enumerate(self.groups) if g.prunable]
        for i in self._prunable_ids:
            if i not in self._criteria or self._criteria[i].shape != (self.groups[i].n_channels,):
                raise ValueError(f"criteria for prunable group {i} must have shape ({self.groups[i].n_channels},)")

    # --- the protocol sparsify.channel_selection works with -----------------------------------------
    @property
    def group_labels(self) -> List[np.ndarray]:
        """Labels of every prunable group, in group order."""
        return [self.group_offsets[i] + np.arange(self.groups[i].n_channels) for i in self._prunable_ids]

    @property
    def group_criteria(self) -> List[np.ndarray]:
        """Importance of every channel of every prunable group (same order as ``group_labels``)."""
        return [self._criteria[i].copy() for i in self._prunable_ids]

    @property
    def group_segments(self) -> List[np.ndarray]:
        """Segment (source layer of a concatenation) of every channel of every prunable group.

        Selection keeps at least one channel per segment so no layer is emptied.
        """
        return [np.asarray(self.groups[i].segments, dtype=np.int64).copy() for i in self._prunable_ids]

    # --- summaries ----------------------------------------------------------------------------------
    @property
    def n_groups(self) -> int:
        """Number of channel groups, prunable or not."""
        return len(self.groups)

    @property
    def n_prunable_groups(self) -> int:
        """Number of groups whose channels may be pruned."""
        return len(self._prunable_ids)

    @property
    def prunable_group_indices(self) -> List[int]:
        """Indices (into ``groups``) of the prunable groups."""
        return list(self._prunable_ids)

    @property
    def n_labels(self) -> int:
        """Total number of channel labels."""
        return int(sum(g.n_channels for g in self.groups))

    @property
    def n_prunable_labels(self) -> int:
        """Number of labels in prunable groups."""
        return int(sum(self.groups[i].n_channels for i in self._prunable_ids))

    def split_labels(self, labels: Sequence[int]) -> Dict[int, np.ndarray]:
        """``{group index: local channel indices}``; ValueError for bad labels (see core)."""
        return split_labels_by_group(list(labels), self.group_offsets.tolist(),
                                     [g.n_channels for g in self.groups], [g.prunable for g in self.groups],
                                     [g.segments for g in self.groups])

    def summary(self, level: int = 0) -> str:
        """Human-readable description.

        Args:
            level: 0 = totals, 1 = plus one line per group, 2 = plus member layers
                and criterion statistics of each group.

        Raises:
            ValueError: ``level`` not in {0, 1, 2}.
        """
        if isinstance(level, bool) or level not in (0, 1, 2):
            raise ValueError(f"level must be 0, 1 or 2, got {level!r}")
        lines = [f"ModelPruningInfo(entry_point={self.entry_point!r}): {self.n_groups} groups, "
                 f"{self.n_prunable_groups} prunable, {self.n_labels} labels, {self.n_prunable_labels} prunable "
                 f"labels, {self.n_steps} calibration steps"]
        if level >= 1:
            for i, g in enumerate(self.groups):
                first = int(self.group_offsets[i])
                state = "prunable" if g.prunable else f"unprunable: {g.reason}"
                lines.append(f"  group {i:3d} {g.root_name:40s} channels={g.n_channels:5d} "
                             f"labels={first}..{first + g.n_channels - 1} {state}")
                if level >= 2:
                    lines.append(f"      members: {', '.join(g.members)}")
                    if g.segment_sources:
                        parts = []
                        for s, source in enumerate(g.segment_sources):
                            where = np.flatnonzero(np.asarray(g.segments) == s) + first
                            parts.append(f"{where.min()}..{where.max()} <- {source}")
                        lines.append(f"      segments: {'; '.join(parts)}")
                    if g.prunable:
                        c = self._criteria[i]
                        lines.append(f"      criteria: min={c.min():.4g} mean={c.mean():.4g} max={c.max():.4g}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary(0)
