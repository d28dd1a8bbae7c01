"""Suite-wide settings, for the tests and the docstring examples of every package (collected from
sparsify/, sparsify_tf/ and sparsify_torch/): quiet TensorFlow, deterministic hashing, few threads on 2-core CI,
and TensorFlow's oneDNN kernels on every x86 CPU (TF turns them on by default on Intel CPUs only; without them
TF has no CPU gradient for grouped convolutions, "Gradients for grouped convolutions are not supported on CPU",
so the suite would depend on the CI machine's vendor)."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("PYTHONHASHSEED", "0")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")


def pytest_ignore_collect(collection_path, config):
    """Conftest files hold no docstring examples: --doctest-modules would import each one as a test module,
    and the several ``conftest.py`` of tests/ (no packages) then clash by basename. They still load as
    conftests."""
    if collection_path.name == "conftest.py":
        return True
    return None
