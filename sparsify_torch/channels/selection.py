"""Label selectors: which calibrated channels to prune.

``PruningLabelSelector`` is the base class: a subclass implements
``select(pruning_info)`` and returns the labels to prune; whatever it returns is
also kept in ``labels_for_pruning``. ``TopKPruningLabelSelector`` implements
``select`` from a *pruning config* (per prunable group, a number of channels or
a fraction of them) returned by ``get_config_for_pruning``; uniform and
latency-optimal pruning are its subclasses. The math lives in
:mod:`sparsify.channels.selection` and :mod:`sparsify.channels.config`.

Example:
    >>> import numpy as np
    >>> from sparsify.channels.selection import ChannelScores
    >>> info = ChannelScores([np.arange(4)], [np.array([3., 1., 2., 0.])])
    >>> UniformPruningLabelSelector(0.5).select(info)
    [1, 3]
    >>> TopKPruningLabelSelector.get_labels_by_config(info, [0.25])
    [3]
"""
from __future__ import annotations

import abc
import functools
from typing import List, Optional, Sequence

from sparsify.channels.config import (PruningConfigValue, pruning_config_counts, uniform_pruning_config,
                                     validate_pruning_config)
from sparsify.channels.selection import (GroupedScores, MinChannels, check_pruning_ratio,
                                        least_important_labels)

__all__ = ["PruningLabelSelector", "TopKPruningLabelSelector", "UniformPruningLabelSelector"]


def _recording(select):
    """Wrap a subclass's ``select`` so that its result is kept in ``labels_for_pruning``."""

    @functools.wraps(select)
    def wrapper(self, pruning_info, *args, **kwargs):
        labels = select(self, pruning_info, *args, **kwargs)
        self._labels_for_pruning = [int(x) for x in labels]
        return labels

    wrapper._records_labels = True  # type: ignore[attr-defined]
    return wrapper


class PruningLabelSelector(abc.ABC):
    """Base class for all label selectors: ``select(pruning_info)`` returns the labels to prune.

    Subclasses implement :meth:`select`; the labels it returns are also
    available as :attr:`labels_for_pruning` afterwards.

    Example (the custom selector of the ENOT documentation):
        >>> import numpy as np
        >>> from typing import List
        >>> from sparsify_torch.channels import ModelPruningInfo, iterate_over_gate_criteria
        >>> class CustomPruningSelector(PruningLabelSelector):
        ...     def __init__(self, pruning_ratio: float):
        ...         self.pruning_ratio: float = pruning_ratio
        ...         super().__init__()
        ...     def select(self, pruning_info: ModelPruningInfo) -> List[int]:
        ...         labels_to_prune: List[int] = []
        ...         for _, labels, criteria in iterate_over_gate_criteria(pruning_info):
        ...             criteria: np.ndarray = np.array(criteria)
        ...             prune_channels_num = int(len(criteria) * self.pruning_ratio)
        ...             index_for_pruning = np.argsort(criteria)[:prune_channels_num]
        ...             labels_to_prune += np.array(labels)[index_for_pruning].tolist()
        ...         return labels_to_prune
        >>> from sparsify.channels.selection import ChannelScores
        >>> selector = CustomPruningSelector(0.5)
        >>> selector.select(ChannelScores([np.arange(4)], [np.array([3., 1., 2., 0.])]))
        [3, 1]
        >>> selector.labels_for_pruning
        [3, 1]
    """

    def __init__(self) -> None:
        self._labels_for_pruning: Optional[List[int]] = None

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        select = cls.__dict__.get("select")
        if select is not None and not getattr(select, "_records_labels", False) \
                and not getattr(select, "__isabstractmethod__", False):
            cls.select = _recording(select)

    @abc.abstractmethod
    def select(self, pruning_info: GroupedScores) -> List[int]:
        """Choose the labels to prune, keep them in the selector and return them.

        Args:
            pruning_info: calibration result (:class:`ModelPruningInfo`, or any
                object with ``group_labels`` and ``group_criteria``).

        Returns:
            Channel labels to prune.
        """

    @property
    def labels_for_pruning(self) -> List[int]:
        """Labels chosen by the last ``select`` call.

        Raises:
            RuntimeError: ``select`` has not run yet.
        """
        labels = getattr(self, "_labels_for_pruning", None)
        if labels is None:
            raise RuntimeError(f"{type(self).__name__}.labels_for_pruning is available only after select() ran")
        return list(labels)


class TopKPruningLabelSelector(PruningLabelSelector):
    """Prune the least important channels of every group, as many as a pruning config says.

    ``select`` calls :meth:`get_config_for_pruning` (subclasses override it) and
    prunes, in every prunable group ``i``, the ``config[i]`` least important
    channels (a float entry is a fraction of the group's channels).

    Args:
        pruning_cfg: optional fixed config, returned by the default
            ``get_config_for_pruning`` (an extension of the ENOT API, which has
            no arguments here: subclasses that override ``get_config_for_pruning``
            call ``super().__init__()``).

    Example:
        >>> import numpy as np
        >>> from sparsify.channels.selection import ChannelScores
        >>> info = ChannelScores([np.arange(3), np.arange(3, 5)], [np.array([1., 0., 2.]), np.array([0., 1.])])
        >>> class PruneTwoThenOne(TopKPruningLabelSelector):
        ...     def get_config_for_pruning(self, pruning_info):
        ...         return [2, 1]
        >>> selector = PruneTwoThenOne()
        >>> selector.select(info), selector.pruning_cfg
        ([0, 1, 3], [2, 1])
        >>> TopKPruningLabelSelector([0.5, 0.0]).select(info)  # a fixed config of fractions (1.5 rounds down)
        [1]
    """

    def __init__(self, pruning_cfg: Optional[PruningConfigValue] = None) -> None:
        super().__init__()
        if pruning_cfg is not None:
            if isinstance(pruning_cfg, (str, bytes)) or not hasattr(pruning_cfg, "__len__"):
                raise TypeError("pruning_cfg must be a sequence of integers (channels to prune per group) or of "
                                f"floats (fractions in [0, 1)), got {pruning_cfg!r}")
            validate_pruning_config(pruning_cfg)
            pruning_cfg = list(pruning_cfg)
        self._fixed_cfg = pruning_cfg
        self._pruning_cfg: Optional[list] = pruning_cfg

    @property
    def pruning_cfg(self) -> Optional[PruningConfigValue]:
        """The config of the last ``select`` (before it: the fixed config, or None)."""
        cfg = getattr(self, "_pruning_cfg", None)
        return None if cfg is None else list(cfg)

    def get_config_for_pruning(self, pruning_info: GroupedScores) -> PruningConfigValue:
        """The pruning config to apply: one count (int) or fraction (float) per prunable group.

        The base class returns the ``pruning_cfg`` given to the constructor;
        subclasses override this method.

        Raises:
            NotImplementedError: no fixed config and no override.
        """
        fixed = getattr(self, "_fixed_cfg", None)
        if fixed is None:
            raise NotImplementedError(f"{type(self).__name__} must implement get_config_for_pruning(pruning_info) "
                                      "or be constructed with a fixed pruning_cfg")
        return list(fixed)

    @staticmethod
    def get_labels_by_config(pruning_info: GroupedScores, pruning_config: PruningConfigValue) -> List[int]:
        """Labels of the least important channels of each group, as many as ``pruning_config`` says.

        Raises:
            ValueError: the config does not fit the groups.
        """
        counts = pruning_config_counts(pruning_config, pruning_info)
        return least_important_labels(pruning_info, counts)

    def _min_channels(self) -> MinChannels:
        """What every segment (source layer of a concatenation) keeps; subclasses may demand more."""
        return 1

    def select(self, pruning_info: GroupedScores) -> List[int]:
        """Prune the least important channels of each group as :meth:`get_config_for_pruning` says."""
        config = list(self.get_config_for_pruning(pruning_info))
        counts = pruning_config_counts(config, pruning_info, self._min_channels())
        labels = least_important_labels(pruning_info, counts, self._min_channels())
        self._pruning_cfg = config
        return labels


class UniformPruningLabelSelector(TopKPruningLabelSelector):
    """Prune the same fraction ``pruning_ratio`` of every prunable group.

    A group of ``n`` channels loses ``min(ceil(ratio * n - 0.5), n - 1)``; a
    group spanning a concatenation keeps a channel in each source layer.

    Raises:
        ValueError: ``pruning_ratio`` outside [0, 1).

    Example:
        >>> import numpy as np
        >>> from sparsify.channels.selection import ChannelScores
        >>> selector = UniformPruningLabelSelector(0.5)
        >>> info = ChannelScores([np.arange(4), np.arange(4, 7)], [np.array([3., 1., 2., 0.]), np.zeros(3)])
        >>> selector.get_config_for_pruning(info), selector.select(info)     # half of 3 channels: 1
        ([2, 1], [1, 3, 4])
    """

    def __init__(self, pruning_ratio: float) -> None:
        super().__init__()
        check_pruning_ratio(pruning_ratio)
        self.pruning_ratio = float(pruning_ratio)

    def get_config_for_pruning(self, pruning_info: GroupedScores) -> List[int]:
        """Per group, the number of channels that makes ``pruning_ratio`` of it."""
        return uniform_pruning_config(pruning_info, self.pruning_ratio, self._min_channels())
