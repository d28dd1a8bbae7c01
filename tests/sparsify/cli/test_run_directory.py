"""`sparsify.cli.run_directory`: a run's outputs committed together with their manifest, and artifacts made from a
run's outputs recorded in it (interrupted and failing runs: test_demo_faults.py, test_interrupts.py)."""
from __future__ import annotations

import pytest

from sparsify.cli.atomic import write_bytes
from sparsify.cli.run_directory import MANIFEST, RunDirectory, register_derived, verify_run


# ----- artifacts made from a run's outputs (issue 58 item 6) ----------------------------------------------
def _commit(out, files: dict[str, bytes]) -> None:
    with RunDirectory(out, planned=list(files)) as run:
        for name, data in files.items():
            write_bytes(run.stage / name, data)
        run.commit({"command": "test"})


def test_an_export_beside_a_run_belongs_to_it_and_goes_with_it(tmp_path):
    from keras_archives import mlp_weights, write_keras_archive

    from sparsify.cli.export import export_model

    out = tmp_path / "run"
    model = lambda seed: write_keras_archive(tmp_path / f"m{seed}.keras", mlp_weights(seed)).read_bytes()  # noqa: E731
    _commit(out, {"model.keras": model(0), "config.yaml": b"a: 1\n"})
    res = export_model(out / "model.keras", to="npz")
    assert res.notes[-1] == (f"recorded in {out / MANIFEST}: a new run into that directory removes it with the "
                             "old run's files")
    derived = verify_run(out)["derived"]
    assert list(derived) == ["model.sparse.npz"] and derived["model.sparse.npz"]["source"] == "model.keras"
    _commit(out, {"model.keras": model(1), "config.yaml": b"a: 2\n"})      # the next run: no stale export left
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml", "model.keras", MANIFEST]
    assert "derived" not in verify_run(out)


def test_verify_run_refuses_stale_exports(tmp_path):
    from keras_archives import mlp_weights, write_keras_archive

    from sparsify.cli.export import export_model

    out = tmp_path / "run"
    _commit(out, {"model.keras": write_keras_archive(tmp_path / "m.keras", mlp_weights()).read_bytes()})
    (out / "model.tflite").write_bytes(b"an export of an earlier run, never recorded")
    with pytest.raises(ValueError, match=r"model\.tflite \(an export of model\.keras\) is not from this run: it is "
                                         r"stale; export model\.keras again or remove it$"):
        verify_run(out)
    (out / "model.tflite").unlink()
    res = export_model(out / "model.keras", to="npz")
    verify_run(out)
    with open(res.out, "ab") as fh:                        # changed after it was recorded: not the run's any more
        fh.write(b"x")
    with pytest.raises(ValueError, match=r"model\.sparse\.npz was made from model\.keras of another run, or changed "
                                         r"since: it is stale; export it again$"):
        verify_run(out)
    _commit(out, {"model.keras": b"new"})                  # a changed file is never removed, and still refused
    assert (out / "model.sparse.npz").exists()
    with pytest.raises(ValueError, match=r"model\.sparse\.npz \(an export of model\.keras\) is not from this run"):
        verify_run(out)
    elsewhere = tmp_path / "m.sparse.npz"                  # not beside the source in its run directory: not recorded
    elsewhere.write_bytes(b"x")
    assert register_derived(out / "model.keras", elsewhere) is False
    assert register_derived(tmp_path / "m.keras", elsewhere) is False


def test_a_run_replaces_only_what_the_previous_run_wrote(tmp_path):
    import hashlib

    out = tmp_path / "run"
    _commit(out, {"a.txt": b"1", "b.txt": b"1"})
    _commit(out, {"a.txt": b"2"})                          # b.txt, the old run's, goes with it
    assert sorted(p.name for p in out.iterdir()) == ["a.txt", MANIFEST]
    (out / "mine.txt").write_bytes(b"user")
    with pytest.raises(ValueError, match=r"already holds mine\.txt and it was not written by the previous run"):
        RunDirectory(out, planned=["mine.txt"])
    _commit(out, {"c.txt": b"3"})
    assert sorted(p.name for p in out.iterdir()) == ["c.txt", "mine.txt", MANIFEST]
    assert verify_run(out)["files"] == {"c.txt": {"size": 1, "sha256": hashlib.sha256(b"3").hexdigest()}}
    (out / "c.txt").write_bytes(b"4")
    with pytest.raises(ValueError, match=r"c\.txt differs from what sparsify-run\.json lists"):
        verify_run(out)
