"""Issue 48, item 4: federated evaluation. Every eval-every rounds (and the last) the clients evaluate x_r on their
own held-out data through Flower's evaluate messages, and the server weights their answers by examples into the
round's record (fed_loss, fed_acc, fed_examples, fed_clients, fed_refused). On the in-process Grid: the same
ServerApp, strategies and ClientApp as every engine (the Message API's and the legacy API's evaluate paths)."""
import math

import numpy as np
import pytest

from tests.test_local_data import nodes
from zofl.config import ConfigError
from zofl.core.evaluation import EvalAnswer, eval_problem, fed_eval_due, weighted_metrics
from zofl.core.protocol import MAX_EXAMPLES
from zofl.inprocess import run_inprocess
from zofl.results import read_rounds
from zofl.tasks.data import held_out_rows

RUN = {"num-rounds": 4, "num-clients": 4, "beta": 0.5, "tau": 2.0}


def test_answers_are_weighted_by_their_examples():
    answers = [EvalAnswer(0, 10, 1.0, 0.5), EvalAnswer(1, 30, 2.0, 0.9), EvalAnswer(2, 0, 0.0, 0.0)]
    got = weighted_metrics(answers, refused=2)
    assert got["fed_loss"] == pytest.approx((10 * 1.0 + 30 * 2.0) / 40)  # not the plain mean 1.5
    assert got["fed_acc"] == pytest.approx((10 * 0.5 + 30 * 0.9) / 40)
    assert (got["fed_examples"], got["fed_clients"], got["fed_refused"]) == (40, 2, 2)  # the empty one is no client
    assert weighted_metrics([])["fed_loss"] is None and weighted_metrics([])["fed_examples"] == 0
    assert weighted_metrics([])["fed_refused"] == 0  # none refused unless said
    assert weighted_metrics([EvalAnswer(0, 1, 1.0, 1.0)])["fed_clients"] == 1  # one example makes a client


def test_the_servers_check_of_the_answers_counts_every_refusal_and_silence_and_names_each(caplog):
    """zofl.strategies.message.checked_answers: an answer for a client no node of this run serves is refused
    undecoded, a second answer for a client is refused, an answer its decoder rejects is refused with its reason;
    each is named in the log, and the count is refusals plus the served clients that gave no answer; the federated
    fields of the round are logged with the clients, the examples, the loss and the accuracy."""
    import logging
    from types import SimpleNamespace

    from zofl.core.run import Run
    from zofl.strategies.message import checked_answers

    fed = SimpleNamespace(nodes={0: 10, 1: 11, 2: 12, 3: 13, 4: 14})
    decoded = []

    def decode(reply, pid):
        decoded.append(pid)
        return reply if isinstance(reply, EvalAnswer) else f"bad {reply}"

    good = [EvalAnswer(0, 10, 1.0, 0.5), EvalAnswer(2, 30, 2.0, 0.75)]
    replies = [(2, good[1]), (9, good[0]), (0, good[0]), (1, "nan"), (2, good[1])]
    with caplog.at_level(logging.WARNING, logger="zofl"):
        answers, refused = checked_answers(fed, 7, replies, decode)
    assert answers == good and decoded == [2, 0, 1, 2]  # client 9 is never decoded
    assert refused == 3 + 0  # 9, 1 and 2's second answer; 5 replies for 5 served clients: none missing
    assert [r.getMessage() for r in caplog.records] == [
        "round 7: federated evaluation: the answer for client 9 is refused: not a client a node of this run serves",
        "round 7: federated evaluation: the answer for client 1 is refused: bad nan",
        "round 7: federated evaluation: the answer for client 2 is refused: a second answer"]
    assert checked_answers(fed, 8, [(0, good[0])], decode) == ([good[0]], 4)  # four served clients silent
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="zofl"):
        fields = Run.fed_fields(7, answers, refused)
    assert fields == weighted_metrics(answers, 3)
    assert caplog.records[-1].getMessage() == ("round 7: federated evaluation by 2 clients (40 examples): loss 1.7500, "
                                               "accuracy 0.6875")


def test_evaluation_rounds_are_every_k_and_the_last():
    assert [k for k in range(0, 11) if fed_eval_due(k, 3, 10)] == [3, 6, 9, 10]
    assert [k for k in range(0, 5) if fed_eval_due(k, 1, 4)] == [1, 2, 3, 4]  # never x_0 (round 0)
    assert [k for k in range(0, 5) if fed_eval_due(k, 100, 4)] == [4]


@pytest.mark.parametrize("n, loss, acc, words", [
    (-1, 1.0, 0.5, "num-examples"), (MAX_EXAMPLES + 1, 1.0, 0.5, "num-examples"), (True, 1.0, 0.5, "num-examples"),
    (2.5, 1.0, 0.5, "num-examples"), (10, math.nan, 0.5, "eval_loss"), (10, math.inf, 0.5, "eval_loss"),
    (10, -0.1, 0.5, "eval_loss"), (10, 1.0, 1.5, "eval_acc"), (10, 1.0, -0.1, "eval_acc"), (10, 1.0, "x", "eval_acc"),
    (10, 1.0, None, "eval_acc"),
])
def test_a_hostile_answer_is_named(n, loss, acc, words):
    assert words in eval_problem(n, loss, acc)


def test_an_evaluate_reply_is_read_as_the_client_its_message_named_and_a_bad_one_says_why(as_the_serverapp):
    """zofl.strategies.wire.decode_eval: a reply's answer is the client's the server named (never one the reply
    claims); an error reply gives its code and reason (cut to 200 characters); a reply without the three metrics names
    what is missing; a value out of range, eval_problem's reason."""
    from flwr.app import Error, Message, MetricRecord, RecordDict

    from zofl.core.protocol import EVAL_ACC, EVAL_LOSS, METRICS, NUM_EXAMPLES
    from zofl.strategies.wire import decode_eval

    sent = Message(RecordDict(), dst_node_id=5, message_type="evaluate")

    def reply(**metrics):
        return Message(RecordDict({METRICS: MetricRecord(metrics)}), reply_to=sent)

    got = decode_eval(reply(**{NUM_EXAMPLES: 12, EVAL_LOSS: 0.25, EVAL_ACC: 0.75}), 4)
    assert got == EvalAnswer(4, 12, 0.25, 0.75)
    failed = Message(Error(code=7, reason="boom " * 60), reply_to=sent)
    assert decode_eval(failed, 4) == "error 7: " + ("boom " * 60)[:200]
    missing = reply(**{NUM_EXAMPLES: 12, EVAL_LOSS: 0.25})
    assert decode_eval(missing, 4) == "malformed evaluate reply (KeyError: 'eval_acc')"
    assert decode_eval(reply(**{NUM_EXAMPLES: 12, EVAL_LOSS: 0.25, EVAL_ACC: 2.0}), 4) == \
        "eval_acc must be a finite number in [0, 1], got '2.0'"


def test_an_answer_on_the_edges_of_its_ranges_is_kept_and_a_refusal_says_which_value_word_for_word():
    """Edges allowed: 0 examples (a share with nothing held out), MAX_EXAMPLES, a loss of 0, an accuracy of 0 and
    of 1. A refusal names the field, its range and the value given, cut to 40 characters."""
    for n, loss, acc in ((0, 0.0, 0.0), (MAX_EXAMPLES, 1e300, 1.0), (np.int64(7), np.float32(0.5), 1)):
        assert eval_problem(n, loss, acc) is None
    assert eval_problem(-1, 1.0, 0.5) == f"num-examples must be an integer in [0, {MAX_EXAMPLES}], got '-1'"
    assert eval_problem(10, math.nan, 0.5) == "eval_loss must be a finite number in [0, inf], got 'nan'"
    assert eval_problem(10, 1.0, 1.0000001) == "eval_acc must be a finite number in [0, 1], got '1.0000001'"
    long = "9" * 50
    assert eval_problem(long, 1.0, 0.5) == f"num-examples must be an integer in [0, {MAX_EXAMPLES}], got '{'9' * 40}'"
    assert eval_problem(10, long, 0.5) == f"eval_loss must be a finite number in [0, inf], got '{'9' * 40}'"


def test_the_clients_held_out_shares_are_disjoint_and_cover_the_test_set():
    shares = [held_out_rows(181, 4, pid, seed=7) for pid in range(4)]
    rows = np.concatenate(shares)
    assert sorted(rows.tolist()) == list(range(181)) and [len(s) for s in shares] == [46, 45, 45, 45]
    assert not np.array_equal(held_out_rows(181, 4, 0, seed=7), held_out_rows(181, 4, 0, seed=8))  # the run's seed


@pytest.mark.parametrize("engine, strategy", [("sync", "zohfl"), ("legacy", "zohfl"), ("async", "fedbuff")])
def test_every_client_evaluating_its_share_gives_the_servers_test_metrics_and_changes_no_training(tmp_path, engine,
                                                                                                 strategy, caplog):
    """With every client's share of the test set answering, the weighted federated metrics are the server's own
    (a check of the weighting and of the shares); the training numbers are those of the run without it (the
    asynchronous engine on its simulated clock: the evaluation of version 3 moves no clock), and the server
    evaluates the rounds the clients do, and x_0. On the legacy API Flower's History gets the same federated
    loss and metrics (its summary at the end of the run)."""
    import logging

    caplog.set_level(logging.INFO, logger="flwr")
    caplog.set_level(logging.INFO, logger="zofl")
    cfg = {**RUN, "engine": engine, "strategy": strategy, "output-dir": str(tmp_path)}
    d, x = run_inprocess({**cfg, "federated-eval": True, "eval-every": 3, "run-name": "fed"}, workers=0)
    d0, x0 = run_inprocess({**cfg, "run-name": "plain"}, workers=0)
    rec, plain = read_rounds(d), read_rounds(d0)
    np.testing.assert_array_equal(x, x0)
    # eval-every spaces the server's evaluation too: x_0, round 3 and the last; null in the others
    assert [r["test_loss"] for r in rec] == [r["test_loss"] if r["round"] in (0, 3, 4) else None for r in plain]
    assert [r["round"] for r in rec if "fed_loss" in r] == [3, 4]
    for r in rec:
        if "fed_loss" in r:
            assert r["fed_loss"] == pytest.approx(r["test_loss"], rel=1e-12)
            assert r["fed_acc"] == pytest.approx(r["test_acc"], rel=1e-12)
            assert (r["fed_examples"], r["fed_clients"], r["fed_refused"]) == (180, 4, 0)  # digits: 180 test images
    fed = [r for r in rec if "fed_loss" in r]
    summary = "\n".join(r.getMessage() for r in caplog.records)
    for r in fed:  # each evaluation logged under its round (update)
        assert f"round {r['round']}: federated evaluation by 4 clients (180 examples)" in summary, summary[-3000:]
    if engine == "legacy":
        assert "History (loss, distributed):\n" + "".join(f"\t\tround {r['round']}: {r['fed_loss']}\n"
                                                          for r in fed) in summary, summary[-2000:]
        accuracies = ", ".join(f"({r['round']}, {r['fed_acc']})" for r in fed)
        assert f"'fed_acc': [{accuracies}]" in summary, summary[-2000:]


def test_a_client_with_a_hostile_answer_is_refused_alone(tmp_path, monkeypatch):
    from zofl.client_app import ZOFLClient

    honest = ZOFLClient.evaluate_x

    def evaluate_x(self, x):
        n, loss, acc = honest(self, x)
        return (n, loss, 7.0) if self.pid == 1 else (n, loss, acc)  # an accuracy of 700%

    monkeypatch.setattr(ZOFLClient, "evaluate_x", evaluate_x)
    d, _ = run_inprocess({**RUN, "num-rounds": 2, "federated-eval": True, "output-dir": str(tmp_path),
                          "run-name": "r"}, workers=0)
    last = read_rounds(d)[-1]
    assert (last["fed_clients"], last["fed_refused"]) == (3, 1)
    assert 0.0 <= last["fed_acc"] <= 1.0 and last["fed_examples"] == 180 - len(held_out_rows(180, 4, 1, 0))


def test_nodes_with_data_of_their_own_evaluate_on_their_held_out_part(tmp_path):
    """Three sites of 40, 60 and 100 examples (test-fraction 0.1 drawn by the run's seed): 4 + 6 + 10 held out."""
    d, _ = run_inprocess({**RUN, "num-clients": 3, "num-rounds": 2, "federated-eval": True,
                          "output-dir": str(tmp_path / "out"), "run-name": "own"}, workers=0,
                         node_config=nodes(tmp_path, [40, 60, 100]))
    last = read_rounds(d)[-1]
    assert (last["fed_examples"], last["fed_clients"], last["fed_refused"]) == (20, 3, 0)
    assert 0.0 <= last["fed_acc"] <= 1.0 and last["fed_loss"] > 0


@pytest.mark.parametrize("keys, words", [
    ({"strategy": "fednest", "task": "hyper-cleaning"}, "solves a bilevel problem"),
])
def test_federated_evaluation_is_refused_where_it_does_not_apply(tmp_path, keys, words):
    from zofl.setup import check_run

    with pytest.raises(ConfigError, match=words):
        check_run({**keys, "federated-eval": True, "output-dir": str(tmp_path)})


def test_the_summary_the_runners_table_and_the_plot_say_which_evaluation(tmp_path):
    import csv
    import json

    from zofl.compare import main
    from zofl.core.summary import summary_lines
    from zofl.plot import plot_runs

    grid = tmp_path / "g.toml"
    grid.write_text('[fixed]\nstrategy = "fedavg"\nx0 = "zeros"\nnum-rounds = 2\nnum-clients = 3\n'
                    'federated-eval = true\n[grid]\nserver-data = ["dataset", "none"]\n')
    main([str(grid), "--out", str(tmp_path / "out"), "--via", "inprocess", "--parallel", "1"])
    rows = list(csv.DictReader(open(tmp_path / "out" / "results.csv")))
    assert len(rows) == 2 and all(0 <= float(r["final_fed_acc"]) <= 1 and float(r["final_fed_loss"]) > 0 for r in rows)
    assert sorted(r["final_test_acc"] == "" for r in rows) == [False, True]  # the run without a server test set
    assert "1 run(s) had no test set on the server (server-data = none)" in (tmp_path / "out" / "table.md").read_text()
    run = next(p.parent for p in (tmp_path / "out").rglob("summary.json")
               if json.loads(p.read_text()).get("final_test_acc") is not None)
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["fed_evaluations"], summary["final_fed_round"], summary["final_fed_examples"]) == (2, 2, 180)
    lines = summary_lines("FedAvg", summary, "")
    assert any(line.startswith("  federated evaluation (the clients' held-out data, round 2: 3 clients, 180 examples): "
                               "accuracy ") for line in lines), lines
    plot_runs([run], tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 10_000


# -- issue 48, item 2: the server's own data is optional (run-config server-data) ---------------------------------
def test_a_server_without_data_reads_none_and_trains_as_the_server_with_data(tmp_path):
    """server-data = none: the server reads no file (a dataset whose file does not exist is no error for it), every
    N_i comes from the clients, the records have no server metrics and the clients evaluate; FedAvg's model is the
    one of the server that holds the data (it never used them: x0 = zeros)."""
    from zofl.setup import prepare_server

    cfg, task, _ = prepare_server({"strategy": "fedavg", "x0": "zeros", "server-data": "none", "dataset": "mnist",
                                   "data-dir": str(tmp_path / "no-such-folder")})
    assert (len(task.test_data(None)), task.test_data(None).x.shape[1], task.fingerprint) == (0, 784, None)
    keys = {**RUN, "strategy": "fedavg", "x0": "zeros", "federated-eval": True, "output-dir": str(tmp_path)}
    d, x = run_inprocess({**keys, "server-data": "none", "run-name": "none"}, workers=0)
    _, x_ref = run_inprocess({**keys, "run-name": "dataset"}, workers=0)
    np.testing.assert_array_equal(x, x_ref)
    rec = read_rounds(d)
    assert all(r["test_acc"] is None and r["test_loss"] is None for r in rec)
    assert all(r["fed_examples"] == 180 and 0 < r["fed_acc"] <= 1 for r in rec[1:])
    assert not (d / "data.json").exists() or "fingerprint" not in (d / "data.json").read_text()


def test_n_train_is_the_sum_the_clients_report_without_server_data():
    """N_train of rho_i = N_i / N_train on a server without data: the sum of the sizes the clients reported."""
    from zofl.methods import METHODS
    from zofl.setup import prepare_server

    cfg, task, spec = prepare_server({"strategy": "fedavg", "x0": "zeros", "server-data": "none"})
    method = METHODS["fedavg"].server(cfg, task, spec)
    method.reported_sizes = {0: 120, 1: 80, 2: 50}
    assert method.n_train == 250


@pytest.mark.parametrize("keys, words", [
    ({}, "ZO-HFL's upper objective f1 is the loss on the server's data"),
    ({"strategy": "f1-only"}, "is a server-side control"),
    ({"strategy": "fedavg"}, "x0 = 'pretrained' trains x_0 on the server's data"),
    ({"strategy": "fednest", "task": "hyper-cleaning", "x0": "zeros"}, "is bilevel"),
])
def test_what_needs_the_servers_data_refuses_server_data_none(tmp_path, keys, words):
    from zofl.setup import check_run

    with pytest.raises(ConfigError, match=words):
        check_run({**keys, "server-data": "none", "output-dir": str(tmp_path)})


def test_a_server_without_data_needs_a_files_shape_declared(tmp_path):
    from zofl.setup import prepare_server

    keys = {"strategy": "fedavg", "x0": "zeros", "server-data": "none", "data-path": str(tmp_path / "never-read.csv")}
    with pytest.raises(ConfigError, match="'num-features'/'num-classes': with server-data = 'none'"):
        prepare_server(keys)
    _, task, _ = prepare_server({**keys, "num-features": 7, "num-classes": 3})  # the file does not exist: not read
    assert task.test_data(None).x.shape == (0, 7) and task.test_data(None).num_classes == 3


def _runs_without_server_data():
    """Every registered method that needs no data on the server (docs/data.md's table: not ZO-HFL, no control,
    a single-level task): the registry's, so that a new method is covered without a list to edit."""
    from zofl.core.method import CONTROL, MODEL
    from zofl.methods import METHODS

    return sorted(n for n, e in METHODS.items()
                  if n != "zohfl" and e.server.kind != CONTROL and e.server.needs == MODEL)


@pytest.mark.parametrize("strategy", _runs_without_server_data())
def test_every_method_that_needs_no_server_data_runs_without_it(tmp_path, strategy):
    from zofl.methods import METHODS

    engine = "async" if METHODS[strategy].server.kind == "async" else "sync"
    d, x = run_inprocess({"strategy": strategy, "engine": engine, "num-rounds": 2, "num-clients": 3, "beta": 1.0,
                          "server-data": "none", "x0": "zeros", "federated-eval": True, "output-dir": str(tmp_path),
                          "run-name": strategy}, workers=0)
    rec = read_rounds(d)
    assert np.isfinite(x).all() and rec[-1]["fed_examples"] == 180 and rec[-1]["test_acc"] is None


def test_a_client_with_nothing_held_out_answers_zero_and_one_row_is_evaluated(monkeypatch):
    """ZOFLClient.evaluate_x: (0, 0.0, 0.0) when the client holds no held-out row (nothing to weight); one row is
    evaluated like any other count."""
    from types import SimpleNamespace

    from zofl import client_app

    me = SimpleNamespace(task=None, spec=None, pid=2, cfg=SimpleNamespace(num_clients=4, seed=0))
    monkeypatch.setattr(client_app, "evaluate", lambda task, x, data: (0.5, 1.0))
    for rows, want in ((0, (0, 0.0, 0.0)), (1, (1, 0.5, 1.0)), (3, (3, 0.5, 1.0))):
        monkeypatch.setattr(client_app, "held_out", lambda *a, rows=rows: [None] * rows)
        assert client_app.ZOFLClient.evaluate_x(me, np.zeros(3)) == want
