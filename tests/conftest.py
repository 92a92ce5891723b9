import logging
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.procs import SCOPE


@pytest.fixture
def as_the_serverapp(monkeypatch):
    """This process's identity as the ServerApp's (Flower's Message needs it), as the in-process Grid sets it."""
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.task_identity import TaskIdentity

    for attr, value in (("task_id", 1), ("run_id", 1), ("node_id", SUPERLINK_NODE_ID)):
        monkeypatch.setattr(TaskIdentity, f"_{attr}", value)


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


# With pytest-xdist (the README's test command: `python -m pytest -n 4 --dist loadgroup`), three groups of tests run
# one test at a time each, on one worker each, while the other tests go to whichever worker is free:
# - "ray": every run through Ray (Flower's simulation, a Ray cluster). Each starts a Ray of its own, and side by
#   side at load 12 on 2 cores they starve each other's start-up: `ray start --head` of the two-node cluster failed
#   beside the other Ray runs (docs/testing.md, "Under load");
# - "deploy": the deployments of real SuperLinks and SuperNodes (no Ray; real round deadlines; their processes
#   are told apart by their own FLWR_HOME, so they may run beside a Ray run);
# - "cli": test_cli's `zofl run`s with stand-ins (no Ray, subprocess-heavy), one at a time beside the others.
# Every other test is self-contained: no process outlives it, no port is held across calls, and the tests with
# real deadlines keep margins that hold at load 12 on 2 cores (docs/testing.md). The tests that look for what a
# finished `zofl run` left behind count only the processes started from their own worker (tests/procs.py:
# left_behind reads ZOFL_TEST_SCOPE, set here per process and inherited by everything it starts). Four workers on
# two cores: on a shared machine each runnable process gets its share of the cores, so the suite's share grows
# with the processes it keeps busy (docs/testing.md, "Under load"). The groups hold only with pytest < 9.2
# (pyproject.toml; tests/test_groups.py checks it).
HERE = Path(__file__).resolve().parent
EXPERIMENT_TESTS = HERE.parent / "experiments" / "tests"
RAY_MODULES = {"test_flower_e2e", "test_ray_cluster"}
DEPLOY_MODULES = {"test_deploy"}
CLI_MODULES = {"test_cli"}
os.environ[SCOPE] = f"{os.getpid()}-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"


def group_of(module: str, flower: bool) -> str | None:
    """The xdist group of a test of ``module`` (marked ``flower`` or not), None for the free pool."""
    if module in RAY_MODULES:
        return "ray"
    if module in CLI_MODULES:
        return "cli"
    if flower:
        return "deploy" if module in DEPLOY_MODULES else "ray"
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups into the test ids
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.parent not in (HERE, EXPERIMENT_TESTS):  # the experiments' smoke tests too (one runs Ray)
            continue
        group = group_of(item.path.stem, item.get_closest_marker("flower") is not None)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_sessionstart(session):
    """A second pytest session in one process (mutmut runs several) gets Flower's console handler back: Flower binds
    it to sys.stdout when it is imported, which under pytest is the capture of the session that imported it, closed
    when that session ended; a log line would then print "--- Logging error ---" into the test's captured stderr."""
    for handler in logging.getLogger("flwr").handlers:
        if isinstance(handler, logging.StreamHandler) and getattr(handler.stream, "closed", False):
            handler.stream = sys.stdout  # not setStream: it flushes the closed stream first
