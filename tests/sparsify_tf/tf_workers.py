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
