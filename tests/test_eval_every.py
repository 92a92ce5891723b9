"""Issue 51, item 3: evaluation when asked. Run-config eval-every = K spaces out the server's evaluation (its test
pass, ``Method.metrics``) as it does the federated one: x_0, every K-th round and the last are evaluated; the other
records hold the evaluation's fields as null and ``eval_skipped: true``, and every reader of test_acc / test_loss
(summary, ``zofl compare``, ``zofl plot``, ``zofl run``'s progress) reads the evaluated records only. The training is
that of eval-every = 1, number for number."""
import json

import numpy as np
import pytest

from zofl.core import evaluation
from zofl.core.evaluation import fed_eval_due, server_eval_due
from zofl.core.record import evaluated, last_evaluated
from zofl.core.summary import summarize
from zofl.inprocess import run_inprocess
from zofl.results import read_rounds

RUN = {"num-rounds": 7, "num-clients": 4, "beta": 0.5, "tau": 2.0, "x0": "zeros"}
SYNC = {**RUN, "strategy": "fedavg", "local-steps": 2}
ASYNC = {**RUN, "strategy": "fedbuff", "engine": "async", "local-steps": 2, "buffer-size": 2}
EVALUATED = [0, 3, 6, 7]  # eval-every = 3 over 7 rounds: x_0, every third round, the last
EVAL_FIELDS = ("test_acc", "test_loss", "f1", "objective")
TIMES = ("wall_s", "client_compute_s", "client_compute_max_s", "client_wall_max_s")  # measured, never equal


def test_the_server_evaluates_x0_every_kth_round_and_the_last():
    assert [k for k in range(8) if server_eval_due(k, 3, 7)] == EVALUATED
    assert [k for k in range(8) if server_eval_due(k, 1, 7)] == list(range(8))
    assert [k for k in range(5) if server_eval_due(k, 100, 4)] == [0, 4]
    assert [k for k in range(8) if fed_eval_due(k, 3, 7)] == [3, 6, 7]  # the clients' rounds: the same, but x_0


@pytest.fixture
def passes(monkeypatch) -> list[int]:
    """The test passes of the server (``zofl.core.evaluation.evaluate``: what ``Method.metrics`` runs), by the
    size of the model evaluated, one entry per pass."""
    calls: list[int] = []
    real = evaluation.evaluate

    def counted(task, x, data):
        calls.append(len(x))
        return real(task, x, data)

    monkeypatch.setattr(evaluation, "evaluate", counted)
    return calls


def _run(tmp_path, name: str, cfg: dict) -> tuple[list[dict], dict, np.ndarray]:
    d, x = run_inprocess({**cfg, "output-dir": str(tmp_path), "run-name": name}, workers=0)
    return read_rounds(d), json.loads((d / "summary.json").read_text()), x


def _without_times(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k not in TIMES}


@pytest.mark.parametrize("cfg", [SYNC, {**SYNC, "engine": "legacy"}, ASYNC], ids=["sync", "legacy", "async"])
def test_eval_every_evaluates_only_its_rounds_and_changes_no_number(tmp_path, passes, cfg):
    """eval-every = 3 over 7 rounds: 4 test passes (x_0, rounds 3, 6, 7), not 8; the evaluated records are those of
    eval-every = 1 bit for bit, the others the same but for the evaluation's fields (null) and eval_skipped; the
    final model and the summary's final accuracy and loss are eval-every = 1's."""
    spaced, summary, x = _run(tmp_path, "spaced", {**cfg, "eval-every": 3})
    assert len(passes) == len(EVALUATED)
    passes.clear()
    every, summary1, x1 = _run(tmp_path, "every", cfg)
    assert len(passes) == 8
    np.testing.assert_array_equal(x, x1)
    assert [r["round"] for r in spaced if evaluated(r)] == EVALUATED
    for r, r1 in zip(spaced, every, strict=True):
        if r["round"] in EVALUATED:
            assert _without_times(r) == _without_times(r1)
        else:
            assert r["eval_skipped"] is True and all(r[k] is None for k in EVAL_FIELDS)
            assert _without_times(r) == {**_without_times(r1), **dict.fromkeys(EVAL_FIELDS), "eval_skipped": True}
    for key in ("final_test_acc", "final_test_loss", "initial_test_acc", "total_uplink_bytes", "total_local_steps"):
        assert summary[key] == summary1[key] is not None, key
    assert summary["best_test_acc"] == max(r["test_acc"] for r in every if r["round"] in EVALUATED)


def test_a_bilevel_tasks_own_fields_are_null_where_the_server_did_not_evaluate(tmp_path, monkeypatch):
    """FedNest on a toy task (11 communication rounds, eval-every = 4: rounds 0, 4, 8 and 10): the task's own field
    y_error is null with the others where the server did not evaluate, and equal to eval-every = 1's where it did."""
    from zofl.tasks.hypergrad import QuadraticHypergrad

    cfg = {"strategy": "fednest", "task": "zofl.tasks.hypergrad:QuadraticHypergrad", "num-clients": 4,
           "local-steps": 2, "lower-lr": 0.2, "inner-rounds": 2, "outer-lr": 0.3, "lipschitz-g": 2.6,
           "neumann-steps": "2", "beta": 1.0, "num-rounds": 2}
    calls = []
    real = QuadraticHypergrad.evaluate
    monkeypatch.setattr(QuadraticHypergrad, "evaluate", lambda self, *a: calls.append(1) or real(self, *a))
    spaced, summary, x = _run(tmp_path, "spaced", {**cfg, "eval-every": 4})
    assert len(calls) == 4
    every, summary1, x1 = _run(tmp_path, "every", cfg)
    np.testing.assert_array_equal(x, x1)
    assert [r["round"] for r in spaced if evaluated(r)] == [0, 4, 8, 10] and len(spaced) == 11
    for r, r1 in zip(spaced, every, strict=True):
        if evaluated(r):
            assert _without_times(r) == _without_times(r1)
        else:
            assert r["y_error"] is None and r["test_loss"] is None and r1["y_error"] is not None
            assert set(r) == set(r1) | {"eval_skipped"}
    assert summary["final_test_loss"] == summary1["final_test_loss"] is not None


def test_a_resume_gives_the_uninterrupted_run(tmp_path, passes, monkeypatch):
    """A run stopped after round 4 (a record without the server's evaluation, its checkpoint) and resumed writes
    the records of the uninterrupted run; the resume pays one test pass to name the null fields of round 5."""
    from zofl.core.rounds import SyncRun

    cfg = {**SYNC, "eval-every": 3, "checkpoint-every": 1}
    ref, _, x_ref = _run(tmp_path, "ref", cfg)
    plan = SyncRun.plan

    def stop_at_round_5(self, r):
        if r == 4:
            raise KeyboardInterrupt("stopped")
        return plan(self, r)

    monkeypatch.setattr(SyncRun, "plan", stop_at_round_5)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, "cut", cfg)
    monkeypatch.setattr(SyncRun, "plan", plan)
    assert [r["round"] for r in read_rounds(tmp_path / "cut")] == [0, 1, 2, 3, 4]
    passes.clear()
    rec, summary, x = _run(tmp_path, "cut", {**cfg, "resume": True})
    assert len(passes) == 1 + 2  # the null fields' names, then rounds 6 and 7
    np.testing.assert_array_equal(x, x_ref)
    assert [_without_times(r) for r in rec] == [_without_times(r) for r in ref]
    assert summary["final_test_acc"] == ref[-1]["test_acc"] is not None


def _records(accs: dict[int, float | None], last: int) -> list[dict]:
    """Records 0..last with test_acc accs[k] where the server evaluated round k, null and eval_skipped elsewhere."""
    out = []
    for k in range(last + 1):
        seen = k in accs
        out.append({"round": k, "test_acc": accs.get(k), "test_loss": 1.0 - accs[k] if seen else None, "f1": 0.5,
                    "client_compute_s": 0.0, "local_steps": 1, "uplink_bytes": 10, "downlink_bytes": 10,
                    **({} if seen else {"eval_skipped": True})})
    return out


def test_the_summary_of_a_run_stopped_between_evaluations_reads_the_last_evaluated_record():
    """A run the failure policy stopped at round 5 (evaluated: 0 and 3): its final accuracy is round 3's, its best
    the best evaluated one; its totals count every record."""
    s = summarize(_records({0: 0.1, 3: 0.4}, 5))
    assert (s["final_test_acc"], s["final_test_loss"], s["best_test_acc"]) == (0.4, pytest.approx(0.6), 0.4)
    assert s["total_uplink_bytes"] == 60 and s["total_local_steps"] == 6
    assert last_evaluated(_records({0: 0.1, 3: 0.4}, 5))["round"] == 3


def test_the_runners_figures_read_the_evaluated_records_only():
    from zofl.compare import accuracies
    from zofl.stats import run_figures

    rec = _records({0: 0.1, 3: 0.4, 6: 0.5, 7: 0.6}, 7)
    assert accuracies(rec) == [0.1, 0.4, 0.5, 0.6]
    assert run_figures(accuracies(rec)) == {"final": 0.6, "best": 0.6, "last10": 0.6}


def test_zofl_plot_draws_the_evaluated_rounds(tmp_path, monkeypatch):
    """The server's line goes through the evaluated rounds only: a line of null points between them would draw
    nothing at all (matplotlib breaks a line at every NaN)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.axes import Axes

    from zofl.plot import plot_runs

    run = tmp_path / "run"
    run.mkdir()
    rows = _records({0: 0.1, 3: 0.4, 6: 0.5, 7: 0.6}, 7)
    (run / "rounds.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    drawn = []
    real = Axes.plot

    def plot(self, *args, **kwargs):
        drawn.append((list(args[0]), list(args[1])))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Axes, "plot", plot)
    plot_runs([run], tmp_path / "p.png")
    assert drawn[0] == ([0, 3, 6, 7], [10.0, 40.0, 50.0, 60.0]) and drawn[1][0] == [0, 3, 6, 7]


def test_zofl_runs_progress_shows_the_last_evaluated_record(tmp_path):
    from zofl.cli import _Progress as Progress

    path = tmp_path / "rounds.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _records({0: 0.1, 3: 0.4}, 5)))
    progress = Progress(path, 7, quiet=True)
    progress.poll()
    assert progress.done == 5 and progress._metrics() == "round 3: test acc 0.4000, loss 0.6000"
    progress.close()
