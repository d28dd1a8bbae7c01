"""TF graph mode (``prune_graph``): pruned values stay frozen, and monotone=False revives them as torch does.

Issue 35 (b). With ``pruned_gradient="none"`` (the only value graph mode allows) a pruned weight holds 0 in its
variable and its value in the non-trainable ``nm_stored/<weight>`` variable (``pruning.stored``); the optimizer
slots of its entries are zeroed at the update. Two checks:

* ``test_stored_pruned_values_frozen_*``: Momentum with an L2 term in the loss (the ``tf.compat.v1`` way of
  weight decay: ``wd * tf.nn.l2_loss(w)``, gradient ``wd * w``), and Adam with decoupled weight decay written by
  hand (AdamW: ``w -= lr * wd * w`` after each Adam step). TF 2.21 has no AdamW usable on a ``tf.compat.v1``
  graph: ``tf.compat.v1.train`` has none, ``tf_keras.optimizers.legacy`` (OptimizerV2) has none; the new-style
  ``tf_keras.optimizers.AdamW`` refuses ``minimize`` of a tensor loss and its ``apply_gradients`` op, run in a
  v1 ``Session``, leaves the weights unchanged; Keras 3's ``keras.optimizers.AdamW.apply_gradients`` returns a
  Keras variable a ``Session`` cannot run (TypeError). (Checked with TF 2.21 when this was written.)
  After each of 8 steps (updates at steps 0 and 3, 25% then 50%) the stored values of pruned entries are
  bitwise those they had when pruned, the weights hold exactly 0 there, and every slot entry is exactly 0.
* ``test_monotone_false_revivals_equal_torch``: the same NumPy init, batches and config in TF graph mode and
  ``sparsify_torch.prune`` (SGD momentum 0.9 + weight decay; TF: MomentumOptimizer + L2 term), masks after
  every update equal, and weights revived at an update equal (in each framework bit for bit the value they
  were pruned with; across frameworks within float32 tolerance, see the test).
"""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

import sparsify_tf  # noqa: E402

tf1 = tf.compat.v1

NAMES = ("fc1/kernel", "fc2/kernel")


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


def _init(seed: int = 0):
    """Canonical (torch) layout weights: fc1 (16, 8), fc2 (4, 16)."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((16, 8)) * 0.5).astype(np.float32),
            (rng.standard_normal((4, 16)) * 0.5).astype(np.float32)]


def _batches(n: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((16, 8)).astype(np.float32), rng.standard_normal((16, 4)).astype(np.float32))
            for _ in range(n)]


def _graph(cfg: dict, optimizer: str, lr: float, wd: float):
    """x (16, 8) -> fc1 -> relu -> fc2 -> mean squared error; prune_graph between model and optimizer."""
    g = tf.Graph()
    with g.as_default():
        x, y = tf1.placeholder(tf.float32, [None, 8]), tf1.placeholder(tf.float32, [None, 4])
        ws = [tf1.get_variable(n, initializer=w.T.copy(), use_resource=True) for n, w in zip(NAMES, _init())]
        out = tf.matmul(tf.nn.relu(tf.matmul(x, ws[0])), ws[1])
        pruning = sparsify_tf.prune_graph(cfg)
        loss = tf.reduce_mean(tf.square(out - y))
        gs = pruning.global_step
        if optimizer == "momentum_l2":
            opt = tf1.train.MomentumOptimizer(lr, 0.9)
            train = opt.minimize(loss + wd * tf.add_n([tf.nn.l2_loss(w) for w in ws]), global_step=gs)
            slot_names = ["momentum"]
        else:                                             # AdamW: Adam, then the decoupled decay
            opt = tf1.train.AdamOptimizer(lr)
            step = opt.minimize(loss, global_step=gs)
            with tf.control_dependencies([step]):
                train = tf.group(*[w.assign_sub(lr * wd * w.read_value()) for w in ws])
            slot_names = ["m", "v"]
        update = pruning.build_update_op()                # after the optimizer: it zeroes the slots
        slots = {n: [opt.get_slot(w, s) for s in slot_names] for n, w in zip(NAMES, ws)}
        init = tf1.global_variables_initializer()
    return dict(g=g, x=x, y=y, w=dict(zip(NAMES, ws)), train=train, update=update, pruning=pruning,
                slots=slots, init=init)


def _session(g):
    return tf1.Session(graph=g, config=tf1.ConfigProto(intra_op_parallelism_threads=1,
                                                       inter_op_parallelism_threads=1))


@pytest.mark.parametrize("optimizer", ["momentum_l2", "adamw"])
def test_stored_pruned_values_frozen_and_slots_zero_with_weight_decay(optimizer):
    cfg = {"init_sparsity": 0.25, "target_sparsity": 0.5, "start_step": 0, "end_step": 3, "pruning_frequency": 3}
    m = _graph(cfg, optimizer, lr=0.05, wd=0.05)
    stored = m["pruning"].stored
    masks = m["pruning"].masks
    trainable = {v.name for v in m["g"].get_collection(tf1.GraphKeys.TRAINABLE_VARIABLES)}
    assert set(stored) == set(NAMES)
    assert all("nm_stored" in v.name and v.name not in trainable for v in stored.values())
    batches = _batches(8)
    with _session(m["g"]) as sess:
        sess.run(m["init"])
        initial = sess.run(m["w"])
        sess.run(m["update"])                            # the step-0 update: 25%
        prev_keep = {n: v != 0 for n, v in sess.run(masks).items()}
        prev_stored = sess.run(stored)
        assert {n: int((~k).sum()) for n, k in prev_keep.items()} == {"fc1/kernel": 32, "fc2/kernel": 16}
        for n in NAMES:
            np.testing.assert_array_equal(_bits(prev_stored[n][~prev_keep[n]]), _bits(initial[n][~prev_keep[n]]))
        first_stored = {n: prev_stored[n].copy() for n in NAMES}
        first_pruned = {n: ~prev_keep[n] for n in NAMES}
        newly_pruned_at = {}
        for step, (bx, by) in enumerate(batches, start=1):
            sess.run(m["train"], {m["x"]: bx, m["y"]: by})
            dense = sess.run(m["w"])                     # the weights the update reads (0 where pruned)
            sess.run(m["update"])
            keep = {n: v != 0 for n, v in sess.run(masks).items()}
            now_stored, w, slots = sess.run(stored), sess.run(m["w"]), sess.run(m["slots"])
            for n in NAMES:
                assert not np.any(keep[n] & ~prev_keep[n]), (step, n)          # monotone: nothing comes back
                still = ~keep[n] & ~prev_keep[n]
                new = ~keep[n] & prev_keep[n]
                # frozen: bit for bit what they held before this step (weight decay, momentum, Adam did not move them)
                np.testing.assert_array_equal(_bits(now_stored[n][still]), _bits(prev_stored[n][still]),
                                              err_msg=f"{optimizer} step {step} {n}")
                # newly pruned: stored with the value they had when pruned
                np.testing.assert_array_equal(_bits(now_stored[n][new]), _bits(dense[n][new]))
                assert not np.any(now_stored[n][keep[n]])                       # 0 where kept
                assert not np.any(w[n][~keep[n]])                               # the weight holds 0 where pruned
                assert len(slots[n]) == (1 if optimizer == "momentum_l2" else 2)
                for s in slots[n]:
                    assert not np.any(s[~keep[n]]), (step, n)                    # slots exactly 0 there
                if new.any():
                    newly_pruned_at.setdefault(n, []).append(step)
            prev_keep, prev_stored = keep, now_stored
        final_w = sess.run(m["w"])
    assert newly_pruned_at == {"fc1/kernel": [3], "fc2/kernel": [3]}           # the second update, 50%
    assert {n: int((~k).sum()) for n, k in prev_keep.items()} == {"fc1/kernel": 64, "fc2/kernel": 32}
    for n in NAMES:
        # the entries pruned at step 0 hold their initial values, bit for bit, after 8 steps
        np.testing.assert_array_equal(_bits(prev_stored[n][first_pruned[n]]), _bits(first_stored[n][first_pruned[n]]))
        np.testing.assert_array_equal(_bits(prev_stored[n][first_pruned[n]]), _bits(initial[n][first_pruned[n]]))
        assert np.all(prev_stored[n][first_pruned[n]] != 0)
        # the kept weights did train (and decay) meanwhile
        assert np.all(final_w[n][prev_keep[n]] != initial[n][prev_keep[n]])


# ----- monotone=False: TF graph mode against torch ------------------------------------------------------------
MONO_CFG = {"monotone": False, "target_sparsity": 0.5, "sparsity_decay_type": "constant", "start_step": 0,
            "end_step": 12, "pruning_frequency": 3}
LR, WD, STEPS = 0.1, 0.2, 12
#: Across frameworks the same float32 training differs by rounding: the loss gradients are computed with other
#: matmul/reduction orders (oneDNN vs ATen), and the differences accumulate through 12 momentum steps. Measured
#: here: at most 1.2e-7 absolute (1 ulp of 0.5-sized weights is 6e-8) on weights of size 0.05-1.5. ``atol=1e-6``
#: (about 8x that) with ``rtol=1e-5`` bounds it with room; relative error alone does not (a 1e-3-sized weight
#: differs by 6e-5 relative), hence the absolute term.
RTOL, ATOL = 1e-5, 1e-6
#: The masks must not depend on that rounding: at every update the k-th and (k+1)-th smallest dense |w| of each
#: layer (magnitude, local scope: the threshold) are at least MIN_GAP apart (measured minimum 1.9e-4), 100x ATOL.
MIN_GAP = 1e-4


def _run_tf():
    m = _graph(MONO_CFG, "momentum_l2", LR, WD)
    out = {"masks": [], "weights": [], "stored": []}
    batches = _batches(STEPS)
    with _session(m["g"]) as sess:
        sess.run(m["init"])
        sess.run(m["update"])
        for step in range(STEPS + 1):
            if step:
                bx, by = batches[step - 1]
                sess.run(m["train"], {m["x"]: bx, m["y"]: by})
                sess.run(m["update"])
            masks = m["pruning"].get_masks(sess, canonical=True)
            w, s = sess.run(m["w"]), sess.run(m["pruning"].stored)
            out["masks"].append({n: np.asarray(masks[n], bool) for n in NAMES})
            out["weights"].append({n: (w[n] + s[n]).T for n in NAMES})       # dense, canonical layout
            out["stored"].append({n: s[n].T for n in NAMES})
    return out


def _run_torch():
    import torch
    from torch import nn

    import sparsify_torch

    w1, w2 = _init()
    model = nn.Sequential(nn.Linear(8, 16, bias=False), nn.ReLU(), nn.Linear(16, 4, bias=False))
    with torch.no_grad():
        model[0].weight.copy_(torch.from_numpy(w1))
        model[2].weight.copy_(torch.from_numpy(w2))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9, weight_decay=WD)
    pruner = sparsify_torch.prune(model, MONO_CFG, optimizer=opt)
    originals = {"fc1/kernel": model[0].parametrizations.weight.original,
                 "fc2/kernel": model[2].parametrizations.weight.original}
    names = {"fc1/kernel": "0.weight", "fc2/kernel": "2.weight"}
    out = {"masks": [], "weights": [], "before_update": {}, "done": []}

    def record():
        masks = pruner.masks()
        out["masks"].append({n: masks[names[n]].numpy().astype(bool) for n in NAMES})
        out["weights"].append({n: originals[n].detach().numpy().copy() for n in NAMES})
        out["done"].append(pruner.done_step)

    record()
    for step, (bx, by) in enumerate(_batches(STEPS), start=1):
        opt.zero_grad()
        (model(torch.from_numpy(bx)) - torch.from_numpy(by)).pow(2).mean().backward()
        opt.step()
        out["before_update"][step] = {n: originals[n].detach().numpy().copy() for n in NAMES}
        pruner.step()
        record()
    pruner.remove()
    return out


def test_monotone_false_revivals_equal_torch():
    t, p = _run_tf(), _run_torch()
    updates = [3, 6, 9, 12]
    assert p["done"] == [0, 0, 0, 3, 3, 3, 6, 6, 6, 9, 9, 9, 12]
    revived_counts = {}
    for step in range(STEPS + 1):
        for n in NAMES:
            k = int(t["masks"][step][n].size * 0.5)
            assert int((~t["masks"][step][n]).sum()) == k, (step, n)
            np.testing.assert_array_equal(t["masks"][step][n], p["masks"][step][n], err_msg=f"step {step} {n}")
            np.testing.assert_allclose(t["weights"][step][n], p["weights"][step][n], rtol=RTOL, atol=ATOL,
                                       err_msg=f"dense weights, step {step} {n}")
        if step in updates:
            for n in NAMES:
                # no near-tie at the threshold: the k-th and (k+1)-th smallest |w| are MIN_GAP apart
                a = np.sort(np.abs(p["before_update"][step][n]).ravel())
                k = a.size // 2
                assert a[k] - a[k - 1] > MIN_GAP, (step, n)
                revived = t["masks"][step][n] & ~t["masks"][step - 1][n]
                revived_counts.setdefault(step, []).append(int(revived.sum()))
                # a revived weight comes back with the value it was stored with, bit for bit in each framework ...
                np.testing.assert_array_equal(_bits(t["weights"][step][n][revived]),
                                              _bits(t["stored"][step - 1][n][revived]))
                np.testing.assert_array_equal(_bits(p["weights"][step][n][revived]),
                                              _bits(p["weights"][step - 1][n][revived]))
                # ... and the same value in both frameworks (float32 tolerance)
                np.testing.assert_allclose(t["weights"][step][n][revived], p["weights"][step][n][revived],
                                           rtol=RTOL, atol=ATOL)
                assert np.all(t["weights"][step][n][revived] != 0)
        else:
            for n in NAMES:
                if step:
                    np.testing.assert_array_equal(t["masks"][step][n], t["masks"][step - 1][n])
    # the scenario does revive weights at every update (fc1, fc2): weight decay shrinks the kept ones
    assert revived_counts == {3: [10, 3], 6: [18, 12], 9: [18, 7], 12: [22, 6]}
