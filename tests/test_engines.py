"""One core, three engines: every method gives the frozen reference numbers (tests/reference/,
made before the engines were split), through the Message-API engine and the legacy engine, here on
the in-process Grid (the same ServerApp code as under ``flwr run``; the runs through the real Ray
simulation are in test_flower_e2e.py).

The two engines agree with each other bit for bit (records and final model), on any machine. Against
the frozen numbers the floats are compared to 1e-12 relative: numpy picks its SIMD kernels by CPU
(AVX-512 here, AVX2 where the reference was frozen), and a reduction's last bit differs between them
(measured: at most 4.4e-16 relative over all ten runs; ``NPY_DISABLE_CPU_FEATURES=X86_V4,...`` gives
the frozen bits exactly); everything else (rounds, sampled clients, counts) must be equal."""
import json
from pathlib import Path

import numpy as np
import pytest

from zofl.inprocess import run_inprocess
from zofl.results import read_rounds

from .reference.freeze import COMPARED

REFERENCE = json.loads((Path(__file__).parent / "reference" / "rounds.json").read_text())
# The old engine summed flwr-fedavg's replies in the legacy Server's set-iteration order (arbitrary:
# by object address), so its last bits were never reproducible; every engine now hands Flower the
# replies in client order. The 1e-12 below covers it too; between engines: exact.


def figures(run_dir):
    return [{k: r.get(k) for k in COMPARED if k in r} for r in read_rounds(run_dir)]


def run(tmp_path, name, engine, **extra):
    ref = REFERENCE[name]
    return run_inprocess({**ref["run-config"], "engine": engine, "output-dir": str(tmp_path),
                          "run-name": f"{name}-{engine}", **extra}, workers=0)


def assert_reference(got, ref_rounds):
    assert len(got) == len(ref_rounds)
    for a, b in zip(got, ref_rounds):
        floats = {k for k, v in b.items() if isinstance(v, float)}
        assert {k: a[k] for k in floats} == pytest.approx({k: b[k] for k in floats}, rel=1e-12, nan_ok=True), (a, b)
        assert {k: v for k, v in a.items() if k not in floats} == {k: v for k, v in b.items() if k not in floats}


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_every_method_gives_the_reference_numbers_in_both_engines(tmp_path, name):
    (d_sync, x_sync), (d_legacy, x_legacy) = run(tmp_path, name, "sync"), run(tmp_path, name, "legacy")
    assert_reference(figures(d_sync), REFERENCE[name]["rounds"])
    assert figures(d_legacy) == figures(d_sync)  # the two engines: bit for bit
    np.testing.assert_array_equal(x_legacy, x_sync)


def test_flower_fedavg_cross_check_is_identical_in_both_apis(tmp_path):
    (d1, x1), (d2, x2) = run(tmp_path, "flwr-fedavg", "sync"), run(tmp_path, "flwr-fedavg", "legacy")
    np.testing.assert_array_equal(x1, x2)
    assert figures(d1) == figures(d2)
