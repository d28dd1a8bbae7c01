"""``remove_channels``: structured channel removal for Keras 3, a physically smaller plain Keras model.

Example:
    >>> import keras
    >>> from sparsify_keras import remove_channels
    >>> keras.utils.set_random_seed(0)
    >>> model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(16, 3, activation="relu"),
    ...                           keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(4)])
    >>> small = remove_channels(model, 0.75)
    >>> small.layers[0].filters, model.count_params(), small.count_params()
    (4, 516, 132)
"""
from __future__ import annotations

from .masked import check_outputs
from .plan import ChannelPlan, Sparsity, channel_plan
from .rebuild import rebuild

__all__ = ["remove_channels"]


def _check_plan_fits(model, plan: ChannelPlan) -> None:
    """ValueError unless every layer ``plan`` names is in ``model`` with the channel count the plan was made for."""
    names = {layer.name: layer for layer in model.layers}
    for name in plan.graph.producers:
        layer = names.get(name)
        width = None if layer is None else layer.get_config().get("units", layer.get_config().get("filters"))
        if width != plan.graph.out_atoms[name].size:
            raise ValueError(f"sparsity is a ChannelPlan made for another model: its layer {name!r} has "
                             f"{plan.graph.out_atoms[name].size} channels, the model's has "
                             f"{'no such layer' if layer is None else width}")


def remove_channels(model, sparsity: "Sparsity | ChannelPlan", criterion: str = "l1", round_to: int = 1,
                    check: bool = True):
    """A new Keras model without the least important output channels of its Dense/Conv2D layers.

    Channels tied by an ``Add`` are removed together; DepthwiseConv2D, BatchNormalization, activations,
    Dropout, pooling and Flatten follow the channels of the layer before them; the readers' input rows are
    removed. Layers whose channels reach a model output (or come from an input, or feed a softmax) keep
    them. The result computes what ``model`` computes with the removed channels zeroed at their readers
    (:func:`~sparsify_keras.channels.masked.masked_model`); ``model`` itself is not changed.

    Args:
        model: a built Sequential or Functional Keras 3 model (any backend), channels last.
        sparsity: fraction of the channels of every prunable group to remove, in [0, 1); or
            ``{layer name: fraction or count}`` (only these layers); or a :class:`ChannelPlan` from
            :func:`~sparsify_keras.channels.channel_plan`.
        criterion: ``"l1"`` or ``"l2"``: norm of each output channel's kernel slice (no data needed).
        round_to: round every group's kept channel count up to a multiple of this (e.g. 8 for SIMD).
        check: run the new model and the masked dense model on 2 random inputs and compare
            (needs static input shapes).

    Returns:
        A new, uncompiled ``keras.Sequential`` / ``keras.Model`` built from its config with the new
        ``units``/``filters`` and sliced weights: saves as ``.keras`` and loads without sparsify.

    Raises:
        TypeError / ValueError: a bad argument, or a layer or model that is not supported (the message
            names the layer and why), before anything is built.
    """
    if not isinstance(check, bool):
        raise TypeError(f"check must be a bool, got {check!r}")
    if isinstance(sparsity, ChannelPlan):
        _check_plan_fits(model, sparsity)
        plan = sparsity
    else:
        plan = channel_plan(model, sparsity, criterion, round_to)
    small = rebuild(model, plan)
    if check:
        check_outputs(model, small, plan)
    return small
