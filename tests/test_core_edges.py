"""The edges of the core's checks, one value on each side (found by mutation testing: a check tested with
one bad value only survived ``<`` for ``<=``, a dropped flag, a swapped index). Unit-level: no run
through Flower, each check called on arrays a real run wrote or on the smallest input that reaches it."""
import json
import logging
import os
import re
import signal
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from zofl.core.checkpoint import load_checkpoint, scalar
from zofl.results import RunFolderError, read_rounds

from .test_resume_validation import ASYNC  # FedBuff on the async engine: 7 updates, a checkpoint every 3

P = Path("ck.npz")


# -- checkpoint.scalar and load_checkpoint ----------------------------------------------------------
def test_scalar_takes_its_lower_bound_and_names_the_kind_it_wants():
    assert scalar(P, "round", np.array(0), "i") == 0 and scalar(P, "now", np.array(0.0), "f") == 0.0
    assert scalar(P, "t", np.array(-1.0), "f", low=-1.0) == -1.0
    with pytest.raises(RunFolderError, match=r"array 'now' is -1e-300, not a finite number >= 0"):
        scalar(P, "now", np.array(-1e-300), "f")
    with pytest.raises(RunFolderError, match=r"array 'now' is int64 of shape \(\), not one float64;"):
        scalar(P, "now", np.array(3), "f")
    with pytest.raises(RunFolderError, match=r"array 'round' is float64 of shape \(\), not one integer;"):
        scalar(P, "round", np.array(3.0), "i")
    with pytest.raises(RunFolderError, match=r"array 'round' is int64 of shape \(1,\), not one integer;"):
        scalar(P, "round", np.array([3]), "i")


def test_a_synchronous_checkpoint_holds_the_simulated_clock_only():
    from zofl.core.checkpoint import check_sync_extra

    check_sync_extra(P, {"sim_clock": np.array(0.0)})
    with pytest.raises(RunFolderError, match=r"the engine's arrays are \['async/now', 'async/sim_clock'\], a "
                                             r"synchronous run writes \['async/sim_clock'\]; it is not a checkpoint"):
        check_sync_extra(P, {"sim_clock": np.array(0.0), "now": np.array(0.0)})


def test_a_fifo_in_place_of_the_checkpoint_is_refused_without_blocking(tmp_path):
    """Opened without O_NONBLOCK, a FIFO with no writer blocks the resume for ever."""
    os.mkfifo(tmp_path / "checkpoint.npz")

    def hung(*_):
        raise TimeoutError("load_checkpoint blocked on a FIFO")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        with pytest.raises(RunFolderError, match=r"checkpoint\.npz is not a regular file"):
            load_checkpoint(tmp_path)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# -- the asynchronous queue of a checkpoint: check_async_extra and _check_task, at each edge ---------
M = 4  # num-clients


@pytest.fixture(scope="module")
def queue(tmp_path_factory):
    """A real asynchronous checkpoint (tasks in flight at update 6) and what ``resume_point`` checks it
    with: the method's server half and its fresh state."""
    from zofl.inprocess import run_inprocess
    from zofl.methods import METHODS
    from zofl.setup import prepare

    run_config = {**ASYNC, "output-dir": str(tmp_path_factory.mktemp("q")), "run-name": "r"}
    d, _ = run_inprocess(run_config, workers=0)
    k, _, _, extra = load_checkpoint(d)
    cfg, task, spec = prepare(run_config)
    method = METHODS[cfg.strategy].server(cfg, task, spec)
    assert "task0/meta" in extra and int(extra["task_no"]) > 2
    return d / "checkpoint.npz", extra, method, method.init(), k


def _check(queue, edit):
    """check_async_extra on a copy of the queue after ``edit``; its refusal's text, or None if accepted."""
    from zofl.core.checkpoint import check_async_extra

    path, extra, method, fresh, k = queue
    arrays = {n: np.array(a) for n, a in extra.items()}
    edit(arrays)
    try:
        check_async_extra(path, arrays, method, fresh, k)
    except RunFolderError as exc:
        assert str(exc).startswith(f"{path}: ")
        return str(exc)
    return None


def _meta(i, value):
    def edit(a):
        a["task0/meta"][i] = value(a) if callable(value) else value
    return edit


def _set(name, value):
    def edit(a):
        a[name] = np.asarray(value(a) if callable(value) else value)
    return edit


def _no_tasks(a):
    for n in [n for n in a if n.startswith("task") and n != "task_no"]:
        del a[n]


def _task_no(a):
    return int(a["task_no"])


ACCEPTED = {
    "no task in flight": _no_tasks,
    "clock at 0": _set("now", 0.0),
    "policy at its edges": _set("policy", np.array([0, M - 1, M - 1])),
    "policy with no results": _set("policy", np.array([5, 0, 0])),
    "a rejoin at time 0, task 0, client 0": _set("rejoins", np.array([[0.0, 0.0, 0.0]])),
    "a rejoin of the last task number and client": _set("rejoins", lambda a: np.array([[1.0, _task_no(a) - 1, M - 1]])),
    "no rejoin": _set("rejoins", np.zeros((0, 3))),
    "clients 0 and m-1 given up": _set("lost", np.array([0, M - 1])),
    "task of client 0": _meta(0, 0.0),
    "task of client m-1": _meta(0, M - 1.0),
    "task number 0": _meta(1, 0.0),
    "the last task number": _meta(1, lambda a: _task_no(a) - 1.0),
    "H = 0": _meta(2, 0.0),
    "version 0": _meta(3, 0.0),
    "sent at 0, due at 0": lambda a: (_meta(4, 0.0)(a), _meta(5, 0.0)(a)),
    "due when sent": _meta(5, lambda a: a["task0/meta"][4]),
}

REFUSED = {
    "a negative failed-window count": (_set("policy", np.array([-1, 0, 0])), r"'async/policy' is int64 \[-1, 0, 0\]"),
    "m results in a window": (_set("policy", np.array([0, M, 0])),
                              r"'async/policy' .* \(failed windows >= 0, results in 0\.\.3, usable <= results\)"),
    "more usable than results": (_set("policy", np.array([0, 1, 2])), r"'async/policy' is int64 \[0, 1, 2\]"),
    "policy of floats": (_set("policy", np.array([0.0, 1.0, 1.0])), r"'async/policy' is float64"),
    "a rejoin before time 0": (_set("rejoins", np.array([[-0.5, 0.0, 0.0]])), r"'async/rejoins'"),
    "a rejoin of task number -1": (_set("rejoins", np.array([[0.5, -1.0, 0.0]])), r"'async/rejoins'"),
    "a rejoin of task number task_no": (
        _set("rejoins", lambda a: np.array([[0.5, _task_no(a), 0.0]])),
        lambda a: rf"'async/rejoins' \(float64, shape \(1, 3\)\) is not float64 rows \(time >= 0, task number in "
                  rf"0\.\.{_task_no(a) - 1}, client in 0\.\.3\)"),
    "a rejoin of client -1": (_set("rejoins", np.array([[0.5, 0.0, -1.0]])), r"'async/rejoins'"),
    "a rejoin of client m": (_set("rejoins", np.array([[0.5, 0.0, M]])), r"'async/rejoins'"),
    "a client -1 given up": (_set("lost", np.array([-1])), r"'async/lost' .* not client ids in 0\.\.3"),
    "client m given up": (_set("lost", np.array([M])), r"'async/lost' \(int64, shape \(1,\)\) is not client ids"),
    "given-up clients as floats": (_set("lost", np.array([1.0])), r"'async/lost' \(float64"),
    "a task meta of 5 numbers": (lambda a: a.update({"task0/meta": a["task0/meta"][:5]}),
                                 r"'async/task0/meta' is float64 of shape \(5,\), not 6 float64 \('pid', 'task', "),
    "a task meta in float32": (lambda a: a.update({"task0/meta": a["task0/meta"].astype(np.float32)}),
                               r"'async/task0/meta' is float32 of shape \(6,\)"),
    "a task of client NaN": (_meta(0, np.nan), r"'async/task0/meta' is \[nan, "),
    "a task of client inf": (_meta(0, np.inf), r"'async/task0/meta' is \[inf, "),
    "a task of client 1.5": (_meta(0, 1.5), r"'async/task0/meta' is \[1\.5, "),
    "a task of client m": (_meta(0, float(M)), r"not a task of this run \(client in 0\.\.3, task number below \d+, "
                                               r"H >= 0, version in 0\.\.\d+, sent_at >= 0, due >= sent_at\)"),
    "a task of client -1": (_meta(0, -1.0), r"'async/task0/meta' is \[-1\.0, "),
    "task number -1": (_meta(1, -1.0), r"'async/task0/meta'"),
    "task number task_no": (_meta(1, lambda a: float(_task_no(a))), r"'async/task0/meta'"),
    "H = -1": (_meta(2, -1.0), r"'async/task0/meta'"),
    "version -1": (_meta(3, -1.0), r"'async/task0/meta'"),
    "sent before time 0": (_meta(4, -1e-9), r"'async/task0/meta'"),
    "sent at inf": (_meta(4, np.inf), r"'async/task0/meta'"),
    "due at inf": (_meta(5, np.inf), r"'async/task0/meta'"),
    "due before it was sent": (_meta(5, lambda a: a["task0/meta"][4] - 1e-6), r"'async/task0/meta'"),
    "a config that is not JSON": (_set("task0/config", "{not json"), r"'async/task0/config' is not a JSON object"),
}


@pytest.mark.parametrize("name", list(ACCEPTED))
def test_a_queue_at_the_edge_of_what_a_run_writes_is_accepted(queue, name):
    assert _check(queue, ACCEPTED[name]) is None


@pytest.mark.parametrize("name", list(REFUSED))
def test_a_queue_just_past_the_edge_is_refused_naming_the_array(queue, name):
    edit, message = REFUSED[name]
    refusal = _check(queue, edit)
    if callable(message):
        message = message(queue[1])
    assert refusal is not None and re.search(message, refusal), refusal


def test_a_queue_is_compared_with_a_task_planned_on_version_0_whatever_the_local_steps(queue):
    """The fresh task a queue's arrays are compared with is FedBuff's on version 0: with local-steps 0 its steps
    follow tau's schedule from that version, and the run's queue (the same shapes) is accepted."""
    from zofl.core.checkpoint import check_async_extra
    from zofl.methods import METHODS
    from zofl.setup import prepare

    path, extra, _, _, k = queue
    cfg, task, spec = prepare({**ASYNC, "local-steps": 0})
    method = METHODS[cfg.strategy].server(cfg, task, spec)
    check_async_extra(path, {n: np.array(a) for n, a in extra.items()}, method, method.init(), k)


def test_under_the_wall_clock_a_task_is_never_due():
    """A task's ``due`` is NaN under clock = wall (replies come when they come), finite under the
    simulated clock; either is refused under the other clock."""
    from zofl.core.checkpoint import _check_task

    arrays = {"x": np.zeros(3)}

    def check(due, simulated):
        extra = {"task0/meta": np.array([1.0, 2.0, 3.0, 1.0, 0.5, due]), "task0/config": np.array("{}"),
                 "task0/arrays/x": np.zeros(3)}
        _check_task(P, extra, 0, M, 5, 4, simulated, arrays)

    check(np.nan, simulated=False)
    check(0.5, simulated=True)
    with pytest.raises(RunFolderError, match=r"version in 0\.\.4, sent_at >= 0, due NaN \(wall clock\)\)"):
        check(0.5, simulated=False)
    with pytest.raises(RunFolderError, match=r"due >= sent_at\)"):
        check(np.nan, simulated=True)


# -- run.resume_point: records without a checkpoint, a checkpoint ahead of the records ------------------
def _writer(d: Path, last: int | None, **config):
    records = [] if last is None else [{"round": r} for r in range(last + 1)]
    return SimpleNamespace(dir=d, records=records, stored_config=config)


@pytest.mark.parametrize("every,last", [(1, 1), (2, 2), (2, 1)])
def test_records_up_to_the_first_checkpoint_without_it_start_again(tmp_path, caplog, every, last):
    from zofl.core.run import resume_point

    assert resume_point(_writer(tmp_path, last, **{"checkpoint-every": every}), None, 10) is None
    assert f"resume: {tmp_path} stopped at round {last}, before its first checkpoint (round {every}): it starts " \
           f"again from round 0" in caplog.text


@pytest.mark.parametrize("config,last", [({"checkpoint-every": 0}, 0), ({"checkpoint-every": 2}, 3), ({}, 1)])
def test_records_past_a_checkpoint_that_is_not_there_are_refused(tmp_path, config, last):
    """A config.json without the key counts as checkpoint-every = 0 (no checkpoint was ever due)."""
    from zofl.core.run import resume_point

    with pytest.raises(RunFolderError, match=rf"rounds\.jsonl holds rounds 0-{last} but there is no checkpoint\.npz"):
        resume_point(_writer(tmp_path, last, **config), None, 10)


@pytest.mark.parametrize("last,says", [(None, "no round"), (1, "round 1")])
def test_a_checkpoint_ahead_of_the_records_says_where_they_end(tmp_path, last, says):
    from zofl.core.checkpoint import save_checkpoint
    from zofl.core.run import resume_point

    save_checkpoint(tmp_path, 2, 0.5, {"x": np.zeros(3)}, {"sim_clock": np.array(0.0)})
    with pytest.raises(RunFolderError, match=rf"checkpoint\.npz holds round 2 but rounds\.jsonl ends at {says}; "):
        resume_point(_writer(tmp_path, last, **{"checkpoint-every": 1}), None, 10)


# -- AsyncRun._restore: what a resume does with the queue it was given ---------------------------------
@pytest.mark.parametrize("leave,where,seed", [("1:6:3", "no task", 0), ("3:7:2", "a task in flight", 0),
                                             ("2:7:2", "a rejoin", 0), ("2:7:1", "a rejoin", 2)])
def test_a_resume_with_a_client_on_leave_at_the_checkpoint_gives_the_uninterrupted_run(tmp_path, leave, where, seed):
    """A client is on leave (``leave``) at the checkpoint of update 7, with no task, with its task still in
    flight, or sitting a task out (under seed 2 its leave ends before its rejoin is due); the resumed run keeps
    it away exactly as the uninterrupted run does."""
    from zofl.inprocess import run_inprocess

    pid = int(leave[0])
    keys = {**ASYNC, "leave": leave, "seed": seed, "output-dir": str(tmp_path)}
    _, x_ref = run_inprocess({**keys, "run-name": "ref", "num-rounds": 12}, workers=0)
    d, _ = run_inprocess({**keys, "run-name": "cut"}, workers=0)
    k, _, _, extra = load_checkpoint(d)
    tasks = {int(extra[n][0]) for n in extra if n.endswith("/meta")}
    rejoins = set(extra["rejoins"][:, 2].astype(int).tolist())
    assert k == 7 and where == ("a task in flight" if pid in tasks else "a rejoin" if pid in rejoins else "no task")
    _, x = run_inprocess({**keys, "run-name": "cut", "num-rounds": 12, "resume": True}, workers=0)
    np.testing.assert_array_equal(x, x_ref)
    assert [r.get("away") for r in read_rounds(d)] == [r.get("away") for r in read_rounds(tmp_path / "ref")]


def _drop_task(extra: dict, pid: int) -> None:
    """The queue without client ``pid``'s task in flight (the tasks after it renumbered)."""
    metas = sorted((n for n in extra if n.endswith("/meta")), key=lambda n: int(n[4:-5]))
    tasks = [{n[len(m) - 4:]: a for n, a in extra.items() if n.startswith(m[:-4])} for m in metas]
    for n in [n for n in extra if n.startswith("task") and n != "task_no"]:
        del extra[n]
    keep = [t for t in tasks if int(t["meta"][0]) != pid]
    assert len(keep) == len(tasks) - 1
    for i, t in enumerate(keep):
        extra.update({f"task{i}/{part}": a for part, a in t.items()})


def test_a_client_given_up_before_the_checkpoint_gets_no_work_after_the_resume(tmp_path, caplog):
    """Client 3 given up (its task removed from the queue, its id in ``lost``), and on leave from version 7
    to 9: neither the resume nor its return from leave sends it work."""
    from zofl.core.checkpoint import save_checkpoint
    from zofl.inprocess import run_inprocess

    keys = {**ASYNC, "leave": "3:7:2", "output-dir": str(tmp_path), "run-name": "r"}
    d, _ = run_inprocess(keys, workers=0)
    k, wall_s, state, extra = load_checkpoint(d)
    _drop_task(extra, 3)
    extra["lost"] = np.array([3])
    save_checkpoint(d, k, wall_s, state, extra)
    run_inprocess({**keys, "num-rounds": 12, "resume": True}, workers=0)
    assert "resume: clients [3] were given up before the checkpoint and stay so" in caplog.messages
    after = read_rounds(d)[8:]
    assert len(after) == 5 and all(3 not in r["clients"] for r in after)
    assert {0, 1, 2} <= {p for r in after for p in r["clients"]}


def test_a_task_in_flight_whose_partition_no_node_holds_is_dropped_at_the_resume(tmp_path, caplog):
    """The client of the queue's first task has no SuperNode at the resume: its task is dropped (said), the
    tasks after it are sent as they were."""
    from zofl.core.protocol import NUM_PARTITIONS, PARTITION_ID
    from zofl.inprocess import run_inprocess

    keys = {**ASYNC, "output-dir": str(tmp_path), "run-name": "r"}
    d, _ = run_inprocess(keys, workers=0)
    _, _, _, extra = load_checkpoint(d)
    first = int(extra["task0/meta"][0])
    others = {int(extra[n][0]) for n in extra if n.endswith("/meta")} - {first}
    assert others
    nodes = {first: {PARTITION_ID: 99, NUM_PARTITIONS: 100}}
    run_inprocess({**keys, "num-rounds": 12, "resume": True, "client-wait-s": 1.0}, workers=0, node_config=nodes)
    assert f"resume: client {first}'s task in flight is dropped: no SuperNode holds its partition now" in \
        caplog.messages
    after = read_rounds(d)[8:]
    assert all(first not in r["clients"] for r in after) and others <= {p for r in after for p in r["clients"]}


def test_a_wall_clock_resume_keeps_each_restored_task_s_send_time(tmp_path):
    """Under the wall clock a restored task keeps the clock time it was sent at (the clock goes on across the
    resume), which its deadline and reply-timeout-s are measured from: the resumed run ends with no late reply."""
    from zofl.inprocess import run_inprocess

    # every client available: each always has a task in flight (under the wall clock a client sitting a task
    # out may or may not be back by the checkpoint)
    keys = {**ASYNC, "clock": "wall", "availability": "1", "round-deadline-s": 600.0, "output-dir": str(tmp_path),
            "run-name": "w"}
    d, _ = run_inprocess(keys, workers=0)
    assert sum(n.endswith("/meta") for n in load_checkpoint(d)[3]) == M  # every client's task in flight
    run_inprocess({**keys, "num-rounds": 12, "resume": True}, workers=0)
    summary = json.loads((d / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["total_late"] == 0 and len(read_rounds(d)) == 13


def test_under_the_wall_clock_a_client_that_sat_a_task_out_waits_the_task_s_duration(tmp_path):
    """Client 0 sits its first task (task 0) out (seed 3, availability 0.7: not available); under the wall clock
    it is offered work again after that task's duration, 2 steps x sim-step-s = 20 s / its speed 1, long after the
    other three clients (always available: under the wall clock which task a client gets depends on timing) have
    given the run's 4 updates (a fraction of a second with in-process clients)."""
    from zofl.core.sampling import available
    from zofl.inprocess import run_inprocess

    assert not available(3, 0, 0, 0.7)
    keys = {**ASYNC, "clock": "wall", "seed": 3, "availability": "0.7,1,1,1", "sim-step-s": 10.0,
            "speed-profile": "none", "num-rounds": 4, "checkpoint-every": 0, "output-dir": str(tmp_path),
            "run-name": "w"}
    d, _ = run_inprocess(keys, workers=0)
    records = read_rounds(d)[1:]
    assert len(records) == 4 and all(0 not in r["clients"] for r in records)
    assert json.loads((d / "summary.json").read_text())["total_wall_s"] < 20.0


def test_every_client_s_work_carries_the_run_s_data_fingerprint(tmp_path, monkeypatch):
    """Run.stamp: each work message holds the server's data fingerprint (data.json's), which the client checks
    against its own data before it trains (test_run_folder: a client with other data refuses)."""
    import zofl.client_app
    from zofl.inprocess import run_inprocess

    seen = []
    check = zofl.client_app.check_data
    monkeypatch.setattr(zofl.client_app, "check_data", lambda fp, *a: (seen.append(fp), check(fp, *a))[1])
    d, _ = run_inprocess({"num-rounds": 2, "num-clients": 3, "beta": 1.0, "output-dir": str(tmp_path),
                          "run-name": "fp"}, workers=0)
    assert seen == [json.loads((d / "data.json").read_text())["fingerprint"]] * 6


def test_a_synchronous_resume_goes_on_from_the_simulated_clock_of_its_checkpoint(tmp_path):
    """SyncRun's simulated clock (a record's clock_s) starts at 0 and, on resume, at the checkpoint's: with
    latency-s = 0.5 and steps of a microsecond each round adds 0.5 s, interrupted after round 2 or not."""
    from zofl.inprocess import run_inprocess

    keys = {"num-rounds": 4, "num-clients": 3, "latency-s": 0.5, "sim-step-s": 1e-6, "checkpoint-every": 2,
            "output-dir": str(tmp_path)}
    ref, _ = run_inprocess({**keys, "run-name": "ref"}, workers=0)
    cut, _ = run_inprocess({**keys, "run-name": "cut", "num-rounds": 2}, workers=0)
    run_inprocess({**keys, "run-name": "cut", "resume": True}, workers=0)
    for d in (ref, cut):
        assert [r["clock_s"] for r in read_rounds(d)[1:]] == pytest.approx([0.5, 1.0, 1.5, 2.0], abs=1e-3)


def test_a_sampled_partition_no_supernode_holds_is_a_lost_client_each_round(tmp_path):
    """SyncRun.plan and check in a run: the SuperNode meant for partition 2 claims another partition (refused), so
    partition 2 is unheld; each round samples it (beta = 1) and counts it as a "lost" failure of client 2."""
    from zofl.core.protocol import NUM_PARTITIONS, PARTITION_ID
    from zofl.inprocess import run_inprocess

    d, _ = run_inprocess({"num-rounds": 2, "num-clients": 3, "beta": 1.0, "client-wait-s": 1.0,
                          "output-dir": str(tmp_path), "run-name": "u"},
                         workers=0, node_config={2: {PARTITION_ID: 99, NUM_PARTITIONS: 100}})
    s = json.loads((d / "summary.json").read_text())
    assert (s["unheld_partitions"], s["total_lost"], s["failures_by_client"]) == ([2], 2, {"2": 2})
    assert [(r["failed_clients"], r["lost"]) for r in read_rounds(d)[1:]] == [([2], 1)] * 2


def test_of_the_sampled_clients_only_those_there_are_asked_stragglers_among_them(tmp_path):
    """SyncRun.plan with availability 0.6 and straggler-prob 0.5: each round contacts S_r's clients that are there
    (round_available), and its stragglers are the stragglers among them, as drawn from the seed."""
    from zofl.core.sampling import round_available, sample_round
    from zofl.inprocess import run_inprocess

    d, _ = run_inprocess({"num-rounds": 6, "num-clients": 6, "beta": 1.0, "availability": "0.6",
                          "straggler-prob": 0.5, "output-dir": str(tmp_path), "run-name": "a"}, workers=0)
    want = []
    for r in range(6):
        sampled, stragglers = sample_round(0, r, 6, 1.0, 0.5)
        there = round_available(0, r, sampled, "0.6", {})
        want.append((there, sum(p in there for p in stragglers)))
    assert [(r["sampled"], r["stragglers"]) for r in read_rounds(d)[1:]] == want
    assert any(len(th) < 6 for th, _ in want) and any(0 < k for _, k in want)  # the case is there


def test_a_round_s_wall_time_runs_from_its_plan_to_its_record(tmp_path, monkeypatch):
    """SyncRun.plan's t0: under a clock that ticks once per reading (the engine reads it when a round's plan
    begins and when its record is made), each round's wall_s is 1 tick: from its plan, not from another origin."""
    import itertools

    from zofl.inprocess import run_inprocess

    ticks = itertools.count()
    monkeypatch.setattr("zofl.core.rounds.time", SimpleNamespace(perf_counter=lambda: float(next(ticks))))
    d, _ = run_inprocess({"num-rounds": 3, "num-clients": 3, "output-dir": str(tmp_path), "run-name": "t"}, workers=0)
    assert [r["wall_s"] for r in read_rounds(d)[1:]] == [1.0, 1.0, 1.0]


def test_a_non_finite_synchronous_round_keeps_the_model_and_names_the_round(tmp_path, monkeypatch, caplog):
    """SyncRun.complete refuses a non-finite aggregate (as the asynchronous engine does, test_async): FedAvg's round
    2 made non-finite by a stand-in (a test about the engine's logic) is recorded as rejected, x stays what round 1
    left, the error names round 2, and the run goes on."""
    from zofl.inprocess import run_inprocess
    from zofl.methods.fedavg import FedAvg

    real = FedAvg.update

    def poisoned(self, state, plan, replies):
        new, fields = real(self, state, plan, replies)
        return ({**new, "x": np.full_like(new["x"], np.inf)} if plan.r == 1 else new), fields

    monkeypatch.setattr(FedAvg, "update", poisoned)
    with caplog.at_level(logging.ERROR, logger="zofl"):
        d, x = run_inprocess({"strategy": "fedavg", "num-rounds": 3, "num-clients": 3, "output-dir": str(tmp_path),
                              "run-name": "inf"}, workers=0)
    rec = read_rounds(d)
    assert [r["round"] for r in rec if r.get("model_rejected")] == [2] and np.isfinite(x).all()
    assert rec[2]["test_loss"] == rec[1]["test_loss"] != rec[3]["test_loss"]
    assert [m for m in caplog.messages if "not finite" in m] == [
        "round 2: the aggregate is not finite; the global model stays"]


def test_a_round_s_simulated_time_is_its_slowest_reply_plus_latency_at_most_the_deadline():
    """SyncRun.round_sim_s: per used reply, steps x sim-step-s / its speed x its multiplier + down + up (drawn for
    round r and the client); the slowest one plus latency-s, cut at round-deadline-s when there is one."""
    from zofl.core.protocol import Reply
    from zofl.core.rounds import SyncRun

    delays = {(3, 0): (0.01, 0.02, 2.0), (3, 1): (0.0, 0.0, 1.0)}  # (down, up, multiplier) of (round, client)
    run = SimpleNamespace(cfg=SimpleNamespace(sim_step_s=0.1, latency_s=0.05, round_deadline_s=0.0),
                          speeds=[0.5, 1.0], sim_delays=lambda r, pid: delays[r, pid])
    used = [Reply(0, {}, 1, {"steps": 4}), Reply(1, {}, 1, {"steps": 2})]
    assert SyncRun.round_sim_s(run, used, 3) == pytest.approx(4 * 0.1 / 0.5 * 2.0 + 0.03 + 0.05)
    assert SyncRun.round_sim_s(run, used[1:], 3) == pytest.approx(2 * 0.1 + 0.05)
    assert SyncRun.round_sim_s(run, [], 3) == pytest.approx(0.05)
    assert SyncRun.round_sim_s(run, [Reply(1, {}, 1, {})], 3) == pytest.approx(0.05)  # a reply with no steps: 0
    run.cfg.round_deadline_s = 1.0
    assert SyncRun.round_sim_s(run, used, 3) == 1.0
    assert SyncRun.round_sim_s(run, used[1:], 3) == pytest.approx(0.25)


def test_a_round_reads_model_replies_as_updates_from_what_each_client_was_sent():
    """SyncRun.outliers: FedAvg's replies are models; what is compared is each model minus the x it was sent. The
    models all lie near x = 100 (norm 200), so read as they are the size floor (0.5 x 200) hides client 4's update
    of 1 per coordinate; read as updates (sizes about 0.01) it is far outside their spread."""
    from zofl.core.method import RoundPlan
    from zofl.core.protocol import Reply, Work
    from zofl.core.rounds import SyncRun

    x = np.full(4, 100.0)
    rng = np.random.default_rng(0)
    updates = [rng.normal(0, 0.01, 4) for _ in range(4)] + [np.ones(4)]
    plan = RoundPlan(0, list(range(5)), [], [Work(p, 0, 1, {"x": x}) for p in range(5)])
    assert SyncRun.outliers(plan, [Reply(p, {"x": x + u}, 1) for p, u in enumerate(updates)]) == [4]


def test_a_run_whose_rounds_take_several_records_says_so_in_its_summary(tmp_path, capsys):
    """SyncRun.setting: FedNest's one outer round takes inner-rounds + N + 1 = 11 communication rounds, and the
    printed summary says both."""
    from zofl.inprocess import run_inprocess

    run_inprocess({"strategy": "fednest", "task": "hyper-cleaning", "num-rounds": 1, "num-clients": 2,
                   "output-dir": str(tmp_path), "run-name": "n"}, workers=0)
    assert capsys.readouterr().out.startswith(
        "FedNest_SGD on digits: 1 rounds (11 communication rounds), m=2, alpha=1.0, beta=0.5\n")


def _round_checker():
    """The part of a SyncRun that check() reads: a method whose replies are {"x": (2,)} for the state "state" in
    rounds 0 and 3 (a KeyError for any other state or round), and reply-max-abs."""
    shapes = {("state", 3): {"x": (2,)}, ("state", 0): {"x": (2,)}}
    return SimpleNamespace(method=SimpleNamespace(reply_shapes=lambda state, r: shapes[state, r]), state="state",
                           cfg=SimpleNamespace(reply_max_abs=1e6))


def test_an_unheld_partition_keeps_its_name_beside_errors_that_name_no_client():
    """SyncRun.check on the legacy API's mix: client 0 replies, partition 1 has no SuperNode, client 2's error
    names no client. The unheld partition's failure names client 1, so the anonymous error is client 2's."""
    from zofl.core.method import RoundPlan
    from zofl.core.protocol import Failure, Reply
    from zofl.core.rounds import SyncRun

    run = _round_checker()
    plan = RoundPlan(0, [0, 1, 2], [], [], unreachable=[1])
    used, failures = SyncRun.check(run, plan, [Reply(0, {"x": np.zeros(2)}, 1)], [Failure(None, "boom")])
    assert [r.pid for r in used] == [0]
    assert sorted((f.pid, f.kind, f.reason) for f in failures) == [
        (1, "lost", "no connected SuperNode holds partition 1"), (2, "error", "boom")]


def test_a_round_s_check_ignores_strangers_and_second_replies_and_says_which_round(caplog):
    """SyncRun.check, round r = 3 (printed 4): a reply of a client not sampled and a second reply are ignored, a
    reply of the wrong shape is rejected, a sampled client with neither reply nor failure is late; each said."""
    from zofl.core.method import RoundPlan
    from zofl.core.protocol import Failure, Reply
    from zofl.core.rounds import SyncRun

    run = _round_checker()
    first = Reply(0, {"x": np.zeros(2)}, 1)
    replies = [Reply(2, {"x": np.zeros(3)}, 1), first, Reply(5, {"x": np.zeros(2)}, 1), Reply(0, {"x": np.ones(2)}, 1)]
    with caplog.at_level(logging.WARNING, logger="zofl"):
        used, failures = SyncRun.check(run, RoundPlan(3, [0, 1, 2], [], []), replies, [])
    assert used == [first]
    assert [(f.pid, f.kind) for f in failures] == [(2, "rejected"), (1, "late")]
    assert caplog.messages == [
        f"round 4: dropped client 2: {failures[0].reason}",
        "round 4: ignored a reply from client 5 (not sampled, or a second reply)",
        "round 4: ignored a reply from client 0 (not sampled, or a second reply)",
        "round 4: client 1 failed or missed the deadline: no reply before the round deadline"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="zofl"):
        assert SyncRun.check(run, RoundPlan(0, [0, 1], [], []), [], [])[0] == []
    assert caplog.messages[-1] == "round 1: no usable client reply (2 sampled, 2 failed)"
    # a failure of a client not sampled (an unknown node's) names nobody
    used, failures = SyncRun.check(run, RoundPlan(0, [0], [], []), [first], [Failure(7, "stray")])
    assert used == [first] and [(f.pid, f.reason) for f in failures] == [(None, "stray")]


def test_an_asynchronous_run_that_can_get_no_more_work_fails_saying_why(tmp_path):
    """AsyncRun.run's two dead ends: every client on leave from version 2 on (update 3 cannot come), and AFBO's
    clients (one update per version) waiting for an update whose buffer never fills (a corrupt reply dropped)."""
    from zofl.core.policy import RunFailed
    from zofl.inprocess import run_inprocess

    leave = {"strategy": "fedbuff", "engine": "async", "num-clients": 2, "local-steps": 2, "num-rounds": 4,
             "buffer-size": 2, "leave": "0:2:100,1:2:100", "output-dir": str(tmp_path), "run-name": "leave"}
    with pytest.raises(RunFailed, match=re.escape(
            "asynchronous run: update 3 cannot come: no work is in flight and clients [0, 1] are on leave until a "
            "version the run cannot reach (run-config key 'leave' = '0:2:100,1:2:100')")):
        run_inprocess(leave, workers=0)
    afbo = {"strategy": "afbo", "engine": "async", "task": "hyper-cleaning", "num-clients": 2, "num-rounds": 4,
            "buffer-size": 2, "corrupt-prob": 0.5, "reply-timeout-s": 60.0, "output-dir": str(tmp_path),
            "run-name": "wait"}
    with pytest.raises(RunFailed, match=re.escape(
            "asynchronous run: update 1 needs buffer-size = 2 usable replies, but no work is in flight: 2 client(s) "
            "have replied for this version and wait for the update (the other replies were rejected or their clients "
            "given up after reply-timeout-s = 60 s: see the log)")):
        run_inprocess(afbo, workers=0)


# -- method.pretrain: x_0's pre-training draws from the run's seed ----------------------------------------
def test_pretraining_visits_the_server_data_in_the_order_of_the_runs_seed():
    from zofl.core.method import pretrain

    class Data(SimpleNamespace):
        def __len__(self):
            return len(self.y)

    def order(seed):
        seen = []

        def grad(x, xb, yb):
            seen.extend(int(v) for v in yb)
            return np.zeros_like(x)
        pretrain(SimpleNamespace(grad=grad), np.zeros(2), Data(x=np.zeros((8, 1)), y=np.arange(8)), 1, 0.1, 3, seed)
        return seen

    assert order(3) == [6, 7, 2, 1, 4, 5, 3, 0]  # recorded (numpy 2.4's PCG64 from SeedSequence([3, 0]))
    assert order(4) == [1, 2, 0, 7, 4, 5, 3, 6]


# -- sampling.client_local_steps and evaluation.model_metrics at zero ------------------------------------
def test_no_local_steps_stay_none_and_a_fraction_of_one_is_one():
    from zofl.core.sampling import client_local_steps

    assert client_local_steps(0, 2.0) == 0 and client_local_steps(1, 0.1) == 1 and client_local_steps(4, 1.5) == 6


def test_f1_without_server_data_is_zero_not_the_loss_of_nothing():
    from zofl.core.evaluation import model_metrics
    from zofl.tasks import ArrayData

    task = SimpleNamespace(loss=lambda x, a, b: 7.0, predict=lambda x, a: np.zeros(len(a), dtype=int))
    data = ArrayData(np.zeros((2, 3)), np.array([0, 1]), 2)
    empty = ArrayData(np.zeros((0, 3)), np.zeros(0, dtype=int), 2)
    assert model_metrics(task, np.zeros(3), data, empty) == {"test_acc": 0.5, "test_loss": 7.0, "f1": 0.0}
    assert model_metrics(task, np.zeros(3), data, data)["f1"] == 7.0


def test_a_task_s_float32_initial_parameters_become_a_float64_x0(tmp_path):
    """x_0 is float64 whatever the task's init_params gives (a torch model's come in float32): a checkpoint
    of the run then matches a fresh state of it, and the run resumes."""
    from zofl.inprocess import run_inprocess

    keys = {"task": "tests.plugin_task:Float32InitTask", "server-fraction": 0.0, "x0": "zeros", "num-rounds": 2,
            "num-clients": 2, "tau": 1.0, "checkpoint-every": 1, "output-dir": str(tmp_path), "run-name": "r"}
    run_inprocess(keys, workers=0)
    _, x = run_inprocess({**keys, "num-rounds": 3, "resume": True}, workers=0)
    assert x.dtype == np.float64


def test_a_run_s_summary_says_what_ran_and_its_clock_and_counts_start_from_zero(tmp_path, monkeypatch, caplog,
                                                                                  capsys):
    """Run.__init__ and finish (run D, continued): under a stopped clock a fresh run's wall time is 0 exactly
    (summary and checkpoint); the summary names the strategy, dataset, rounds, engine and rule; the printed lines
    start with the setting and are in the log too; late counts start at 0; a resume says where it goes on."""
    from zofl.inprocess import run_inprocess

    keys = {"num-rounds": 2, "num-clients": 2, "checkpoint-every": 1, "coef-clip": 2.0, "output-dir": str(tmp_path),
            "run-name": "r"}
    with monkeypatch.context() as mp:
        mp.setattr("zofl.core.run.time", SimpleNamespace(perf_counter=lambda: 50.0))
        d, _ = run_inprocess(keys, workers=0)
    summary = json.loads((d / "summary.json").read_text())
    assert summary["total_wall_s"] == 0.0 == load_checkpoint(d)[1]
    assert [summary[k] for k in ("strategy", "dataset", "rounds", "engine")] == ["zohfl", "digits", 2, "sync"]
    assert (summary["results_dir"], summary["refused_nodes"], summary["rejoined_nodes"]) == (str(d), [], [])
    assert summary["robust_rule"] == "coef-clip = 2"  # the rule in force: ZO-HFL's, so the method's name counts
    assert capsys.readouterr().out.startswith("ZO-HFL on digits: 2 rounds, m=2, alpha=1.0, beta=0.5\n")
    late = [{k: r[k] for k in ("late_queued", "late_slow", "late_failed")} for r in read_rounds(d)[1:]]
    assert late == [{"late_queued": 0, "late_slow": 0, "late_failed": 0}] * 2  # counts from 0, not None
    with caplog.at_level(logging.INFO, logger="zofl"):
        run_inprocess({**keys, "num-rounds": 3, "resume": True}, workers=0)
    assert f"resume: continuing {d} after round 2" in caplog.messages
    last = read_rounds(d)[3]  # each record's line in the log
    assert f"round 3: test acc {last['test_acc']:.4f}, test loss {last['test_loss']:.4f}" in caplog.messages
    printed = capsys.readouterr().out
    assert printed.startswith("ZO-HFL on digits: 3 rounds") and printed[:-1] in caplog.messages  # the log has it too


def test_a_one_round_run_checkpoints_its_round_and_a_run_without_supernodes_finishes(tmp_path, monkeypatch):
    """Run._write_record and finish (run D's last part): a run of one round checkpoints it (round 1 is the
    first and the last); a Run driven directly, with no Flower strategy and so no federation, still writes
    its summary, with no refused or rejoined SuperNodes, and prints it flushed (a pipe sees it at once)."""
    import io
    import sys

    from zofl.core.rounds import SyncRun
    from zofl.inprocess import run_inprocess
    from zofl.server_app import make_run

    keys = {"num-rounds": 1, "num-clients": 2, "output-dir": str(tmp_path)}
    d, _ = run_inprocess({**keys, "run-name": "one"}, workers=0)
    ck = load_checkpoint(d)
    assert ck is not None and ck[0] == 1

    class Out(io.StringIO):  # records how much of what was printed a flush had written through
        flushed_at = None

        def flush(self):
            self.flushed_at = len(self.getvalue())

    cfg, method, writer = make_run({**keys, "run-name": "direct"})
    monkeypatch.setattr(sys, "stdout", out := Out())
    with writer:
        summary = SyncRun(cfg, method, writer).finish()
    assert (summary["refused_nodes"], summary["rejoined_nodes"], summary["results_dir"]) == \
        ([], [], str(tmp_path / "direct"))
    assert out.getvalue().startswith("ZO-HFL on digits: 1 rounds") and out.flushed_at == len(out.getvalue())


def test_a_resumed_run_counts_the_failed_rounds_already_recorded(tmp_path):
    """Run.__init__ (run D's last part): the failure policy's count goes on from the records a resume keeps,
    so a resume does not start it again from 0. 4 rounds of 2 clients with min-replies 2 and crash-prob 0.4:
    rounds 1, 2 and 4 fail (seed 0); a resume to 6 rounds starts its count at 3."""
    from zofl.core.rounds import SyncRun
    from zofl.inprocess import run_inprocess
    from zofl.server_app import make_run

    keys = {"num-rounds": 4, "num-clients": 2, "beta": 1.0, "crash-prob": 0.4, "min-replies": 2,
            "max-failed-rounds": 1.0, "output-dir": str(tmp_path), "run-name": "r"}
    d, _ = run_inprocess(keys, workers=0)
    assert [bool(r.get("round_failed")) for r in read_rounds(d)[1:]] == [True, True, False, True]
    cfg, method, writer = make_run({**keys, "num-rounds": 6, "resume": True})
    with writer:
        assert SyncRun(cfg, method, writer).failed_rounds == 3


def test_reply_fields_cost_of_the_used_replies():
    """A record's cost fields (mutation run D, continued): compute summed and maxed, the slowest wall time, the
    local steps; a metric a reply lacks counts 0, and a round with no used reply records 0.0, not None."""
    from zofl.core.protocol import Reply
    from zofl.core.record import reply_fields

    replies = [Reply(0, {}, 1, {"compute_s": 0.5, "wall_s": 2.0, "steps": 3}),
               Reply(1, {}, 1, {"compute_s": 1.25, "wall_s": 1.5, "steps": 4}),
               Reply(2, {}, 1, {})]
    assert reply_fields(replies) == {"client_compute_s": 1.75, "client_compute_max_s": 1.25,
                                     "client_wall_max_s": 2.0, "local_steps": 7}
    assert reply_fields([Reply(3, {}, 1, {"wall_s": 0.25}), Reply(4, {}, 1, {"compute_s": 0.5})]) == {
        "client_compute_s": 0.5, "client_compute_max_s": 0.5, "client_wall_max_s": 0.25, "local_steps": 0}
    none = reply_fields([])
    assert none == {"client_compute_s": 0.0, "client_compute_max_s": 0.0, "client_wall_max_s": 0.0, "local_steps": 0}
    assert all(type(v) is float for k, v in none.items() if k != "local_steps")


def test_a_non_finite_aggregate_keeps_the_model_and_says_so(caplog):
    """finite_or_kept (mutation run D, continued): a non-finite x gives back the state before the step, its
    record marked, and one error line naming the step; a finite one passes through, silently."""
    import logging

    from zofl.core.checks import finite_or_kept

    old, bad, good = {"x": np.zeros(2)}, {"x": np.array([1.0, np.inf])}, {"x": np.ones(2)}
    with caplog.at_level(logging.ERROR, logger="zofl"):
        assert finite_or_kept(good, {"a": 1}, old, "round 2") == (good, {"a": 1})
        assert caplog.messages == []
        state, fields = finite_or_kept(bad, {"a": 1}, old, "update 7")
    assert state is old and fields == {"a": 1, "model_rejected": True}
    assert caplog.messages == ["update 7: the aggregate is not finite; the global model stays"]


def test_reply_checks_take_float64_only_and_empty_arrays():
    """reply_problem (run D's left survivors; issue 47): only float64 arrays are replies (every zofl model is
    float64; a torch task's vector too), integer and float32 ones are named, and a reply whose arrays are all
    empty has no magnitude to refuse, whatever the bound."""
    from zofl.core.checks import reply_problem

    assert reply_problem({"n": np.arange(3.0), "x": np.ones(2)}, {"n": (3,), "x": (2,)}, 1e6) is None
    assert reply_problem({"n": np.arange(3, dtype=np.int64), "x": np.ones(2, np.float32)},
                         {"n": (3,), "x": (2,)}, 1e6) == \
        "wrong dtype {'n': 'int64', 'x': 'float32'}, expected float64 (replies are real float64, never cast)"
    assert reply_problem({"x": np.zeros(0)}, {"x": (0,)}, 0.5) is None
    assert reply_problem([np.zeros((0, 2))], [(0, 2)], 0.5) is None
    assert reply_problem({"x": np.array(["a"])}, {"x": (1,)}, 1e6) == \
        "wrong dtype {'x': '<U1'}, expected float64 (replies are real float64, never cast)"


def test_availability_at_its_floor_is_allowed_and_below_it_is_refused_with_its_reason():
    """sampling.available (run D, continued): p = MIN_AVAILABILITY itself is a valid probability (the
    run-config's range is closed there), below it the error names the client, the value and the key."""
    from zofl.core.sampling import available
    from zofl.settings import MIN_AVAILABILITY

    draws = [available(0, n, 3, MIN_AVAILABILITY) for n in range(2000)]
    assert 0 < sum(draws) < 100  # about 20 of 2,000
    with pytest.raises(ValueError, match=r"^availability 0\.005 of client 3 is below 0\.01 \(run-config "
                                         r"'availability'\): the client would sit out about 1/p tasks"):
        available(0, 1, 3, 0.005)
    with pytest.raises(ValueError, match="availability nan of client 2"):
        available(0, 1, 2, float("nan"))


def test_summary_numbers_and_records_own_their_lists():
    """(run D, continued) fmt: 4 decimals, "n/a" for a missing or NaN value. make_record: a record's empty
    lists (sampled, outliers) are its own, so that filling one record's never fills another's or the template."""
    from zofl.core.record import EMPTY, make_record
    from zofl.core.summary import fmt

    assert [fmt(None), fmt(float("nan")), fmt(0.123456), fmt(2)] == ["n/a", "n/a", "0.1235", "2.0000"]
    a = make_record(1, {"f1": 0.5}, {})
    b = make_record(2, {"f1": 0.5}, {})
    a["sampled"].append(3)
    a["outliers"].append(1)
    assert b["sampled"] == [] and b["outliers"] == [] and EMPTY["sampled"] == [] and EMPTY["outliers"] == []
    assert a["objective"] != a["objective"]  # f1 + NaN: no f2 estimate


def test_a_run_summary_adds_up_its_records():
    """summarize (run D, continued), on three hand-made records: the first, last and best accuracy (a record
    without one counts 0), every total (a field a record lacks or holds as None counts 0), the rounds whose
    model was refused, and the clients by failed and by outlier rounds, most first then by id."""
    from zofl.core.summary import summarize

    base = {"client_compute_s": 0.0, "local_steps": 0, "uplink_bytes": 0, "downlink_bytes": 0}
    r0 = {**base, "round": 0, "test_acc": 0.1, "test_loss": 2.0}
    r1 = {"round": 1, "test_acc": None, "test_loss": None, "client_compute_s": 0.5, "local_steps": 7,
          "uplink_bytes": 100, "downlink_bytes": 300, "failures": 3, "sampled": [0, 1, 2, 3], "participants": 1,
          "dropped": 3, "rejected": 1, "late": 1, "errors": 1, "lost": 0, "late_queued": 1, "late_slow": None,
          "late_failed": 0, "model_rejected": True, "failed_clients": [3, 2, 1], "outliers": [0]}
    r2 = {"round": 2, "test_acc": 0.4, "test_loss": 1.5, "client_compute_s": 0.25, "local_steps": 3,
          "uplink_bytes": 50, "downlink_bytes": None, "failures": 2, "sampled": [2, 3], "participants": 0,
          "dropped": 2, "rejected": 0, "late": 1, "errors": 0, "lost": 1, "late_slow": 1, "late_failed": 2,
          "model_rejected": False, "failed_clients": [3, 2], "outliers": [0, 2]}
    s = summarize([r0, r1, r2], status="ok", rounds=2)
    assert s == {
        "status": "ok", "rounds": 2, "final_test_acc": 0.4, "final_test_loss": 1.5, "initial_test_acc": 0.1,
        "best_test_acc": 0.4, "total_client_compute_s": 0.75, "total_local_steps": 10, "total_uplink_bytes": 150,
        "total_downlink_bytes": 300, "total_failures": 5, "total_sampled": 6, "total_participants": 1,
        "total_dropped": 5, "total_rejected": 1, "total_late": 2, "total_errors": 1, "total_lost": 1,
        "total_late_queued": 1, "total_late_slow": 1, "total_late_failed": 2, "rounds_model_rejected": 1,
        "failures_by_client": {"2": 2, "3": 2, "1": 1}, "total_outlier_replies": 3,
        "outliers_by_client": {"0": 2, "2": 1}}
    assert list(s["failures_by_client"]) == ["2", "3", "1"] and list(s["outliers_by_client"]) == ["0", "2"]
    assert summarize([{**r0, "test_acc": 0.0}, {**r2, "test_acc": None}])["best_test_acc"] == 0


def test_pending_failures_add_to_the_summary_s_totals():
    """add_pending (run D, continued): failures of an update that never came add to the totals already
    counted, by kind and by client."""
    from zofl.core.protocol import Failure
    from zofl.core.summary import add_pending

    s = {"total_failures": 3, "total_late": 1, "total_errors": 2, "total_rejected": 0, "total_lost": 0,
         "failures_by_client": {"1": 2, "0": 1}}
    add_pending(s, [Failure(0, "crash", "error"), Failure(2, "no reply", "late"), Failure(0, "bad", "rejected")])
    assert s == {"total_failures": 6, "total_late": 2, "total_errors": 3, "total_rejected": 1, "total_lost": 0,
                 "failures_by_client": {"0": 2, "1": 2, "2": 1}}
    add_pending(s, [])
    assert s["total_failures"] == 6


FULL_SUMMARY = {
    "dataset": "digits", "initial_test_acc": 0.1, "final_test_acc": 0.52341, "best_test_acc": 0.6,
    "final_test_loss": float("nan"), "total_local_steps": 120, "total_client_compute_s": 1.26, "total_wall_s": 10.04,
    "total_sampled": 40, "total_participants": 30, "total_dropped": 10, "total_failures": 12, "total_late": 7,
    "total_late_queued": 2, "total_late_slow": 1, "total_late_failed": 0, "total_errors": 3, "total_rejected": 1,
    "total_lost": 1, "rounds_model_rejected": 2, "failures_by_client": {str(i): 10 - i for i in range(9)},
    "unheld_partitions": [4, 7], "refused_nodes": [{"node": 11, "claims": 2, "held_by": 5},
                                                   {"node": 12, "claims": 9, "held_by": -1}],
    "rejoined_nodes": [{"node": 13, "partition": 3}, {"node": 14, "partition": 6}], "total_outlier_replies": 5,
    "outliers_by_client": {"3": 4, "1": 1}, "robust_rule": "median", "outlier_warning": "warning: w",
    "engine": "async", "status": "failed", "failure": "the policy stopped it", "results_dir": "/r/x",
    "startup": {"runtime_s": 41.25, "setup_s": 2.0, "node_map_s": 146.04, "first_round": 1, "first_round_s": 50.0}}


def test_the_printed_summary_says_every_part_of_a_run_s_outcome():
    """summary_lines (run D, continued): what `zofl run` prints last, every branch: where the start-up went, a
    run with failures of each kind (late ones told apart, the rest "with no reply seen"), more than 8 failing
    clients, unheld partitions, refused and rejoined SuperNodes, outliers under a robust rule and a warning, a
    failed status; and a clean run, whose lines say only what happened."""
    from zofl.core.summary import summary_lines

    assert summary_lines("ZO-HFL", FULL_SUMMARY, "20 rounds, m=10") == [
        "ZO-HFL on digits: 20 rounds, m=10",
        "  test accuracy 0.1000 -> 0.5234 (best 0.6000), test loss n/a",
        "  120 local steps, 1.3s client compute, 10.0s wall",
        "  start-up: runtime 41.2 s, server set-up 2.0 s, node map 146.0 s, round 1 50.0 s",
        "  clients: 40 sampled, 30 replies used, 10 dropped; 12 failures: 7 late (2 queued behind other clients' "
        "work, 1 slow at the client, 4 with no reply seen), 3 errors, 1 rejected, 1 lost (SuperNode gone); the "
        "aggregate was refused in 2 round(s)",
        "  clients with failures (rounds): 0 (10), 1 (9), 2 (8), 3 (7), 4 (6), 5 (5), 6 (4), 7 (3), ...",
        "  federation: no SuperNode holds partition(s) [4, 7]",
        "  federation: refused SuperNode(s): 11 (partition 2, held by 5), 12 (partition 9, not a partition of this "
        "run)",
        "  federation: SuperNode(s) that took a partition over: 13 (partition 3), 14 (partition 6)",
        "  replies far outside their updates' spread: 5, by client (updates): 3 (4), 1 (1); limited by median",
        "  warning: w",
        "  FAILED: the policy stopped it",
        "  results: /r/x"]
    clean = {k: FULL_SUMMARY[k] for k in ("dataset", "initial_test_acc", "final_test_acc", "best_test_acc",
                                           "final_test_loss", "total_local_steps", "total_client_compute_s",
                                           "total_wall_s", "results_dir")}
    assert summary_lines("FedAvg", {**clean, "status": "ok", "total_late_slow": 1}, "3 rounds") == [
        "FedAvg on digits: 3 rounds",
        "  test accuracy 0.1000 -> 0.5234 (best 0.6000), test loss n/a",
        "  120 local steps, 1.3s client compute, 10.0s wall",
        "  clients: 0 sampled, 0 replies used, 0 dropped; 0 failures: 0 late, 0 errors, 0 rejected, 0 lost "
        "(SuperNode gone)",
        "  results: /r/x"]


def test_the_outlier_warning_names_persistent_clients_under_the_mean_only():
    """outlier_warning and used_rounds (run D, continued): a client flagged in at least 3 rounds and in at least
    a fifth of the rounds that used its reply is named, with both counts; under a robust rule, or below either
    bound, there is no warning. Used rounds come from an update's ``used`` list, else its ``clients``, else a
    round's sampled clients that did not fail."""
    from zofl.core.summary import outlier_warning, used_rounds

    rounds = [{"sampled": [0, 1, 2], "failed_clients": [2], "outliers": [1]} for _ in range(3)] + \
        [{"sampled": [0, 1, 2], "failed_clients": [], "outliers": [0]} for _ in range(12)]
    assert used_rounds(rounds) == {0: 15, 1: 15, 2: 12}
    assert used_rounds([{"clients": [3, 3, 4]}, {"used": [{"client": 5}], "clients": [6]}]) == {3: 1, 4: 1, 5: 1}
    # client 1: 3 of 15 rounds (a fifth): named; client 0: 12 of 15
    assert outlier_warning(rounds, None) == (
        "warning: replies of client(s) 0 (12 of 15 rounds), 1 (3 of 15 rounds) lay far outside their rounds' "
        'spread; under aggregation = "mean" one hostile client can move the model: try aggregation = "median" '
        'or "trimmed-mean" (docs/robustness.md)')
    assert "try aggregation = \"median\" or coef-clip" in outlier_warning(rounds, None, clip=True, unit="updates")
    assert "0 (12 of 15 updates)" in outlier_warning(rounds, None, unit="updates")
    assert outlier_warning(rounds, "median") is None
    assert outlier_warning(rounds[:2] + rounds[3:5], None) is None  # 2 flagged rounds each: below 3
    few = rounds[:3] + [{"sampled": [1], "outliers": []} for _ in range(13)]  # client 1: 3 of 16 < a fifth
    assert outlier_warning(few, None) is None
    # a client flagged in updates whose reply none of them used (AFBO's ``used`` lists another): 3 of 3
    unused = [{"used": [{"client": 0}], "clients": [0, 4], "outliers": [4]} for _ in range(3)]
    assert "client(s) 4 (3 of 3 updates)" in outlier_warning(unused, None, unit="updates")


def test_a_summary_s_outlier_fields_name_the_rule_and_the_unit():
    """outlier_fields (run D, continued): the rule in force (ZO-HFL's coef-clip counts for ZO-HFL only), and the
    warning in the engine's unit (updates on the asynchronous engine)."""
    from zofl.config import parse_config
    from zofl.core.summary import outlier_fields

    flagged = [{"sampled": [0, 1, 2], "outliers": [1]} for _ in range(4)]
    clip = parse_config({"coef-clip": 2.0})
    assert outlier_fields(flagged, clip, True) == {"robust_rule": "coef-clip = 2", "outlier_warning": None}
    plain = outlier_fields(flagged, clip, False)
    assert plain["robust_rule"] is None and "client(s) 1 (4 of 4 rounds)" in plain["outlier_warning"]
    sync = parse_config({})
    asyn = parse_config({"strategy": "fedbuff", "engine": "async"})
    zohfl = outlier_fields(flagged, sync, True)["outlier_warning"]
    assert "1 (4 of 4 rounds) lay far outside their rounds'" in zohfl
    assert 'try aggregation = "median" or coef-clip' in zohfl
    assert 'try aggregation = "median" or "trimmed-mean"' in outlier_fields(flagged, sync, False)["outlier_warning"]
    assert "1 (4 of 4 updates) lay far outside their updates'" in \
        outlier_fields(flagged, asyn, False)["outlier_warning"]


def test_pending_failures_keep_the_clients_most_failed_first_then_by_id():
    from zofl.core.protocol import Failure
    from zofl.core.summary import add_pending

    s = {"total_failures": 3, "total_late": 0, "total_errors": 3, "total_rejected": 0, "total_lost": 0,
         "failures_by_client": {"3": 1, "1": 2}}
    add_pending(s, [Failure(2, "x")] * 3 + [Failure(0, "y")])  # a client counts once per update that never came
    assert list(s["failures_by_client"].items()) == [("1", 2), ("0", 1), ("2", 1), ("3", 1)]
    assert s["total_failures"] == 7 and s["total_errors"] == 7


def test_the_printed_outliers_under_the_mean_list_eight_clients_then_dots():
    from zofl.core.summary import summary_lines

    many = {**FULL_SUMMARY, "robust_rule": None, "outlier_warning": None, "total_outlier_replies": 9,
            "outliers_by_client": {str(p): 1 for p in range(9)}, "engine": "sync"}
    line = next(x for x in summary_lines("ZO-HFL", many, "") if "far outside" in x)
    assert line == ("  replies far outside their rounds' spread: 9, by client (rounds): 0 (1), 1 (1), 2 (1), 3 (1), "
                    "4 (1), 5 (1), 6 (1), 7 (1), ...")


def test_the_printed_late_failures_and_short_lists_say_exactly_what_happened():
    """(run D, continued) late replies told apart only by the kinds counted (a kind the summary lacks is 0;
    the rest "with no reply seen", only when there is a rest), "then failed" named; eight outlier clients
    and eight failing clients listed without dots; no warning line without a warning; the final loss."""
    from zofl.core.summary import _kinds, summary_lines

    assert _kinds({"total_late": 3, "total_late_slow": 1}) == \
        "3 late (1 slow at the client, 2 with no reply seen), 0 errors, 0 rejected, 0 lost (SuperNode gone)"
    assert _kinds({"total_late": 2, "total_late_failed": 1, "total_late_queued": 1}).startswith(
        "2 late (1 queued behind other clients' work, 1 then failed), ")
    assert _kinds({"total_late": 2, "total_late_failed": 1}).startswith(
        "2 late (1 then failed, 1 with no reply seen), ")
    eight = {**FULL_SUMMARY, "final_test_loss": 1.25, "robust_rule": None, "outlier_warning": None,
             "failures_by_client": {str(p): 1 for p in range(8)}, "total_outlier_replies": 8,
             "outliers_by_client": {str(p): 1 for p in range(8)}, "engine": "sync", "status": "ok", "startup": None}
    lines = summary_lines("ZO-HFL", eight, "")
    assert lines[1] == "  test accuracy 0.1000 -> 0.5234 (best 0.6000), test loss 1.2500"
    assert lines[4] == "  clients with failures (rounds): " + ", ".join(f"{p} (1)" for p in range(8))
    assert lines[-2:] == ["  replies far outside their rounds' spread: 8, by client (rounds): "
                          + ", ".join(f"{p} (1)" for p in range(8)), "  results: /r/x"]


def test_a_summary_gives_rounds_and_the_records_they_take():
    from zofl.core.run import progress_unit

    assert progress_unit(20, 20, "communication rounds") == "20 rounds"
    assert progress_unit(20, 220, "communication rounds") == "20 rounds (220 communication rounds)"
    assert progress_unit(20, 20, "server steps", "updates") == "20 updates"
    assert progress_unit(20, 120, "server steps", "updates") == "20 rounds (120 server steps)"


def test_leave_reads_every_entry_of_its_comma_list():
    """parse_leave (run D, continued): entries are split at commas, blanks around them ignored, a client may leave
    twice; anything but three integers per entry, or a length below 1, is refused with the entry named."""
    from zofl.core.sampling import away, parse_leave

    assert parse_leave("1:2:3,, 4:0:1,1:9:1,") == {1: [(2, 5), (9, 10)], 4: [(0, 1)]}
    assert parse_leave("") == {}
    assert [v for v in range(12) if away(parse_leave("1:2:3,1:9:1"), 1, v)] == [2, 3, 4, 9]
    with pytest.raises(ValueError, match="'1:2' is not client:start:length"):
        parse_leave("0:1:1,1:2")
    with pytest.raises(ValueError, match="'0:1:0': the length must be at least 1"):
        parse_leave("0:1:0")


def test_late_replies_are_counted_by_kind_until_the_next_record_and_logged(caplog):
    """Run.note_late and late_fields (run D, continued): each late reply counts once under its kind ("queued":
    handled within the deadline; "slow": handled longer, or on the simulated clock; "failed": an error reply),
    logged with its client; the next record takes the counts and they start again from 0."""
    from zofl.core.policy import LATE_KINDS
    from zofl.core.protocol import Failure, Reply
    from zofl.core.run import Run

    run = SimpleNamespace(cfg=SimpleNamespace(round_deadline_s=1.5), late_seen=dict.fromkeys(LATE_KINDS, 0))
    quick, long = (Reply(p, {}, 1, {"handle_s": h}) for p, h in ((4, 0.2), (5, 2.0)))
    with caplog.at_level(logging.INFO, logger="zofl"):
        Run.note_late(run, [quick, long, Failure(6, "boom"), quick])
    assert run.late_seen == {"queued": 2, "slow": 1, "failed": 1}
    assert caplog.messages == ["a reply of client 4 came after its deadline: queued",
                               "a reply of client 5 came after its deadline: slow",
                               "a reply of client 6 came after its deadline: failed",
                               "a reply of client 4 came after its deadline: queued"]
    Run.note_late(run, [quick], True)  # the simulated clock: a device model's duration, "slow"
    assert Run.late_fields(run) == {"late_queued": 2, "late_slow": 2, "late_failed": 1}
    assert Run.late_fields(run) == {"late_queued": 0, "late_slow": 0, "late_failed": 0}


class _LateNodesGrid:
    """Flower's Grid's push/pull with SuperNodes {node id: (partition-id, pulls before its reply is in; math.inf:
    never)}, each saying it holds one of ``parts`` partitions: a ClientApp that takes a while to start (a loaded
    machine) answers late, but answers the question it was sent. ``pushed``: the node of every question; ``pulls``:
    the pulls made."""

    def __init__(self, nodes, parts):
        self.nodes, self.parts, self.pushed, self.sent, self.pulls = dict(nodes), parts, [], {}, 0

    def get_node_ids(self):
        return list(self.nodes)

    def push_messages(self, msgs):
        ids = []
        for msg in msgs:
            ids.append(f"q{len(self.pushed)}")
            self.pushed.append(msg.metadata.dst_node_id)
            self.sent[ids[-1]] = [msg, self.nodes[msg.metadata.dst_node_id][1]]
        return ids

    def pull_messages(self, ids):
        from flwr.app import Message, MetricRecord, RecordDict

        from zofl.core.protocol import METRICS, NUM_PARTITIONS, PARTITION_ID

        self.pulls += 1
        out = []
        for mid in ids:
            msg, wait = self.sent[mid]
            self.sent[mid][1] -= 1
            if wait <= 0:
                node = msg.metadata.dst_node_id
                reply = Message(RecordDict({METRICS: MetricRecord({PARTITION_ID: self.nodes[node][0],
                                                                   NUM_PARTITIONS: self.parts})}), reply_to=msg)
                reply.metadata.__dict__["_reply_to_message_id"] = mid
                reply.metadata.__dict__["_src_node_id"] = node
                out.append(reply)
        return out


def test_a_whole_smaller_federation_is_refused_once_its_nodes_answer_however_late(monkeypatch, as_the_serverapp):
    """Issue 47: on a loaded machine the 2 SuperNodes of Flower's default federation answered the question
    "are you the whole federation?" after its 10 s, it was never asked again, and the run waited the whole
    client-wait-s (60 s) to fail with a message saying no SuperNode answered. Then (CI at load 12+) a question
    asked again every 10 s never got its answer: each node's ClientApp took longer than that to start, and each
    answer was thrown away. Now each node is asked once, its reply awaited however late, and the federation refused
    at the first answers; a node that never answers ends the wait at client-wait-s, not later."""
    import math
    import time

    from zofl.config import ConfigError
    from zofl.strategies import nodes

    monkeypatch.setattr(nodes.time, "sleep", lambda s: None)
    monkeypatch.setattr("zofl.strategies.deadline.time.sleep", lambda s: None)
    grid = _LateNodesGrid({11: (0, 300), 22: (1, 300)}, parts=2)
    with pytest.raises(ConfigError) as e:
        nodes.wait_for_nodes(grid, 10, wait_s=600.0)
    assert (grid.pushed, grid.pulls) == ([11, 22], 301) and str(e.value).startswith(
        "run-config num-clients=10 but the federation has 2 SuperNodes: run `flwr run . --stream "
        "--federation-config \"num-supernodes=10\"`")
    deployed = _LateNodesGrid({11: (0, 0), 22: (1, 0)}, parts=10)  # SuperNodes of a 10-client deployment: wait on
    t0 = time.monotonic()
    assert nodes.wait_for_nodes(deployed, 10, wait_s=0.3) == [11, 22] and deployed.pushed == [11, 22]
    silent = _LateNodesGrid({11: (0, math.inf)}, parts=1)
    assert nodes.wait_for_nodes(silent, 10, wait_s=0.3) == [11] and silent.pushed == [11]
    assert time.monotonic() - t0 < 30
    shared = str(nodes.smaller_federation(10, 3, need=4))  # 10 clients on 4 shared nodes: two fixes named
    assert shared.startswith("run-config num-clients=10 (on 4 SuperNodes, clients-per-node) but the federation has 3 "
                             "SuperNodes")
    assert shared.endswith("or set clients-per-node so that they are num-supernodes")


def test_a_supernode_whose_answer_is_late_is_asked_once_and_takes_its_partition_when_the_answer_comes(
        monkeypatch, as_the_serverapp):
    """learn_partitions and Federation.refresh ask each node once and keep its question: node 33 (partition 2)
    connects between rounds and its ClientApp answers after the refresh's timeout; the next refresh takes the
    answer (partition 2 held), and no node is ever asked twice (a second question would queue a second ClientApp
    behind the first on a loaded machine, and the first answer would be lost)."""
    from zofl.strategies import nodes

    monkeypatch.setattr("zofl.strategies.deadline.time.sleep", lambda s: None)
    grid = _LateNodesGrid({11: (0, 0), 22: (1, 3)}, parts=3)  # node 22 answers at its question's 4th pull
    fed = nodes.learn_partitions(grid, 3, wait_s=0.0)
    assert fed.nodes == {0: 11, 1: 22} and fed.unheld == [2] and grid.pushed == [11, 22]
    grid.nodes[33] = (2, 5)
    assert not fed.refresh(grid, 3, timeout=0.0) and fed.nodes == {0: 11, 1: 22} and grid.pushed == [11, 22, 33]
    for _ in range(4):
        fed.refresh(grid, 3, timeout=0.0)
    assert fed.nodes == {0: 11, 1: 22} and grid.pushed == [11, 22, 33]  # 5 pulls: not in yet
    assert fed.refresh(grid, 3, timeout=0.0) and fed.nodes == {0: 11, 1: 22, 2: 33} and grid.pushed == [11, 22, 33]
    assert fed.rejoined == [(33, 2, -1)]


def test_the_magnitude_rule_judges_float_arrays_only_and_overflows_silently():
    """A non-float array has no magnitude (its dtype is judged by array_problem); the squared norm's overflow is
    the rule's own finding, said once in its message, not a numpy RuntimeWarning besides."""
    import warnings

    from zofl.core.checkpoint import magnitude_problem

    assert magnitude_problem(np.array(["a", "b"])) is None and magnitude_problem(np.zeros(0)) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "overflows float64" in magnitude_problem(np.full(4, 1e300))
        assert magnitude_problem(np.full(4, 1e150)) is None
