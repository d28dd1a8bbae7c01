"""Accuracy of sparse models: dense vs sparsify's methods vs torch.ao and tfmot, paired by seed.

Frameworks: ``torch`` (``sparsify_torch.prune``), ``tf_keras`` (tf-keras / Keras 2,
``sparsify_tf.keras.PruningCallback``) and ``keras_jax`` (Keras 3 on JAX, ``sparsify_keras.PruningCallback``;
each run in a process of its own started with ``KERAS_BACKEND=jax``, XLA on one CPU thread). All train the
same function from the same NumPy initial weights on the same batches, so a seed pairs across frameworks too.

Two CNNs trained from scratch on offline data (see ``bench/accuracy/problems.py``):

* ``mnist1d``: MNIST-1D (``mnist1d.data.make_dataset``, 4000 train / 1000 test), the paper's CNN
  (Conv1d 1->25 k5 s2 p1, 25->25 k3 s2 p1 twice, ReLU, Linear 125->10), Adam 1e-2, batch 100,
  6000 steps, gradual cubic schedule from step 1200 to 4200, an update every 50 steps. 25 channels fit
  neither 4x1 nor 2:4 in any layer, so the structured settings train 32 channels (Linear 160->10);
* ``digits``: scikit-learn digits (1408 / 389), Conv2d 1->16 k3, 16->32 k3 s2, Linear 512->10, Adam 2e-3,
  batch 32, 1000 steps, schedule from step 200 to 700 every 20.

Settings 80 / 90 / 95 % unstructured, 4x1 blocks at 90 % and 2:4; every conv/linear weight the pattern
fits is pruned (the others stay dense, for every arm). Per seed every arm starts from the same NumPy
initial weights and sees the same batches. Arms: ``dense``; sparsify arms by name (``default``, ``rigl``,
``set``, ``nonmonotone``, ``wanda``, ``ste``, ``sr_ste``, ``global*``, ``erk*``; ``erk_wanda`` is ERK with Wanda
scores; ``sr_ste`` is SR-STE: straight-through gradients plus ``pruned_decay`` on the pruned weights, a mask
update every step, ``monotone=False``)
or defined with ``--arm-config name='{json}'``; their config overrides
passed to ``sparsify_torch.prune`` / ``sparsify_tf.keras.PruningCallback`` / ``sparsify_keras.PruningCallback``
unchanged (a key the installed
sparsify does not know fails with its ValueError before anything runs); ``torch.ao``
(``WeightNormSparsifier`` at our schedule's update steps and values, ``squash_mask`` at the end);
``tfmot`` (``prune_low_magnitude``, installed with ``pip install --target`` into a temporary folder or
taken from ``$TFMOT_PATH``); a peer arm runs in its own framework only (``keras_jax`` has none). Every run
is single-threaded; torch runs use ``set_flush_denormal(True)``.

Usage:
    python -m bench.bench_accuracy --seeds 10 --frameworks torch,tf_keras --datasets mnist1d,digits \\
        --arms dense,default,torch.ao,tfmot --settings 80,90,95,4x1,2:4 --jobs 2 --out-json acc.json
    python -m bench.bench_accuracy --seeds 10 --frameworks keras_jax --datasets mnist1d --settings 90 \\
        --arms dense,default,erk_wanda --out-json acc.json             # Keras 3 + JAX, paired with the above
    python -m bench.bench_accuracy --report --out-json acc.json     # re-render RESULTS.md and the plot
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from bench.accuracy.problems import PEER_ARMS, SPARSIFY_ARMS, problem, setting, sparsify_config  # noqa: E402

__all__ = ["plan", "execute", "run_key", "main"]
FRAMEWORKS = ("torch", "tf_keras", "keras_jax")
#: Keras 3 frameworks and their backend: each run is a child process with ``KERAS_BACKEND`` set before import.
KERAS3_BACKENDS = {"keras_jax": "jax"}
#: the child's XLA on one CPU thread, like the torch and tf-keras runs.
XLA_ONE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
PLOT = os.path.join(ROOT, "docs", "img", "accuracy_vs_sparsity.png")


def run_key(job: dict[str, Any]) -> str:
    """Identity of a run: a rerun with the same key is skipped."""
    return "|".join(str(job[k]) for k in ("dataset", "framework", "arm", "setting", "steps", "seed")) + "|" + \
        json.dumps(job["overrides"], sort_keys=True)


def plan(args: argparse.Namespace, custom: dict[str, dict]) -> list[dict[str, Any]]:
    """Every run the arguments ask for; sparsify configs are validated here, before anything trains."""
    from sparsify import DistillationConfig, PruningConfig

    jobs, seen = [], set()
    for ds in args.datasets:
        spec = problem(ds) if not args.steps else problem(ds).scaled(args.steps)
        for fw in args.frameworks:
            for name in args.settings:
                s = setting(name)
                for arm in args.arms:
                    if arm in PEER_ARMS and PEER_ARMS[arm] != fw:
                        continue
                    overrides = custom.get(arm, SPARSIFY_ARMS.get(arm, {}))
                    if arm not in PEER_ARMS and arm != "dense":
                        config = sparsify_config(spec, s, overrides)
                        if "distillation" in config:          # a teacher arm (torch only)
                            if fw != "torch":
                                raise ValueError(f"--arms {arm}: distillation runs in the torch framework only, "
                                                 f"not {fw}")
                            DistillationConfig.coerce(config.pop("distillation"))
                        PruningConfig.coerce(config)                                   # raises ValueError
                    for seed in range(args.first_seed, args.first_seed + args.seeds):
                        job = {"dataset": ds, "framework": fw, "arm": arm, "seed": seed, "steps": spec.steps,
                               "setting": f"dense:{spec.variant(s)}" if arm == "dense" else name,
                               "variant": spec.variant(s), "overrides": overrides if arm not in PEER_ARMS else {},
                               "setting_name": name}
                        if run_key(job) not in seen:
                            seen.add(run_key(job))
                            jobs.append(job)
    return jobs


def execute(job: dict[str, Any]) -> dict[str, Any]:
    """Train one run and return its record (the job's fields + results): torch and tf-keras in this process,
    a Keras 3 framework in a child process whose keras is imported with that framework's backend."""
    if job["framework"] in KERAS3_BACKENDS:
        return _execute_in_backend(job)
    return _execute_here(job)


def _execute_in_backend(job: dict[str, Any]) -> dict[str, Any]:
    """``python -m bench.bench_accuracy --run-job IN OUT`` with ``KERAS_BACKEND`` set; raises with its output on failure."""
    backend = KERAS3_BACKENDS[job["framework"]]
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2",
           "XLA_FLAGS": (os.environ.get("XLA_FLAGS", "") + " " + XLA_ONE_THREAD).strip()}
    if backend == "jax":
        env.setdefault("JAX_PLATFORMS", "cpu")
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "job.json"), os.path.join(d, "record.json")
        with open(src, "w") as f:
            json.dump(job, f)
        done = subprocess.run([sys.executable, "-m", "bench.bench_accuracy", "--run-job", src, dst], cwd=ROOT,
                              env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{run_key(job)}: KERAS_BACKEND={backend} child exited {done.returncode}\n"
                               f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
        with open(dst) as f:
            return json.load(f)


def _run_job_file(src: str, dst: str) -> None:
    """The child's side of :func:`_execute_in_backend`: one job from ``src``, its record to ``dst``."""
    with open(src) as f:
        job = json.load(f)
    record = _execute_here(job)
    with open(dst, "w") as f:
        json.dump(record, f)


def _execute_here(job: dict[str, Any]) -> dict[str, Any]:
    spec = problem(job["dataset"])
    if spec.steps != job["steps"]:
        spec = spec.scaled(job["steps"])
    s = setting(job["setting_name"])
    config = sparsify_config(spec, s, job["overrides"]) if job["arm"] not in PEER_ARMS else None
    if job["framework"] == "torch":
        from bench.accuracy.torch_runs import run_torch as run
    elif job["framework"] in KERAS3_BACKENDS:
        import keras

        if keras.backend.backend() != KERAS3_BACKENDS[job["framework"]]:
            raise RuntimeError(f"{job['framework']} runs need KERAS_BACKEND={KERAS3_BACKENDS[job['framework']]} "
                               f"before keras is imported; this process has {keras.backend.backend()!r}")
        from bench.accuracy.keras_runs import run_keras3 as run
    else:
        if job["arm"] == "tfmot":
            from bench.bench_keras import ensure_tfmot
            note = ensure_tfmot()
            if note:
                raise RuntimeError(note)
        from bench.accuracy.keras_runs import run_keras as run
    record = run(spec, s, job["arm"], config, job["seed"])
    out = {k: v for k, v in job.items() if k != "setting_name"}
    return {**out, "setting": job["setting_name"], "key": run_key(job), **record}


def _worker_init() -> None:
    import torch
    torch.set_num_threads(1)
    try:
        from bench.accuracy.keras_runs import single_thread
        single_thread()
    except ImportError:     # pragma: no cover - TF not installed: torch-only runs
        pass


def _load(path: str) -> dict[str, Any]:
    if path and os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return {"runs": [], "commands": []}


def _save(path: str, data: dict[str, Any]) -> None:
    if path:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, path)


def render(data: dict[str, Any], plot_path: str = PLOT, write: bool = True) -> str:
    """The RESULTS.md section (and the plot) from the raw records."""
    from bench._results import publish
    from bench.accuracy import report

    runs = data["runs"]
    # the default figure belongs to the docs: drawn only when RESULTS.md is written too; a path given is drawn
    drawn = report.plot(runs, plot_path) if plot_path and (write or os.path.abspath(plot_path) != PLOT) else False
    body = report.render_tables(runs)
    across = report.render_frameworks(runs)
    if across:
        body += ("\n\nAcross frameworks: the same arm and setting, paired by seed (same initial weights and "
                 "batches), later framework minus earlier; within noise: |mean| < 2 SE (SE = std / sqrt(n)); "
                 "identical: seeds with equal test accuracy / equal masks (mask digests; older records have "
                 "none):\n\n" + across)
    if taught := report.render_distillation(runs):
        body += ("\n\nDistillation: each teacher arm against the same arm without a teacher (the trained dense "
                 "model of the seed teaches; same initial weights and batches), test accuracy, arm with teacher "
                 "minus arm without:\n\n" + taught)
    body += ("\n\nSeconds per training run (one thread, training only; wall time "
            "depends on the machine's load, process CPU time much less):\n\n" + report.render_timings(runs))
    body += ("\n\nPaired difference: per seed, arm minus the best peer of the same framework (the peer with the "
             "highest mean); std is the sample std over seeds (ddof=1); 'spread < difference' says whether that "
             "std is below the absolute mean difference. Same NumPy initial weights and batch order for every "
             "arm of a seed; final sparsity over the pruned layers (a pattern's misfits stay dense for every "
             "arm). torch runs: one thread, `torch.set_flush_denormal(True)`; tf-keras runs: one intra/inter-op "
             "thread, `model.fit` with the callback (sparsify) or `UpdatePruningStep` (tfmot, "
             "`begin_step`/`end_step` + 1); Keras 3 (JAX) runs: one process per run started with "
             f"`KERAS_BACKEND=jax`, `XLA_FLAGS='{XLA_ONE_THREAD}'`, CPU, `model.fit` on the NumPy batches in order "
             "(`shuffle=False`) with `sparsify_keras.PruningCallback`. " + _arms(data.get("runs", [])) +
             _versions() + "\n\nCommands: " +
             "; ".join(f"`{c}`" for c in dict.fromkeys(data.get("commands", []))))
    if drawn and os.path.abspath(plot_path) == PLOT:
        body += "\n\n![accuracy vs sparsity](../docs/img/accuracy_vs_sparsity.png)"
    for path in data.get("tuning", []):
        body += "\n\n" + render_tuning(path)
    publish("bench_accuracy", body, write=write)
    return body


def render_tuning(path: str) -> str:
    """The tables of a tuning file (``--tuning-json``): runs on seeds the tables above do not use, kept apart so
    that choosing an arm's settings does not pick the seeds it is reported on."""
    from bench.accuracy import report

    runs = _load(os.path.join(ROOT, path))["runs"]
    seeds = sorted({r["seed"] for r in runs})
    return (f"Tuning runs (`{path}`, seeds {', '.join(map(str, seeds))}: none of them in the tables above):\n\n"
            + report.render_tables(runs) + "\n\n" + _arms(runs))


def _arms(runs: list[dict[str, Any]]) -> str:
    """One sentence: each sparsify arm's config overrides on top of the base schedule."""
    arms = {}
    for r in runs:
        if r["arm"] not in PEER_ARMS and r["arm"] != "dense":
            arms.setdefault(r["arm"], json.dumps(r.get("overrides", {}), sort_keys=True))
    if not arms:
        return ""
    return "Arms (config overrides on the base schedule): " + "; ".join(
        f"{a} `{o}`" for a, o in sorted(arms.items())) + ". "


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for pkg in ("torch", "tensorflow", "tf-keras", "keras", "jax", "mnist1d"):
        try:
            out.append(f"{pkg} {version(pkg)}")
        except PackageNotFoundError:
            pass
    return ", ".join(out) + "."


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    split = lambda s: [x for x in s.split(",") if x]  # noqa: E731
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--first-seed", type=int, default=0,
                    help="seeds first-seed .. first-seed + seeds - 1 (tune on seeds the report does not use)")
    ap.add_argument("--frameworks", type=split, default=list(FRAMEWORKS))
    ap.add_argument("--datasets", type=split, default=["mnist1d", "digits"])
    ap.add_argument("--arms", type=split, default=["dense", "default", "torch.ao", "tfmot"])
    ap.add_argument("--arm-config", action="append", default=[], metavar="NAME=JSON",
                    help="define (or redefine) a sparsify arm by its config overrides")
    ap.add_argument("--settings", type=split, default=["80", "90", "95", "4x1", "2:4"])
    ap.add_argument("--steps", type=int, default=0, help="train this many steps (schedule scaled); 0 = the recipe")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out-json", default="", help="raw per-run records (appended; runs already there are skipped)")
    ap.add_argument("--report", action="store_true", help="only re-render RESULTS.md and the plot from --out-json")
    ap.add_argument("--plot", default=PLOT, help="plot path ('' for none)")
    ap.add_argument("--no-write", action="store_true", help="print the section, leave RESULTS.md alone")
    ap.add_argument("--tuning-json", default="", help="with --report: also show this file's runs (tuning seeds), "
                    "from now on (the path, relative to the repository root, is kept in --out-json)")
    ap.add_argument("--run-job", nargs=2, metavar=("IN", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.run_job:
        _run_job_file(*args.run_job)
        return {}
    for fw in args.frameworks:
        if fw not in FRAMEWORKS:
            raise SystemExit(f"--frameworks: unknown framework {fw!r}; choose from {list(FRAMEWORKS)}")
    custom = {}
    for item in args.arm_config:
        name, _, text = item.partition("=")
        custom[name] = json.loads(text)
    for arm in args.arms:
        if arm not in SPARSIFY_ARMS and arm not in PEER_ARMS and arm != "dense" and arm not in custom:
            raise SystemExit(f"--arms: unknown arm {arm!r}; choose from dense, {', '.join(SPARSIFY_ARMS)}, "
                             f"{', '.join(PEER_ARMS)} or define it with --arm-config")
        others = [fw for fw in args.frameworks if arm in PEER_ARMS and fw != PEER_ARMS[arm]]
        if others and not args.report:
            print(f"note: {arm} runs in {PEER_ARMS[arm]} only: not run for {', '.join(others)}", flush=True)
    data = _load(args.out_json)
    if args.tuning_json and args.tuning_json not in data.setdefault("tuning", []):
        data["tuning"].append(args.tuning_json)
        _save(args.out_json, data)
    if args.report:
        render(data, args.plot, write=not args.no_write)
        return data
    done = {r["key"] for r in data["runs"]}
    jobs = [j for j in plan(args, custom) if run_key(j) not in done]
    data["commands"].append("python -m bench.bench_accuracy " + " ".join(shlex.quote(a) for a in (
        argv if argv is not None else sys.argv[1:])))
    if any(j["arm"] == "tfmot" for j in jobs):
        from bench.bench_keras import ensure_tfmot
        note = ensure_tfmot()
        if note:
            raise SystemExit(note)
        import tensorflow_model_optimization as tfmot   # workers find it through $TFMOT_PATH
        os.environ["TFMOT_PATH"] = os.path.dirname(os.path.dirname(tfmot.__file__))
    t0 = time.perf_counter()
    print(f"{len(jobs)} runs to do ({len(done)} already in {args.out_json or 'memory'})", flush=True)
    if args.jobs <= 1:
        _worker_init()
        results = map(execute, jobs)
        pool = None
    else:
        pool = ProcessPoolExecutor(args.jobs, mp_context=get_context("spawn"), initializer=_worker_init)
        results = pool.map(execute, jobs)
    try:
        for i, r in enumerate(results, 1):
            data["runs"].append(r)
            _save(args.out_json, data)
            acc = f"acc {r['accuracy']:.4f} sparsity {r['sparsity']:.4f} {r['seconds']:.1f}s" \
                if r["status"] == "ok" else r["status"]
            print(f"[{i}/{len(jobs)} {time.perf_counter() - t0:.0f}s] {r['key']}: {acc}", flush=True)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    render(data, args.plot, write=not args.no_write)
    return data


if __name__ == "__main__":
    main()
