"""ModelSnapshot: restores everything calibration could touch, and nothing it need not."""
import torch
from torch import nn

from sparsify_torch.channels.model_state import ModelSnapshot


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 2, 1), nn.BatchNorm2d(2), nn.Linear(3, 3)).eval()


def test_restore_puts_everything_back():
    model = net()
    model[0].cache = {"a": 1}
    model[0].history = [1]
    cache, history = model[0].cache, model[0].history
    model[2].weight.grad = torch.ones(3, 3)
    grad = model[2].weight.grad
    model[2].bias.requires_grad_(False)
    snapshot = ModelSnapshot(model)

    model.train()
    model[0].cache["b"] = torch.zeros(2)  # container changed in place
    model[0].history = []                 # attribute rebound
    model[0].extra = 5                    # attribute added
    model[1].register_forward_hook(lambda *a: None)
    model[2].weight.grad += 1             # gradient accumulated in place
    model[2].bias.grad = torch.ones(3)
    model[2].bias.requires_grad_(True)
    model(torch.randn(4, 1, 3, 3))        # BatchNorm statistics updated (train mode)
    snapshot.restore()

    assert not any(m.training for m in model.modules())
    assert model[0].cache is cache and model[0].cache == {"a": 1}
    assert model[0].history is history and history == [1] and not hasattr(model[0], "extra")
    assert not model[1]._forward_hooks
    assert model[2].weight.grad is grad and torch.equal(grad, torch.ones(3, 3))
    assert model[2].bias.grad is None and not model[2].bias.requires_grad
    assert torch.equal(model[1].running_mean, torch.zeros(2)) and int(model[1].num_batches_tracked) == 0


def test_unchanged_buffers_are_not_written():
    """Writing a buffer bumps its autograd version, which breaks graphs that saved it."""
    model = net()
    version = model[1].running_var._version
    ModelSnapshot(model).restore()
    assert model[1].running_var._version == version


def test_restore_attributes_leaves_flags_hooks_and_ignored_names():
    model = net()
    snapshot = ModelSnapshot(model, ignore=[(model, "forward")])
    model.train()
    model.forward = lambda x: x
    model[0].cache = {}
    handle = model[0].register_forward_pre_hook(lambda *a: None)
    snapshot.restore_attributes()
    assert model.training and "forward" in model.__dict__ and not hasattr(model[0], "cache")
    assert model[0]._forward_pre_hooks
    handle.remove()
