"""The failure policy (zofl.core.policy): a run in which too few clients answer stops as failed,
with what ran kept, in the synchronous and the asynchronous engine; the runner exits non-zero.
Client identity: the server's own map of SuperNodes to partitions (zofl.strategies.nodes)."""
import json
import logging

import numpy as np
import pytest

from zofl.config import ConfigError, parse_config
from zofl.core.policy import RunFailed, allowed_failures, async_windows, round_failed
from zofl.faults import draw_fault
from zofl.inprocess import run_inprocess
from zofl.results import read_rounds


def test_policy_arithmetic():
    assert round_failed(0, 1) and not round_failed(1, 1) and not round_failed(0, 0)
    assert allowed_failures(10, 0.5) == 5 and allowed_failures(10, 0.0) == 0 and allowed_failures(3, 1.0) == 3
    assert allowed_failures(10, 0.3) == 3  # no float slip (0.3 * 10 = 2.9999...)
    assert async_windows(12, 2, 4) == 6 and async_windows(1, 1, 10) == 1


def test_late_kind_from_the_clients_own_handling_time():
    from zofl.core.policy import late_kind
    from zofl.core.protocol import Failure, Reply

    def reply(**metrics):
        return Reply(0, {}, 1, metrics)

    assert late_kind(Failure(0, "boom"), 1.5) == "failed"
    assert late_kind(reply(handle_s=0.2), 1.5) == "queued" and late_kind(reply(handle_s=1.5), 1.5) == "queued"
    assert late_kind(reply(handle_s=1.6), 1.5) == "slow" and late_kind(reply(), 1.5) == "slow"
    assert late_kind(reply(handle_s=0.2), 1.5, simulated=True) == "slow"  # the device model's durations


def test_min_replies_above_the_sampled_clients_is_refused():
    with pytest.raises(ConfigError, match=r"'min-replies' = 3 is more than the 2 client\(s\) sampled"):
        parse_config({"num-clients": 4, "beta": 0.5, "min-replies": 3})
    parse_config({"num-clients": 4, "beta": 0.5, "min-replies": 2})


def test_a_run_where_no_client_answers_stops_as_failed_and_keeps_its_records(tmp_path, caplog):
    cfg = {"num-rounds": 10, "num-clients": 3, "beta": 1.0, "tau": 1.0, "crash-prob": 1.0,
           "output-dir": str(tmp_path), "run-name": "dead"}
    with pytest.raises(RunFailed, match=r"6 rounds had fewer than min-replies = 1 .* "
                                        r"the 5 that max-failed-rounds = 0.5 x 10 rounds allows"), \
            caplog.at_level(logging.WARNING, logger="zofl"):
        run_inprocess(cfg, workers=0)
    assert [m for m in caplog.messages if " failed: " in m and m.startswith("round")] == [
        f"round {k} failed: 0 usable replies, fewer than min-replies = 1 ({k} failed round(s) of 5 allowed)"
        for k in range(1, 7)]
    d = tmp_path / "dead"
    rec = read_rounds(d)
    assert [r["round"] for r in rec] == list(range(7)) and all(r["round_failed"] for r in rec[1:])
    summary = json.loads((d / "summary.json").read_text())
    assert summary["status"] == "failed" and "failure policy" in summary["failure"]
    assert summary["failed_rounds"] == 6 and summary["failures_by_client"] == {"0": 6, "1": 6, "2": 6}
    assert summary["total_sampled"] == 18 and summary["total_participants"] == 0
    assert summary["total_errors"] == summary["total_failures"] == 18 and summary["total_late"] == 0  # crashes
    with np.load(d / "checkpoint.npz") as ck:
        assert int(ck["round"]) == 6  # the state of the last round run is kept
    # with the policy off (every round may fail) the same run ends, and says what happened
    d, _ = run_inprocess({**cfg, "run-name": "tolerated", "max-failed-rounds": 1.0}, workers=0)
    summary = json.loads((d / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["failed_rounds"] == 10


def test_the_asynchronous_engine_stops_when_no_reply_is_usable(tmp_path, caplog):
    # once an endless loop: every task crashes, no update ever happens
    cfg = {"strategy": "fedbuff", "engine": "async", "num-clients": 4, "local-steps": 2, "num-rounds": 12,
           "buffer-size": 2, "crash-prob": 1.0, "output-dir": str(tmp_path), "run-name": "dead"}
    with pytest.raises(RunFailed, match=r"4 windows had fewer than .* "
                                        r"the 3 that max-failed-rounds = 0.5 x 6 windows allows"), \
            caplog.at_level(logging.WARNING, logger="zofl"):
        run_inprocess(cfg, workers=0)
    assert [m for m in caplog.messages if m.startswith("a window")] == [
        f"a window of 4 task results failed: 0 usable, fewer than min-replies = 1 ({k} failed window(s) of 3 allowed)"
        for k in (1, 2, 3, 4)]
    summary = json.loads((tmp_path / "dead" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["failed_rounds"] == 4
    # the first 4 windows of 4 results, each failed
    assert summary["total_errors"] == summary["total_failures"] == 4 * 4
    # a few crashes do not stop it
    d, _ = run_inprocess({**cfg, "crash-prob": 0.2, "run-name": "some"}, workers=0)
    summary = json.loads((d / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["total_errors"] == summary["total_failures"] >= 1


def test_the_runner_reports_a_failed_cell_and_exits_non_zero(tmp_path, capsys):
    from zofl.compare import main

    grid = tmp_path / "grid.toml"
    grid.write_text('[fixed]\nnum-rounds = 2\nnum-clients = 3\ntau = 1.0\nmax-failed-rounds = 0.0\n'
                    '[grid]\ncrash-prob = [0.0, 1.0]\n')
    with pytest.raises(SystemExit, match=r"1 cell\(s\) failed"):
        main([str(grid), "--out", str(tmp_path / "out"), "--via", "inprocess", "--parallel", "1"])
    table = (tmp_path / "out" / "table.md").read_text()
    assert "failed runs (stopped by the failure policy" in table and "min-replies" in table
    with pytest.raises(SystemExit, match=r"1 cell\(s\) failed"):  # and again when nothing is left to run
        main([str(grid), "--out", str(tmp_path / "out"), "--via", "inprocess", "--parallel", "1"])
    assert "2 already finished, 0 to run" in capsys.readouterr().out


@pytest.mark.parametrize("engine", ["sync", "async"])
def test_a_second_node_claiming_a_partition_is_refused_and_the_unheld_one_reported(tmp_path, engine):
    from zofl.core.protocol import NUM_PARTITIONS, PARTITION_ID

    cfg = {"num-rounds": 6, "num-clients": 3, "beta": 1.0, "tau": 1.0, "client-wait-s": 1.0,
           "output-dir": str(tmp_path), "run-name": engine}
    if engine == "async":
        cfg.update({"strategy": "fedbuff", "engine": "async", "local-steps": 2, "buffer-size": 2})
    # the node started for partition 2 says partition-id=0 (a copied node config)
    d, x = run_inprocess(cfg, workers=0, node_config={2: {PARTITION_ID: 0, NUM_PARTITIONS: 3}})
    rec = read_rounds(d)
    summary = json.loads((d / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["unheld_partitions"] == [2] and np.isfinite(x).all()
    (refused,) = summary["refused_nodes"]
    assert refused["claims"] == 0 and refused["node"] != refused["held_by"]
    if engine == "sync":  # every round samples all three: partition 2 fails, partition 0 counts once
        for r in rec[1:]:
            assert (r["participants"], r["dropped"], r["failed_clients"]) == (2, 1, [2]), r
    else:  # partition 2 never gets work
        assert all(2 not in r["clients"] for r in rec[1:])


@pytest.mark.parametrize("engine", ["sync", "async"])
def test_a_node_claiming_a_partition_outside_the_run_is_refused_alone(tmp_path, engine):
    """A SuperNode saying partition-id = 99 (num-clients 10) stopped the whole run with a ConfigError: it
    is refused alone (logged, in the summary's refused nodes), and the run goes on without partition 3."""
    from zofl.core.protocol import NUM_PARTITIONS, PARTITION_ID

    cfg = {"num-rounds": 3, "num-clients": 10, "beta": 1.0, "tau": 1.0, "client-wait-s": 1.0,
           "output-dir": str(tmp_path), "run-name": engine}
    if engine == "async":
        cfg.update({"strategy": "fedbuff", "engine": "async", "local-steps": 2, "buffer-size": 2})
    d, x = run_inprocess(cfg, workers=0, node_config={3: {PARTITION_ID: 99, NUM_PARTITIONS: 10}})
    summary = json.loads((d / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["unheld_partitions"] == [3] and np.isfinite(x).all()
    (refused,) = summary["refused_nodes"]
    assert refused["claims"] == 99 and refused["held_by"] == -1
    assert all(3 not in r.get("clients", []) for r in read_rounds(d)[1:])


def test_a_federation_whose_every_node_is_outside_the_run_says_so(tmp_path):
    from zofl.core.protocol import NUM_PARTITIONS, PARTITION_ID

    cfg = {"num-rounds": 1, "num-clients": 2, "tau": 1.0, "client-wait-s": 0.5, "output-dir": str(tmp_path),
           "run-name": "none"}
    with pytest.raises(ConfigError, match=r"no SuperNode holds a partition of this run after 0s \(client-wait-s\): "
                                          r"the 2 that answered are outside partition ids 0..1 or have num-partitions "
                                          r"!= num-clients = 2: SuperNode \d+: partition-id=\d, SuperNode \d+: "
                                          r"partition-id=\d$"):
        run_inprocess(cfg, workers=0, node_config={0: {PARTITION_ID: 5, NUM_PARTITIONS: 2},
                                                   1: {PARTITION_ID: 1, NUM_PARTITIONS: 3}})


@pytest.mark.parametrize("engine", ["sync", "legacy"])
def test_a_restarted_supernode_takes_its_partition_back(tmp_path, engine):
    # partition 1's SuperNode dies in round 2 (0-based) and a new one (new node id) starts for it in
    # round 4: rounds 3-4 miss client 1 (a failure), from round 5 it takes part again
    cfg = {"engine": engine, "num-rounds": 7, "num-clients": 3, "beta": 1.0, "tau": 1.0, "round-deadline-s": 2.0,
           "output-dir": str(tmp_path), "run-name": "restart"}
    d, x = run_inprocess(cfg, workers=0, restart={1: (2, 4)})
    rec = read_rounds(d)
    assert [r["failed_clients"] for r in rec[1:]] == [[], [], [1], [1], [], [], []]
    assert [r["participants"] for r in rec[1:]] == [3, 3, 2, 2, 3, 3, 3]
    summary = json.loads((d / "summary.json").read_text())
    (back,) = summary["rejoined_nodes"]
    assert back["partition"] == 1 and summary["status"] == "ok" and not summary["refused_nodes"]
    assert set(back) == {"node", "partition", "replaced"} and back["node"] != back["replaced"]  # the new id, the old


def test_a_healthy_reply_queued_behind_a_hung_client_is_told_apart_from_a_slow_one(tmp_path):
    """One worker process for 3 clients: a hung client (hang-s 2 s, deadline 1.5 s) holds up the
    clients queued behind it. Late replies that come in later rounds are classified by the client's
    own handling time: the hung ones are "slow", the healthy ones "queued"; never a healthy one slow.

    Margins (how many late replies arrive before the run ends depends on the load; what is asserted does
    not): a hung client's handling time is at least its 2 s sleep, past the 1.5 s deadline whatever the
    load; a healthy one's is milliseconds (at most 0.03 s measured at load 8 on 2 cores), 50x under it.
    Hangs at (round, client) (1, 1), (1, 2), (2, 0), (4, 1), (7, 0), (7, 2): the first hung reply comes
    about 2 s after round 2 starts, the first queued healthy one about 6 s after, and the run ends 10.5 s
    after (7 deadlines): seconds of slack for both kinds (with hang-s 3 s, as before, the first queued reply
    came 1.5 s before the end)."""
    seed, m, rounds = 5, 3, 8
    hangs = sum(bool(draw_fault(seed, r, p, 0.0, 0.25, 0.0)) for r in range(rounds) for p in range(m))
    assert [(r, p) for r in range(rounds) for p in range(m) if draw_fault(seed, r, p, 0.0, 0.25, 0.0)] == \
        [(1, 1), (1, 2), (2, 0), (4, 1), (7, 0), (7, 2)]
    cfg = {"num-rounds": rounds, "num-clients": m, "beta": 1.0, "tau": 1.0, "hang-prob": 0.25, "hang-s": 2.0,
           "round-deadline-s": 1.5, "seed": seed, "max-failed-rounds": 1.0, "output-dir": str(tmp_path),
           "run-name": "q"}
    d, _ = run_inprocess(cfg, workers=1)
    s = json.loads((d / "summary.json").read_text())
    assert s["total_late"] == s["total_failures"] == s["total_dropped"] > hangs, s
    assert s["total_errors"] == s["total_rejected"] == s["total_lost"] == s["total_late_failed"] == 0, s
    assert 1 <= s["total_late_slow"] <= hangs and s["total_late_queued"] >= 1, s
    assert s["total_late_slow"] + s["total_late_queued"] <= s["total_late"]
