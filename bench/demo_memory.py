"""Peak memory of ``sparsify demo`` against ``--steps`` (issue 58: flat, 100,000 steps within 10% of 300).

Run: ``.venv/bin/python -m bench.demo_memory`` (writes the ``demo_memory`` section of bench/RESULTS.md;
``--no-write`` prints only; ``--seconds S`` bounds the long run, default 120; ``--frameworks`` a
comma-separated subset of torch, tf-graph, keras, tf-keras; ``--baseline DIR`` also measures the long run
of the Keras demos from another checkout, e.g. one before a change, for comparison).

Per framework, two fresh processes of ``python -m sparsify demo --framework F --no-progress`` (``keras``
on JAX: ``KERAS_BACKEND=jax``):

* ``--steps 300`` runs to the end;
* ``--steps 100000`` (two phases of 100,000 steps: minutes to hours) is stopped with SIGKILL after
  ``--seconds`` seconds, once past its start-up.

The figure is the peak resident set size of the process (the kernel's high-water mark ``VmHWM`` of
/proc/PID/status): for the short run read by the process itself when the command has returned (before
the interpreter's teardown), for the long run read from outside right before it is killed, so it covers
its first ``--seconds``: everything a demo builds before its first step (the old Keras demos' batches for
every step) is in it. The long run's ``VmHWM`` is also read halfway through: a peak that still grew
between the two readings would show a leak per step. The steps the long run reached come from its progress lines (a log,
stderr not a terminal, so plain lines at least every 30 s).
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FRAMEWORKS = ("torch", "tf-graph", "keras", "tf-keras")
SHORT, LONG = 300, 100_000


def _env(root: Path, framework: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(root), TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("KERAS_BACKEND", None)
    if framework == "keras":        # also understood by a checkout before --backend
        env["KERAS_BACKEND"] = "jax"
    return env


# `sparsify ARGS` in this process, then its peak RSS before the interpreter's teardown (which, for torch,
# touches ~130 MiB more on the way out: no part of the demo's work, and never reached by a killed run).
_WRAPPER = """
import os, sys
from sparsify.cli import main
rc = main(sys.argv[1:])
sys.stdout.flush()
with open("/proc/self/status") as fh:
    peak = [line.split()[1] for line in fh if line.startswith("VmHWM:")]
sys.stderr.write(f"peak-rss-kib {peak[0]}\\n")
sys.stderr.flush()
os._exit(rc)
"""


def _command(framework: str, steps: int, progress: bool) -> list[str]:
    cmd = [sys.executable, "-c", _WRAPPER, "demo", "--framework", framework, "--steps", str(steps)]
    return cmd + ([] if progress else ["--no-progress"])


def vm_hwm_kib(pid: int) -> int | None:
    """``VmHWM`` (peak resident set, KiB) of a live process from /proc, or None when it cannot be read.

    Example:
        >>> vm_hwm_kib(os.getpid()) > 0
        True
    """
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def steps_reached(log: str) -> int | None:
    """The last ``n`` of the progress lines ``phase: pct% n/total [...]`` in a demo's stderr.

    Example:
        >>> steps_reached("dense:  10% 20000/200000 [0:30, 1.0 ms/step]\\ndense:  20% 40000/200000 [0:58]\\n")
        40000
    """
    found = re.findall(r"^\w+: +\d+% (\d+)/\d+ \[", log, re.M)
    return int(found[-1]) if found else None


def run_full(framework: str, root: Path) -> tuple[int, float]:
    """Peak RSS (KiB) and seconds of a ``--steps 300`` demo run to its end."""
    t0 = time.perf_counter()
    proc = subprocess.run(_command(framework, SHORT, False), env=_env(root, framework), cwd=root,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = re.findall(r"^peak-rss-kib (\d+)$", proc.stderr, re.M)
    if proc.returncode != 0 or not peak:
        raise SystemExit(f"{framework} --steps {SHORT} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return int(peak[-1]), time.perf_counter() - t0


def run_bounded(framework: str, root: Path, seconds: float) -> tuple[int, int | None, int | None]:
    """Peak RSS (KiB) of a ``--steps 100000`` run when killed after ``seconds``; halfway; steps reached."""
    log = Path(f"/tmp/demo_memory_{os.getpid()}_{framework}.log")
    with open(log, "w") as fh:
        proc = subprocess.Popen(_command(framework, LONG, True), env=_env(root, framework), cwd=root,
                                stdout=subprocess.DEVNULL, stderr=fh)
    time.sleep(seconds / 2)
    half = vm_hwm_kib(proc.pid)
    time.sleep(seconds / 2)
    peak = vm_hwm_kib(proc.pid)
    if proc.poll() is not None or peak is None:
        raise SystemExit(f"{framework} --steps {LONG} ended within {seconds} s: {log.read_text()[-2000:]}")
    proc.kill()
    proc.wait()
    text = log.read_text()
    log.unlink()
    return peak, half, steps_reached(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120.0, help="how long the --steps 100000 run lasts")
    ap.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    ap.add_argument("--baseline", type=Path, default=None, help="another checkout: its Keras demos' long run too")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)
    frameworks = [f for f in args.frameworks.split(",") if f]
    if not frameworks or any(f not in FRAMEWORKS for f in frameworks):
        ap.error(f"--frameworks: a comma-separated subset of {','.join(FRAMEWORKS)}, got {args.frameworks!r}")
    rows = ["| framework | peak RSS, --steps 300 (MiB) | peak RSS, --steps 100000, first "
            f"{args.seconds:g} s (MiB) | at {args.seconds / 2:g} s (MiB) | steps reached (of 200000) | long / short |",
            "|---|---:|---:|---:|---:|---:|"]
    worst = 0.0
    for f in frameworks:
        short, secs = run_full(f, ROOT)
        long_, half, reached = run_bounded(f, ROOT, args.seconds)
        ratio = long_ / short
        worst = max(worst, abs(ratio - 1))
        rows.append(f"| {f}{' (JAX)' if f == 'keras' else ''} | {short / 1024:.0f} | {long_ / 1024:.0f} | "
                    f"{'-' if half is None else f'{half / 1024:.0f}'} | {reached if reached is not None else '-'} | "
                    f"{ratio:.3f} |")
        print(rows[-1], flush=True)
    body = "\n".join(rows)
    body += (f"\n\nLargest difference, 100,000 against 300 steps: {100 * worst:.1f}% (target: within 10%: "
             f"{'met' if worst <= 0.10 else 'NOT met'}).")
    if args.baseline is not None:
        base = []
        for f in (f for f in frameworks if f in ("keras", "tf-keras")):
            short, _ = run_full(f, args.baseline)
            long_, _, reached = run_bounded(f, args.baseline, args.seconds)
            base.append(f"{f} {short / 1024:.0f} -> {long_ / 1024:.0f} MiB ({long_ / short:.2f}x"
                        f"{'' if reached is None else f', {reached} steps reached'})")
            print(base[-1], flush=True)
        body += (f"\n\nBefore (`{args.baseline}`, the Keras demos building every batch up front), same method, "
                 "--steps 300 -> --steps 100000: " + "; ".join(base) + ".")
    body += ("\n\nMethod: peak resident set (`VmHWM`) of a process running `sparsify demo --framework F`; "
             "`--steps 300` runs to its end (read when the command returns, before the interpreter's teardown), "
             f"`--steps 100000` is read from /proc after {args.seconds:g} s (and halfway), then killed; "
             "keras runs on JAX (`KERAS_BACKEND=jax`). "
             f"Command: `python -m bench.demo_memory --seconds {args.seconds:g}"
             f"{'' if args.baseline is None else ' --baseline DIR'}`.")
    print(body)
    if not args.no_write:
        from bench._results import write_section
        write_section("demo_memory", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
