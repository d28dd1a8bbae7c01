"""`sparsify_torch.integrations.huggingface.SparsifyCallback` in a real `transformers.Trainer` (CPU, a tiny Llama
built from its config): checkpoints mid-pruning load with `from_pretrained` with no missing key, resume is bit
exact (weights, masks, step, distillation teacher), sparsity reaches the logs, distillation adds its term."""
from __future__ import annotations

import os

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments  # noqa: E402

from sparsify_torch.integrations.huggingface import STATE_FILE, SparsifyCallback  # noqa: E402

pytestmark = pytest.mark.slow        # transformers' import alone takes seconds

CONFIG = {"target_sparsity": 0.75, "start_step": 0, "end_step": 8, "pruning_frequency": 2, "monotone": False,
          "excluded_op_names": ["lm_head", "embed_tokens"]}


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16,
                                        tie_word_embeddings=False))


def dataset(n: int = 32, length: int = 8) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 64, (n, length), generator=g)
    return [{"input_ids": row, "labels": row.clone()} for row in ids]


def trainer(model, tmp, callbacks, max_steps=12, **kw) -> Trainer:
    args = TrainingArguments(**{"output_dir": str(tmp), "use_cpu": True, "report_to": [], "max_steps": max_steps,
                                "per_device_train_batch_size": 4, "save_strategy": "steps", "save_steps": 6,
                                "logging_steps": 2, "learning_rate": 1e-2, "seed": 0, "disable_tqdm": True,
                                "dataloader_num_workers": 0, **kw})
    return Trainer(model=model, args=args, train_dataset=dataset(), callbacks=callbacks)


class Recorder(TrainerCallback):
    def __init__(self):
        self.logs = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs))


def masks_of(callback):
    return {n: m.clone() for n, m in callback.pruner.masks().items()}


def test_checkpoint_loads_plain_and_resume_is_bit_exact(tmp_path):
    distill = {"temperature": 2.0}
    cb = SparsifyCallback(CONFIG, distillation=distill)
    recorder = Recorder()
    model = tiny_llama()
    t = trainer(model, tmp_path, [recorder, cb])
    cb.attach(t)                                     # first: the recorder (a reporting callback) sees the sparsity
    t.train()
    assert cb.pruner.optimizer is t.optimizer.optimizer           # accelerate's wrapper, unwrapped
    assert cb.pruner.step_count == t.state.global_step == 12 and cb.pruner.done_step == 8
    assert cb.pruner.total_sparsity() == pytest.approx(0.75, abs=0.01)
    logged = [r["sparsity/total"] for r in recorder.logs if "sparsity/total" in r]
    assert len(logged) == 7 and logged[-1] == cb.pruner.total_sparsity() and logged[0] < logged[-1]   # + summary
    assert all("sparsity/total" in h for h in t.state.log_history if "loss" in h)

    # the mid-pruning checkpoint: plain names, masked values, the pruning state beside
    ck = tmp_path / "checkpoint-6"
    saved = torch.load(ck / STATE_FILE, weights_only=True)
    assert saved["pruner"]["step"] == 6 and "teacher" in saved
    loaded, info = LlamaForCausalLM.from_pretrained(ck, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    for name, mask in saved["pruner"]["masks"].items():
        w = loaded.get_parameter(name)
        assert torch.all(w[~mask] == 0) and 0 < float((~mask).float().mean()) < 0.75, name

    # resume from it: a fresh model, Trainer and callback reach the uninterrupted run bit for bit
    cb2 = SparsifyCallback(CONFIG, distillation=distill)
    model2 = tiny_llama(seed=5)
    t2 = trainer(model2, tmp_path, [cb2])
    t2.train(resume_from_checkpoint=str(ck))
    assert cb2.pruner.step_count == 12 and cb2.pruner.done_step == cb.pruner.done_step
    a, b = model.state_dict(), model2.state_dict()
    assert list(a) == list(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k
    for n, m in masks_of(cb).items():
        assert torch.equal(m, cb2.pruner.masks()[n]), n
    for n in cb.pruner.names:                     # the values under the masks too (monotone=False ranks them)
        assert torch.equal(cb.pruner.state_dict()["stored"][n], cb2.pruner.state_dict()["stored"][n]), n

    # save_pretrained at the end: a plain model with the masked values
    model2.save_pretrained(tmp_path / "final")
    final, info = LlamaForCausalLM.from_pretrained(tmp_path / "final", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    x = torch.randint(0, 64, (2, 8))
    model2.eval()
    assert torch.equal(final(x).logits, model2(x).logits)


def test_distillation_adds_its_term_to_the_loss_and_remove_at_end(tmp_path):
    cb = SparsifyCallback({**CONFIG, "end_step": 2}, distillation={"temperature": 2.0, "teacher": "user"},
                          teacher=tiny_llama(seed=3), remove_at_end=True)
    model = tiny_llama()
    t = trainer(model, tmp_path, [cb], max_steps=2, save_strategy="no")
    t.train()
    assert not hasattr(model.model.layers[0].self_attn.q_proj, "parametrizations")        # baked at the end
    assert cb.pruner.removed and cb._hook is None
    # the hook, on a pruned model in training: loss = task loss + the pruner's distillation term
    cb2 = SparsifyCallback(CONFIG, distillation={"temperature": 2.0, "teacher": "user"}, teacher=tiny_llama(seed=3))
    t2 = trainer(tiny_llama(), tmp_path, [cb2], max_steps=1, save_strategy="no")
    t2.train()
    assert cb2._hook is None                          # the hook goes at the end of train(): back in the next
    m = t2.model.train()
    batch = {"input_ids": torch.stack([d["input_ids"] for d in dataset(4)]),
             "labels": torch.stack([d["labels"] for d in dataset(4)])}
    plain = m(**batch)
    cb2._hook = m.register_forward_hook(cb2._add_distillation, with_kwargs=True)
    with_term = m(**batch)
    term = cb2.pruner.distill_loss({"input_ids": batch["input_ids"]}, plain.logits)
    assert float(term.detach()) > 0
    assert torch.allclose(with_term.loss, plain.loss + term)
    with pytest.raises(RuntimeError, match="adds its term to the loss the model returns, but the model returned none"):
        m(input_ids=batch["input_ids"])
    m.eval()
    assert m(input_ids=batch["input_ids"]).loss is None            # evaluation: no term, no error


def test_resume_without_the_pruning_state_and_bad_arguments(tmp_path):
    cb = SparsifyCallback(CONFIG)
    t = trainer(tiny_llama(), tmp_path, [cb], max_steps=6)
    t.train()
    os.remove(tmp_path / "checkpoint-6" / STATE_FILE)
    t2 = trainer(tiny_llama(), tmp_path, [SparsifyCallback(CONFIG)])
    with pytest.raises(FileNotFoundError, match=r"resumes at step 6, but there is no pruning state at .*checkpoint-6"):
        t2.train(resume_from_checkpoint=str(tmp_path / "checkpoint-6"))
    with pytest.raises(TypeError, match="remove_at_end must be True or False, got 'yes'"):
        SparsifyCallback(CONFIG, remove_at_end="yes")
    with pytest.raises(ValueError, match="teacher was passed without distillation"):
        SparsifyCallback(CONFIG, teacher=tiny_llama())
    with pytest.raises(TypeError, match="resume_from must be a checkpoint folder"):
        SparsifyCallback(CONFIG, resume_from=3)
