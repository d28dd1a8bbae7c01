"""bench/_results.py: a benchmark's section of RESULTS.md, rewritten alone, naming the machine it ran on."""
from __future__ import annotations

import platform

from bench import _results


def test_a_section_is_replaced_and_the_others_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(_results, "RESULTS", tmp_path / "RESULTS.md")
    _results.write_section("first", "| a |\n|---|\n| 1 |")
    _results.write_section("second", "two")
    _results.write_section("first", "| a |\n|---|\n| 2 |")
    text = (tmp_path / "RESULTS.md").read_text()
    assert text.startswith(_results.HEADER)
    assert text.count("<!-- first:start -->") == 1 and "| 2 |" in text and "| 1 |" not in text
    assert text.index("<!-- first:start -->") < text.index("<!-- second:start -->")
    assert "\n\ntwo\n<!-- second:end -->" in text


def test_the_machine_line_names_the_processor_model(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n")
    assert _results.cpu_model(str(cpuinfo)) == f"AMD EPYC 7B13 ({platform.machine()})"
    assert _results.cpu_model(str(tmp_path / "missing")) == (platform.processor() or platform.machine())
    line = _results.machine_line()
    assert line.startswith("_") and line.endswith("_") and f", {_results.cpu_model()}, " in line
