"""One core, three engines: every method gives the frozen reference numbers (tests/reference/,
made before the engines were split), through the Message-API engine and the legacy engine, here on
the in-process Grid (the same ServerApp code as under ``flwr run``; the runs through the real Ray
simulation are in test_flower_e2e.py).

The two engines agree with each other bit for bit (records and final model), on any machine. Against
the frozen numbers the floats are compared to 1e-12 relative: numpy picks its SIMD kernels by CPU
(AVX-512 here, AVX2 where the reference was frozen), and a reduction's last bit differs between them
(measured: at most 4.4e-16 relative over all ten runs); everything else (rounds, sampled clients,
counts) must be equal. With the AVX-512 kernels switched off (``NPY_DISABLE_CPU_FEATURES``) the final
models are the frozen bits exactly: the last test checks their stored digests."""
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


@pytest.mark.skipif(__import__("platform").machine() not in ("x86_64", "AMD64"), reason="x86 SIMD kernels")
def test_final_models_are_the_frozen_bits_with_the_freezing_machines_kernels():
    """With numpy's AVX-512 kernels switched off and OpenBLAS's Haswell kernels chosen (the reference
    was frozen on an AVX2 machine; OpenBLAS picks its kernels by CPU model, not by numpy's features,
    and on an AVX-512 machine sums in another order) every run's final model has the stored digest
    (x_sha256), bit for bit; flwr-fedavg's old engine summed
    in an arbitrary order (see REFERENCE above), so its digest was never reproducible."""
    import os
    import subprocess
    import sys

    import numpy

    core = getattr(numpy, "_core", None) or numpy.core
    dispatch = getattr(core._multiarray_umath, "__cpu_dispatch__", [])
    script = """
import json, logging, sys, tempfile
from pathlib import Path
logging.disable(logging.CRITICAL)
from zofl.inprocess import run_inprocess
from tests.reference.freeze import x_digest
ref = json.loads(Path("tests/reference/rounds.json").read_text())
with tempfile.TemporaryDirectory() as d:
    for name, r in ref.items():
        if name != "flwr-fedavg":
            _, x = run_inprocess({**r["run-config"], "output-dir": d, "run-name": name}, workers=0)
            print(name, x_digest(x) == r["x_sha256"])
"""
    newer = [f for f in dispatch if f.startswith(("AVX512", "X86_V4"))]  # above the freezing machine's AVX2
    env = {**os.environ, "NPY_DISABLE_CPU_FEATURES": " ".join(newer), "OPENBLAS_CORETYPE": "Haswell"}
    res = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parent.parent, env=env,
                         capture_output=True, text=True, check=True)
    lines = [ln for ln in res.stdout.splitlines() if ln.endswith((" True", " False"))]
    assert len(lines) == len(REFERENCE) - 1 and all(ln.endswith(" True") for ln in lines), res.stdout


def _unfrozen_synchronous() -> list[str]:
    from zofl.core.method import ASYNC
    from zofl.methods import METHODS

    return [n for n, e in METHODS.items() if e.server.kind != ASYNC and n not in REFERENCE]


@pytest.mark.parametrize("name", _unfrozen_synchronous())
def test_every_other_registered_synchronous_method_is_the_same_in_both_engines(tmp_path, name):
    """The registry's synchronous methods with no frozen reference (a new method, the phased ones, the controls):
    the Message-API and legacy engines give each other's records and final model bit for bit."""
    from tests.test_config import small_run

    cfg = {**small_run(name), "output-dir": str(tmp_path)}
    d_sync, x_sync = run_inprocess({**cfg, "engine": "sync", "run-name": "sync"}, workers=0)
    d_legacy, x_legacy = run_inprocess({**cfg, "engine": "legacy", "run-name": "legacy"}, workers=0)
    assert figures(d_legacy) == figures(d_sync) and len(figures(d_sync)) > 1
    np.testing.assert_array_equal(x_legacy, x_sync)
