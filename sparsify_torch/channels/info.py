"""``ModelPruningInfo``: what calibration learned about a model's channels.

Channel *labels* are global indices of the units selection removes: group
``g`` owns labels ``offset[g] .. offset[g] + n_labels[g] - 1`` (unprunable
groups included, so a label never changes meaning). One label is one channel
of the group's root layer, or several channels that can only go together (the
same position of every block of a grouped convolution: ``group.width`` root
channels per label). Criteria are first-order Taylor importances (higher =
more important) and exist for prunable groups only.

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

import warnings
from collections import Counter
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from sparsify.channels.selection import split_labels_by_group

from .graph import ChannelGroup

__all__ = ["ModelPruningInfo", "OUTPUT_REASON"]

#: reason of groups whose channels are model outputs (never prunable, not counted as "left unpruned")
OUTPUT_REASON = "channels reach the traced output"


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
        sizes = [g.n_labels for g in self.groups]
        self.group_offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if sizes \
            else np.zeros(0, np.int64)
        self._criteria = {int(k): np.asarray(v, dtype=np.float64) for k, v in criteria.items()}
        self._prunable_ids = [i for i, g in enumerate(self.groups) if g.prunable]
        for i in self._prunable_ids:
            if i not in self._criteria or self._criteria[i].shape != (self.groups[i].n_labels,):
                raise ValueError(f"criteria for prunable group {i} must have shape ({self.groups[i].n_labels},)")
            bad = ~np.isfinite(self._criteria[i])
            if bad.any():
                first = int(self.group_offsets[i] + np.flatnonzero(bad)[0])
                raise ValueError(f"channel importance of group {i} (root {self.groups[i].root_name!r}) is "
                                 f"{self._criteria[i][bad][0]} for {int(bad.sum())} of its "
                                 f"{self.groups[i].n_labels} labels (first: label {first}): the calibration loss "
                                 "or its gradient was not finite; check loss_function and the calibration data")
        #: set by ``prune_model``: labels removed last, and the fraction of channels that makes
        self.pruned_labels: Optional[List[int]] = None
        self.achieved_ratio: Optional[float] = None
        self.asked_ratio: Optional[float] = None

    # --- the protocol sparsify.channels.selection works with -----------------------------------------
    @property
    def group_labels(self) -> List[np.ndarray]:
        """Labels of every prunable group, in group order."""
        return [self.group_offsets[i] + np.arange(self.groups[i].n_labels) for i in self._prunable_ids]

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
        return int(sum(g.n_labels for g in self.groups))

    @property
    def n_prunable_labels(self) -> int:
        """Number of labels in prunable groups."""
        return int(sum(self.groups[i].n_labels for i in self._prunable_ids))

    @property
    def n_inner_labels(self) -> int:
        """Labels of every group except those whose channels are model outputs (what ``pruning_ratio`` is of)."""
        return int(sum(g.n_labels for g in self.groups if g.reason != OUTPUT_REASON))

    def split_labels(self, labels: Sequence[int]) -> Dict[int, np.ndarray]:
        """``{group index: local label indices}``; ValueError for bad labels (see core)."""
        return split_labels_by_group(list(labels), self.group_offsets.tolist(),
                                     [g.n_labels for g in self.groups], [g.prunable for g in self.groups],
                                     [g.segments for g in self.groups])

    def mark_unprunable(self, groups: Sequence[int], reason: str) -> None:
        """Leave ``groups`` out of every later selection, with ``reason`` (labels keep their meaning)."""
        for g in groups:
            self.groups[int(g)].prunable = False
            self.groups[int(g)].reason = reason
            self._criteria.pop(int(g), None)
        self._prunable_ids = [i for i, g in enumerate(self.groups) if g.prunable]

    def unpruned_groups(self) -> List[int]:
        """Groups of several labels left unpruned for a reason other than being model outputs, in group order."""
        return [i for i, g in enumerate(self.groups) if not g.prunable and g.reason != OUTPUT_REASON
                and g.n_labels > 1]

    def unpruned_summary(self) -> str:
        """One line: how many groups (and labels) cannot be pruned, and why; "" when all can.

        Example: ``left unpruned: 3 groups (96 labels): split of channels with size 64 stored in the
        model in 'stages.0' (2 groups); only 1 channel (1 group)``.
        """
        ids = self.unpruned_groups()
        if not ids:
            return ""
        counts = Counter(self.groups[i].reason for i in ids)
        parts = [f"{reason} ({n} group{'s' if n > 1 else ''})" for reason, n in counts.most_common()]
        n_labels = sum(self.groups[i].n_labels for i in ids)
        return f"left unpruned: {len(ids)} groups ({n_labels} labels): " + "; ".join(parts)

    def record_pruning(self, labels: Sequence[int], asked_ratio: Optional[float] = None) -> None:
        """Remember what ``prune_model`` removed; warn when ``asked_ratio`` of the channels was not reached.

        The achieved ratio is the fraction of labels removed among all labels but
        those of output groups; a uniform ``pruning_ratio`` can only reach it on
        the prunable groups. A shortfall of more than 0.05 is reported with the
        reasons groups were left unpruned.
        """
        self.pruned_labels = sorted(int(x) for x in labels)
        inner = self.n_inner_labels
        self.achieved_ratio = len(self.pruned_labels) / inner if inner else 0.0
        self.asked_ratio = None if asked_ratio is None else float(asked_ratio)
        if self.asked_ratio is not None and self.achieved_ratio < self.asked_ratio - 0.05:
            why = self.unpruned_summary() or "the prunable groups are too small to lose that many channels"
            warnings.warn(f"pruning_ratio={self.asked_ratio:g} cannot be reached: {self.achieved_ratio:.3f} of "
                          f"the {inner} channel labels were pruned ({self.n_prunable_groups} of {self.n_groups} "
                          f"groups prunable); {why}", UserWarning, stacklevel=3)

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
        left = self.unpruned_summary()
        if left:
            lines.append("  " + left)
        if self.achieved_ratio is not None:
            asked = "" if self.asked_ratio is None else f" (asked {self.asked_ratio:g})"
            lines.append(f"  pruned: {len(self.pruned_labels or [])} of {self.n_inner_labels} labels, ratio "
                         f"{self.achieved_ratio:.3f}{asked}")
        if level >= 1:
            for i, g in enumerate(self.groups):
                first = int(self.group_offsets[i])
                state = "prunable" if g.prunable else f"unprunable: {g.reason}"
                width = f" x{g.width}" if g.width > 1 else ""
                lines.append(f"  group {i:3d} {g.root_name:40s} channels={g.n_channels:5d} "
                             f"labels={first}..{first + g.n_labels - 1}{width} {state}")
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
