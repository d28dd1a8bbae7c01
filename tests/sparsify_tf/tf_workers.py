"""Start TensorFlow worker processes on localhost with TF_CONFIG (MultiWorkerMirroredStrategy tests)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def tf_config(ports: list[int], index: int) -> str:
    """The TF_CONFIG of worker ``index`` (worker 0 is the chief)."""
    return json.dumps({"cluster": {"worker": [f"localhost:{p}" for p in ports]},
                       "task": {"type": "worker", "index": index}})


def run_workers(script: str, tmp_path: Path, n: int = 2, timeout: float = 240, args: tuple = ()) -> list[dict]:
    """Run ``script`` in ``n`` worker processes; each writes its JSON result to ``sys.argv[1]``."""
    ports = free_ports(n)
    path = tmp_path / "worker_script.py"
    path.write_text(script)
    procs, outs = [], []
    for i in range(n):
        out = tmp_path / f"worker{i}.json"
        outs.append(out)
        env = {**os.environ, "TF_CONFIG": tf_config(ports, i), "TF_CPP_MIN_LOG_LEVEL": "2",
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               "OMP_NUM_THREADS": "1"}
        procs.append(subprocess.Popen([sys.executable, str(path), str(out), *map(str, args)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(tmp_path)))
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for i, p in enumerate(procs):
        assert p.returncode == 0, f"worker {i} failed:\n{logs[i][-4000:]}"
    return [json.loads(o.read_text()) for o in outs]


#: Worker-script code (needs numpy as np): the Wanda configs (local, global), the initial kernels and the
#: global batches of the multi-worker reference tests, whose two halves differ in scale.
WANDA_HALVES = """
GLOBAL, HALF, STEPS = 16, 8, 5
CONFIGS = {scope: {"criterion": "wanda", "pruning_scope": scope, "init_sparsity": 0.25,
                   "target_sparsity": 0.5, "start_step": 0, "end_step": 4, "pruning_frequency": 2}
           for scope in ("local", "global")}
NAMES = ("fc1/kernel", "fc2/kernel")


def init():
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((16, 32)) * 0.3).astype(np.float32),
            (rng.standard_normal((32, 8)) * 0.3).astype(np.float32)]


def global_batches():
    rng = np.random.default_rng(1)
    out = []
    for _ in range(STEPS):
        x = rng.standard_normal((GLOBAL, 16)).astype(np.float32)
        x[HALF:] *= 5.0                                # worker 1's half: 5 times the scale
        out.append((x, rng.integers(0, 8, GLOBAL).astype(np.int32)))
    return out
"""
