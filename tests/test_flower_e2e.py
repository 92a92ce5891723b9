"""End to end through the real Flower machinery: a SuperLink with the Ray simulation backend,
``flwr run`` submitting this App, ServerApp + ClientApps in Ray actors. No mocks."""
import json
import subprocess
from pathlib import Path

import pytest

from zofl.inprocess import run_inprocess
from zofl.launch import local_superlink
from zofl.results import read_rounds

pytestmark = pytest.mark.flower


@pytest.fixture(scope="module")
def superlink(tmp_path_factory):
    work = tmp_path_factory.mktemp("superlink")
    with local_superlink(work) as sl:
        yield sl
    assert sl.proc.poll() is not None  # stopped
    left = subprocess.run(["pgrep", "-f", str(work)], capture_output=True, text=True).stdout.split()
    assert not left, f"processes left behind: {left}"


def run_both(superlink, cfg: dict, num_supernodes: int) -> tuple[list[dict], list[dict]]:
    """The run's records through Flower (it must succeed) and the same run-config's in-process."""
    res = superlink.run(cfg, num_supernodes=num_supernodes)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    d, _ = run_inprocess({**cfg, "run-name": cfg["run-name"] + "-inprocess"}, workers=0)
    return read_rounds(Path(cfg["output-dir"]) / cfg["run-name"]), read_rounds(d)


def losses(records: list[dict]) -> list[float]:
    return [r["test_loss"] for r in records]


def test_zohfl_runs_through_flower_and_matches_in_process(superlink, tmp_path):
    cfg = {"num-rounds": 3, "num-clients": 5, "beta": 0.6, "tau": 5.0, "uplink": "vectors", "straggler-prob": 0.2,
           "output-dir": str(tmp_path), "run-name": "flower"}
    res = superlink.run(cfg, num_supernodes=5)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert "ZO-HFL on digits: 3 rounds" in out  # the end-of-run summary
    rec = read_rounds(tmp_path / "flower")
    assert [r["round"] for r in rec] == [0, 1, 2, 3]
    assert all(r["participants"] == 3 and r["uplink_bytes"] > 0 for r in rec[1:])
    summary = json.loads((tmp_path / "flower" / "summary.json").read_text())
    assert summary["final_test_acc"] == rec[-1]["test_acc"]
    # the same seed in-process (no Ray, no SuperLink) gives the same numbers
    d, _ = run_inprocess({**cfg, "run-name": "inprocess"}, workers=0)
    ref = read_rounds(d)
    for a, b in zip(rec, ref):
        assert (a["test_loss"], a["f2_est"], a["sampled"]) == (b["test_loss"], b["f2_est"], b["sampled"])


def test_scaffold_state_survives_flower_rounds(superlink, tmp_path):
    # Simulated clients are rebuilt every round; SCAFFOLD's c_i must come back from context.state,
    # so the Flower run matches the in-process run (which keeps the state itself) number for number.
    cfg = {"strategy": "scaffold", "num-rounds": 3, "num-clients": 4, "beta": 1.0, "tau": 3.0,
           "output-dir": str(tmp_path), "run-name": "scaffold"}
    rec, ref = run_both(superlink, cfg, 4)
    assert losses(rec) == losses(ref)


def test_fedrzo_nn_runs_through_flower(superlink, tmp_path):
    cfg = {"strategy": "fedrzo-nn", "task": "relu-net", "num-rounds": 2, "num-clients": 3, "beta": 1.0,
           "local-steps": 5, "zo-lr": 1e-4, "loss-scale": "sum", "output-dir": str(tmp_path),
           "run-name": "rzo"}
    rec, ref = run_both(superlink, cfg, 3)
    assert losses(rec) == losses(ref)


def test_fedrzo_bl_runs_through_flower_counting_lower_rounds(superlink, tmp_path):
    # every lower-level FedAvg round is a Flower round: 2 upper rounds with R~ = 1, 1 = 2 * (2 * 1 + 1)
    cfg = {"strategy": "fedrzo-bl", "task": "hyper-logistic", "num-rounds": 2, "num-clients": 3, "beta": 1.0,
           "local-steps": 3, "lower-rounds": 1, "lower-rounds-growth": 0.5, "zo-lr": 0.01, "eta": 0.01,
           "output-dir": str(tmp_path), "run-name": "bl"}
    rec, ref = run_both(superlink, cfg, 3)
    assert [r.get("phase") for r in rec[1:]] == ["lower-plus", "lower-base", "upper"] * 2
    assert all(r["participants"] == 3 and r["test_loss"] is not None for r in rec[1:])
    summary = json.loads((tmp_path / "bl" / "summary.json").read_text())
    assert (summary["upper_rounds"], summary["lower_rounds"], summary["communication_rounds"]) == (2, 4, 6)
    assert losses(rec) == losses(ref)


def test_bad_config_fails_before_round_one_with_a_clear_message(superlink, tmp_path):
    res = superlink.run({"alpha": 0.0, "output-dir": str(tmp_path)}, num_supernodes=2, timeout=300)
    out = res.stdout + res.stderr
    assert "run-config key 'alpha' must be a number > 0, got 0.0" in out, out[-3000:]
    assert "[ROUND 1]" not in out
    assert not any(tmp_path.iterdir())  # nothing written


def test_too_few_supernodes_is_explained(superlink, tmp_path):
    res = superlink.run({"num-clients": 4, "client-wait-s": 3.0, "output-dir": str(tmp_path)}, num_supernodes=2,
                        timeout=300)
    out = res.stdout + res.stderr
    assert "num-clients=4 but only 2 SuperNodes connected" in out, out[-3000:]
