from pathlib import Path

import numpy as np
import pytest


@pytest.fixture
def fake_npz_dir(tmp_path):
    """A tiny Keras-style mnist.npz (random 28x28 uint8 images with label-dependent means)."""
    rng = np.random.default_rng(0)

    def make(n):
        y = rng.integers(0, 10, n).astype(np.uint8)
        x = (rng.integers(0, 60, (n, 28, 28)) + y[:, None, None] * 19).astype(np.uint8)
        return x, y

    xtr, ytr = make(900)
    xte, yte = make(100)
    np.savez(tmp_path / "mnist.npz", x_train=xtr, y_train=ytr, x_test=xte, y_test=yte)
    return tmp_path


# With pytest-xdist (the README's test command: `python -m pytest -n 2 --dist loadgroup`), these modules' tests
# run one at a time on one worker, while the other worker takes the rest: the runs through Flower (Ray, SuperLinks,
# SuperNodes), the tests with real deadlines or sleeps, and those that look for processes left behind (a
# Ray start beside another, or a scan of /proc during another test's teardown, would make them slower or
# wrong). Every other test is self-contained: no process outlives it, no port, no timing.
HERE = Path(__file__).resolve().parent
SERIAL = {"test_flower_e2e", "test_deploy", "test_ray_cluster", "test_benchmarks", "test_faults", "test_failure_policy",
          "test_async", "test_async_records", "test_launch", "test_compare", "test_cli", "test_fleet_proxy",
          "test_fuzz_inputs"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.parent == HERE and item.path.stem in SERIAL:
            item.add_marker(pytest.mark.xdist_group("serial"))
