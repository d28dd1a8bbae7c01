"""bench.mask_scale: one real (small) case in this process, and the table and targets from literal results."""
from unittest import mock

import pytest

from bench import mask_scale


@pytest.mark.parametrize("scope, pattern, criterion", [("local", "2:4", "wanda"), ("global", "1x1", "magnitude")])
def test_one_case_times_both_thread_counts_and_measures_memory(scope, pattern, criterion):
    with mock.patch.dict(mask_scale.SIZES, {"tiny": [("layer", (64, 64), 3)]}):
        r = mask_scale.run_case("tiny", scope, pattern, criterion, repeat=1)
    assert r["weights"] == 3 * 64 * 64 and r["weight_bytes"] == 4 * 3 * 64 * 64
    assert set(r["seconds"]) == set(r["cpu_seconds"]) == {1, 2} and all(s > 0 for s in r["seconds"].values())
    assert r["peak_extra_bytes"] >= 0 and r["live_peak_bytes"] >= r["weights"] // 8     # the masks, at least


def test_table_and_targets_literal():
    r = {"size": "400M", "scope": "local", "pattern": "1x1", "criterion": "magnitude", "weights": 400_000_000,
         "weight_bytes": 1_600_000_000, "seconds": {"1": 4.0, "2": 2.0}, "cpu_seconds": {"1": 4.0, "2": 4.4},
         "peak_extra_bytes": 800_000_000, "live_peak_bytes": 400_000_000}
    small = {**r, "size": "10M", "weights": 10_000_000, "weight_bytes": 40_000_000,
             "seconds": {"1": 0.1, "2": 0.06}, "cpu_seconds": {"1": 0.1, "2": 0.1}, "peak_extra_bytes": 30_000_000,
             "live_peak_bytes": 12_000_000}
    huge = {**r, "size": "1B", "weights": 1_000_000_000, "weight_bytes": 4_000_000_000,
            "seconds": {"1": 8.0, "2": 4.5}, "peak_extra_bytes": 1_000_000_000}
    assert mask_scale._table([r]).splitlines()[-1] == (
        "| 400M | local | 1x1 90% | magnitude | 4.00 (10.00) | 2.00 (5.00) | 2.00x | 10.00 / 11.00 | 0.80 (0.50) / "
        "0.40 (0.25) |")
    assert mask_scale._targets([small, r]) == (
        "Local 1x1 90% (magnitude), 2 threads, ns/weight by size: 10M 6.00, 400M 5.00; largest over smallest 1.20 "
        "(target <= 1.3). At 400M: 5.00 ns/weight with 2 threads (target <= 8), 2.00x faster than 1 thread "
        "(target >= 1.7). Largest peak extra memory over all cases: 0.75x the weights (target <= 1; 10M local 1x1 "
        "magnitude, 30 MB), from 100M on 0.50x. Largest peak of the arrays the update holds (tracemalloc): 0.30x "
        "(10M local 1x1 magnitude).")
    assert "6.00, 400M 5.00, 1B 4.50; largest over smallest 1.33 (target <= 1.3), from 100M on 1.11." in \
        mask_scale._targets([small, r, huge])


def test_unknown_size_is_refused():
    with pytest.raises(SystemExit, match=r"--sizes: unknown \['2B'\]"):
        mask_scale.main(["--sizes", "10M,2B", "--no-write"])


def test_unknown_scope_is_refused():
    with pytest.raises(SystemExit, match=r"--scopes: unknown \['row'\]"):
        mask_scale.main(["--scopes", "local,row", "--no-write"])


def test_model_bytes_and_a_case_skipped_for_memory(tmp_path, capsys):
    assert mask_scale.model_bytes("100M") == 6 * 4096 * 4096 * 4
    assert mask_scale.model_bytes("1B") == 4 * (50000 * 4096 + 48 * 4096 * 4096)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       1000 kB\nMemAvailable:      2048 kB\n")
    assert mask_scale.available_bytes(str(meminfo)) == 2048 * 1024
    with mock.patch.object(mask_scale, "available_bytes", lambda: 1000):
        mask_scale.main(["--quick", "--sizes", "10M", "--scopes", "local", "--no-write"])
    out = capsys.readouterr().out
    assert "Skipped for want of memory on this shared machine: 10M local 1x1 magnitude (needs ~0.1 GB, 0.0 GB" in out
