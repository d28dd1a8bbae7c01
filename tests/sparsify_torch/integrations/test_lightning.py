"""`sparsify_torch.integrations.lightning.SparsifyCallback` in a real `lightning.pytorch.Trainer` (CPU): its
checkpoints hold the plain module (masked values), `fit(ckpt_path=...)` resumes bit for bit (weights, masks,
values under the masks, step), the pruning state is the callback's."""
from __future__ import annotations

import pytest
import torch
from torch import nn

pl = pytest.importorskip("lightning.pytorch")

from sparsify_torch.integrations.lightning import SparsifyCallback  # noqa: E402

pytestmark = pytest.mark.slow        # lightning's import and Trainer set-up take seconds

CONFIG = {"target_sparsity": 0.75, "start_step": 0, "end_step": 8, "pruning_frequency": 2, "monotone": False,
          "pruned_gradient": "straight_through", "excluded_op_names": ["net.4"]}


def net() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))


class Lit(pl.LightningModule):
    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.net = net()

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def loader():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    y = torch.randint(0, 3, (64,), generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)   # 4 steps an epoch


def trainer(tmp, callbacks, max_steps=12):
    return pl.Trainer(max_steps=max_steps, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=str(tmp), callbacks=callbacks,
                      deterministic=True)


def test_checkpoint_is_plain_and_resume_is_bit_exact(tmp_path):
    # at an epoch's end: Lightning restarts an epoch's batches unless the dataloader is resumable, so a checkpoint
    # mid-epoch resumes on other batches (it warns), with or without pruning
    every = 4
    ckpt = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=every, save_top_k=-1,
                                        filename="{step}")
    cb = SparsifyCallback(CONFIG)
    module = Lit()
    trainer(tmp_path, [cb, ckpt]).fit(module, loader())
    assert cb.pruner.step_count == 12 and cb.pruner.done_step == 8
    assert cb.pruner.total_sparsity() == pytest.approx(0.75, abs=0.01)

    path = tmp_path / f"step={every}.ckpt"
    saved = torch.load(path, weights_only=True)
    state = saved["callbacks"]["SparsifyCallback"]
    assert state["pruner"]["step"] == every and set(state["pruner"]["stored"]) == {"net.0.weight", "net.2.weight"}
    plain = Lit(seed=3)
    assert plain.load_state_dict(saved["state_dict"], strict=True).missing_keys == []     # plain names
    for n, mask in state["pruner"]["masks"].items():
        assert torch.all(plain.get_parameter(n)[~mask] == 0) and bool((~mask).any()), n
    assert Lit.load_from_checkpoint(path, weights_only=True).net[0].weight.eq(plain.net[0].weight).all()

    cb2 = SparsifyCallback(CONFIG)
    module2 = Lit(seed=5)
    trainer(tmp_path / "resumed", [cb2]).fit(module2, loader(), ckpt_path=path)
    assert cb2.pruner.step_count == 12 and cb2.pruner.done_step == 8
    a, b = module.state_dict(), module2.state_dict()
    assert list(a) == list(b) == list(Lit().state_dict())
    for k in a:
        assert torch.equal(a[k], b[k]), k
    for n, m in cb.pruner.masks().items():
        assert torch.equal(m, cb2.pruner.masks()[n]), n
    for n in cb.pruner.names:
        assert torch.equal(cb.pruner.state_dict()["stored"][n], cb2.pruner.state_dict()["stored"][n]), n


def test_logs_remove_at_end_and_bad_arguments(tmp_path):
    cb = SparsifyCallback({**CONFIG, "end_step": 2}, remove_at_end=True)
    module = Lit()
    t = trainer(tmp_path, [cb], max_steps=3)
    t.fit(module, loader())
    assert float(t.callback_metrics["sparsity/total"]) == pytest.approx(0.75, abs=0.01)
    assert cb.pruner.removed and not hasattr(module.net[0], "parametrizations")
    assert float((module.net[0].weight == 0).float().mean()) == 0.75 and cb.state_dict() == {}
    with pytest.raises(TypeError, match="remove_at_end must be True or False, got 1"):
        SparsifyCallback(CONFIG, remove_at_end=1)
    with pytest.raises(ValueError, match="teacher was passed without distillation"):
        SparsifyCallback(CONFIG, teacher=net())
