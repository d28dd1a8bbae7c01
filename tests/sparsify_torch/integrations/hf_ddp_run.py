"""One run of the Trainer with SparsifyCallback (Wanda: the inputs' statistics), for test_huggingface_ddp.py.

``python hf_ddp_run.py OUT`` runs in this process; under ``torchrun --nproc_per_node 2`` each process takes half
of every batch (DDP over gloo). Rank 0 saves the masks to ``OUT``. The learning rate is 0, so that the weights
are the same in both runs whatever the order of DDP's sums: the masks then depend on the inputs each update
sees, which the pruner sums over the processes."""
from __future__ import annotations

import os
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

from sparsify_torch.integrations.huggingface import SparsifyCallback

CONFIG = {"target_sparsity": 0.5, "criterion": "wanda", "pruning_scope": "row", "start_step": 2, "end_step": 6,
          "pruning_frequency": 2, "excluded_op_names": ["lm_head", "embed_tokens"]}
GLOBAL_BATCH = 8


def main(out: str) -> None:
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16,
                                         tie_word_embeddings=False))
    ids = torch.randint(0, 64, (64, 8), generator=torch.Generator().manual_seed(1))
    data = [{"input_ids": row, "labels": row.clone()} for row in ids]
    world = int(os.environ.get("WORLD_SIZE", "1"))
    args = TrainingArguments(output_dir=out + ".run", use_cpu=True, report_to=[], max_steps=6,
                             per_device_train_batch_size=GLOBAL_BATCH // world, learning_rate=0.0, seed=0,
                             train_sampling_strategy="sequential", optim="sgd", save_strategy="no", disable_tqdm=True,
                             ddp_backend="gloo" if world > 1 else None, dataloader_num_workers=0)
    callback = SparsifyCallback(CONFIG)
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])
    trainer.train()
    if trainer.is_world_process_zero():
        torch.save({"masks": callback.pruner.masks(), "weights": model.state_dict(), "world": world,
                    "step": callback.pruner.step_count}, out)


if __name__ == "__main__":
    main(sys.argv[1])
