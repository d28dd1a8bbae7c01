"""Write one benchmark's section into bench/RESULTS.md without touching the others.

Example:
    >>> from bench._results import write_section  # doctest: +SKIP
    >>> write_section("bench_masks", "| case | ms |\n|---|---|\n| 90% | 12.0 |")  # doctest: +SKIP
"""
from __future__ import annotations

import datetime
import os
import platform
import re
from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")
HEADER = "# Benchmark results\n\nEach section is rewritten by the script that names it; ratios are measured within one run.\n"


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The processor's model name (from ``cpuinfo``, Linux's: timings are only comparable on the same one),
    else what :mod:`platform` knows (``x86_64``)."""
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return f"{line.split(':', 1)[1].strip()} ({platform.machine()})"
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_line() -> str:
    """One line describing where and when a benchmark ran."""
    return (f"_{datetime.date.today().isoformat()}, {cpu_model()}, "
            f"{os.cpu_count()} cores, Python {platform.python_version()}_")


def write_section(name: str, body: str) -> None:
    """Replace (or append) the section ``name`` of RESULTS.md with ``body``."""
    text = RESULTS.read_text() if RESULTS.exists() else HEADER
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n## {name}\n\n{machine_line()}\n\n{body.strip()}\n{end}"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    text = pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    RESULTS.write_text(text)


def publish(name: str, body: str, write: bool = True) -> None:
    """Print a benchmark's table and, unless ``write`` is False, store it with :func:`write_section`."""
    print(body)
    if write:
        write_section(name, body)
