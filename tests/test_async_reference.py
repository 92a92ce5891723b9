"""The asynchronous engine gives the frozen reference numbers (tests/reference/async_rounds.json, made by
tests/reference/freeze_async.py): per-update figures of FedBuff with stale replies and of AFBO with APHE's
random depth, the methods the synchronous references (test_engines.py) do not run.

Floats are compared at 1e-10 relative (1e-12 absolute for values near 0, such as the sum of a softmax
model): far above the last-bit differences of numpy's SIMD kernels between CPUs (at most 4.4e-16 relative
a reduction, test_engines.py), far below any change of a method; everything else (who was applied, with
which staleness, outer/inner steps, delays) must be equal."""
import json
import math
from pathlib import Path

import pytest

from zofl.inprocess import run_inprocess

from .reference.freeze_async import figures, model_figures

REFERENCE = json.loads((Path(__file__).parent / "reference" / "async_rounds.json").read_text())


def same(got, want, where=""):
    """Floats at 1e-10 relative (1e-12 absolute), all else equal, through lists and dicts."""
    if isinstance(want, float):
        assert isinstance(got, float) and (got == pytest.approx(want, rel=1e-10, abs=1e-12) or
                                           (math.isnan(got) and math.isnan(want))), (where, got, want)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), (where, got, want)
        for k in want:
            same(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (where, got, want)
        for i, (a, b) in enumerate(zip(got, want)):
            same(a, b, f"{where}[{i}]")
    else:
        assert got == want and type(got) is type(want), (where, got, want)


def test_the_references_exercise_what_they_guard():
    stale = [s for r in REFERENCE["fedbuff-stale"]["rounds"][1:] for s in r["staleness"]]
    assert max(stale) >= 3 and stale.count(0) >= 2
    assert REFERENCE["fedbuff-slow-client"]["rounds"][-1]["staleness"] == [9]
    for name in ("afbo-random-depth", "afbo-hyper-cleaning"):
        assert REFERENCE[name]["run-config"].get("aphe", "random-depth") == "random-depth"
        assert sum(r.get("step") == "outer" for r in REFERENCE[name]["rounds"]) >= 3


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_the_asynchronous_engine_gives_the_reference_numbers(tmp_path, name):
    ref = REFERENCE[name]
    d, x = run_inprocess({**ref["run-config"], "output-dir": str(tmp_path), "run-name": name}, workers=0)
    got = figures(d)
    assert len(got) == len(ref["rounds"])
    for k, (a, b) in enumerate(zip(got, ref["rounds"])):
        same(a, b, f"{name} record {k}")
    same(model_figures(x), ref["x"], f"{name} x")
