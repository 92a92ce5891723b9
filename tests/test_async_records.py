"""Issue 31: what each asynchronous step used (AFBO's inner / outer updates with their own delays rho_i
and tau_i, replies held for a later step), the simulated clock's communication and stragglers (the
asynchronous engine and FedNest's synchronous rounds), and clients that leave and come back. All on
the in-process Grid, with workers = 0 but for the wall clock's slow device (a process of its own)."""
import numpy as np
import pytest

from zofl.config import ConfigError, parse_config
from zofl.core.sampling import away, parse_leave, round_available
from zofl.faults import task_delays
from zofl.inprocess import run_inprocess
from zofl.results import read_rounds

TOY = "zofl.tasks.hypergrad:QuadraticHypergrad"
AFBO = {"strategy": "afbo", "engine": "async", "task": TOY, "num-clients": 4, "local-steps": 1, "lower-lr": 0.2,
        "inner-lr": 0.3, "inner-rounds": 2, "outer-lr": 0.3, "lipschitz-g": 2.6, "neumann-steps": "1", "aphe": "sum",
        "buffer-size": 2, "checkpoint-every": 0}
FEDBUFF = {"strategy": "fedbuff", "engine": "async", "num-clients": 4, "local-steps": 2, "num-rounds": 12,
           "buffer-size": 2, "checkpoint-every": 0}
FEDNEST = {"strategy": "fednest", "task": TOY, "num-clients": 4, "local-steps": 2, "lower-lr": 0.2, "inner-rounds": 2,
           "outer-lr": 0.3, "lipschitz-g": 2.6, "neumann-steps": "2", "beta": 1.0, "num-rounds": 2,
           "checkpoint-every": 0}


def U(client, kind, version, delay):
    return {"client": client, "kind": kind, "version": version, "delay": delay}


def H(client, kind, version):
    return {"client": client, "kind": kind, "version": version}


def test_afbo_records_list_the_updates_each_step_used_with_their_own_delays(tmp_path):
    # Client 0 is 4x slower (speed 0.25), client 1 never answers, clients 2 and 3 are normal. With
    # sim-step-s = 1/8 a normal inner task (E = 1) takes 1 unit u = 0.125 s and an outer one (N + 3 = 4
    # products) 4 u; client 0's take 4 u and 16 u. K = 2 inner steps per outer round, buffer 2, so a
    # version v is inner step (v // 3) * 2 + v % 3 (v % 3 < 2) or the outer step of round v // 3.
    #   1 u, 2 u: inner steps (v 0->1, 1->2) from clients 2 and 3; client 1's first task is given up.
    #   4 u: client 0's G, computed on v 0, arrives in the outer phase: held; it gets an outer task (v 2).
    #   6 u: the outer step (v 2->3) with clients 2, 3; 7 u: the next inner step uses client 0's G: made
    #   on inner step 0, used at inner step 2: rho = 2.
    #   20 u: client 0's H (on v 2, outer round 0) arrives in an inner phase (v 10): held; 24 u: the outer
    #   step of round 3 uses it: tau = 3, with client 0's new G (on v 10) held in its turn.
    d, x = run_inprocess({**AFBO, "num-rounds": 12, "sim-step-s": 0.125, "speed-profile": "slow", "slow-clients": "0",
                          "speed-param": 0.25, "reply-timeout-s": 0.5, "output-dir": str(tmp_path), "run-name": "r"},
                         workers=0, silent=frozenset({1}))
    rec = read_rounds(d)[1:]
    assert np.isfinite(x).all()
    fast = {1: (0, "inner"), 2: (1, "inner"), 3: (2, "outer"), 4: (3, "inner"), 5: (4, "inner"), 6: (5, "outer"),
            7: (6, "inner"), 8: (7, "inner"), 9: (8, "outer"), 10: (9, "inner"), 11: (10, "inner"), 12: (11, "outer")}
    for r in rec:
        v, kind = fast[r["round"]]
        assert r["step"] == kind and r["clock_s"] == {1: 1, 2: 2, 3: 6, 4: 7, 5: 8, 6: 12, 7: 13, 8: 14, 9: 18,
                                                      10: 19, 11: 20, 12: 24}[r["round"]] * 0.125
        extra = {4: [U(0, "inner", 0, 2)], 12: [U(0, "outer", 2, 3)]}.get(r["round"], [])
        assert r["used"] == sorted(extra + [U(2, kind, v, 0), U(3, kind, v, 0)], key=lambda u: u["client"]), r
        assert r["held"] == {3: [H(0, "inner", 0)], 11: [H(0, "outer", 2)], 12: [H(0, "inner", 10)]}.get(r["round"], [])
    # the engine's fields keep their meaning: every reply accepted since the last step, in arrival order,
    # with its staleness in versions of either kind (the held ones included)
    by = {r["round"]: r for r in rec}
    assert (by[3]["clients"], by[3]["staleness"]) == ([0, 2, 3], [2, 0, 0])
    assert (by[11]["clients"], by[11]["staleness"]) == ([0, 2, 3], [8, 0, 0])
    assert (by[12]["clients"], by[12]["staleness"]) == ([0, 3, 2], [1, 0, 0])
    # rho / tau per client: the delay of its stored update at the last step of that kind. Client 1 never
    # sent: the steps of the kind so far + 1; client 0's G from v 0 (inner step 0) and then its H from round 0
    rho = {1: [1, 1, 0, 0], 2: [2, 2, 0, 0], 3: [2, 2, 0, 0], 4: [2, 3, 0, 0], 5: [3, 4, 0, 0], 6: [3, 4, 0, 0],
           7: [4, 5, 0, 0], 8: [5, 6, 0, 0], 9: [5, 6, 0, 0], 10: [6, 7, 0, 0], 11: [7, 8, 0, 0], 12: [7, 8, 0, 0]}
    tau = {1: [0] * 4, 2: [0] * 4, 3: [1, 1, 0, 0], 4: [1, 1, 0, 0], 5: [1, 1, 0, 0], 6: [2, 2, 0, 0],
           7: [2, 2, 0, 0], 8: [2, 2, 0, 0], 9: [3, 3, 0, 0], 10: [3, 3, 0, 0], 11: [3, 3, 0, 0], 12: [3, 4, 0, 0]}
    assert {r["round"]: r["rho"] for r in rec} == rho and {r["round"]: r["tau"] for r in rec} == tau
    assert [r["inner_delay_mean"] for r in rec] == [float(np.mean(rho[k])) for k in sorted(rho)]
    assert sum(r["failures"] for r in rec) == 1 and all(1 not in r["clients"] for r in rec)


def test_fedbuff_records_gain_the_used_list_and_nothing_else_changes(tmp_path):
    d, _ = run_inprocess({**FEDBUFF, "speed-profile": "uniform", "speed-param": 0.3, "output-dir": str(tmp_path),
                          "run-name": "b"}, workers=0)
    rec = read_rounds(d)[1:]
    for r in rec:
        assert r["used"] == [U(p, "update", r["round"] - 1 - s, s) for p, s in zip(r["clients"], r["staleness"])]
        assert "away" not in r and "held" not in r


def test_task_delays_are_seeded_exponential_per_direction_and_stragglers_five_times_slower():
    assert task_delays(0, 3, 1, 0.0, 1.0) == (0.0, 0.0, 1.0)  # the defaults draw nothing
    assert task_delays(0, 3, 1, 0.5) == task_delays(0, 3, 1, 0.5)  # a pure function of (seed, task, client)
    down, up, mult = task_delays(0, 3, 1, 0.5)
    assert down != up and mult == 1.0 and (down, up) != task_delays(0, 4, 1, 0.5)[:2] != task_delays(0, 3, 2, 0.5)[:2]
    n, comm, compute = 4000, 0.2, 0.3
    normal = np.array([task_delays(7, t, 2, comm) for t in range(n)])
    slow = np.array([task_delays(7, t, 2, comm, 5.0) for t in range(n)])
    assert abs(normal[:, :2].mean() / comm - 1) < 0.05  # mean comm-s per direction
    assert np.std(normal[:, 0]) / comm == pytest.approx(1, abs=0.08)  # exponential: sd = mean
    total_normal = normal[:, 0] + normal[:, 1] + compute * normal[:, 2]
    total_slow = slow[:, 0] + slow[:, 1] + compute * slow[:, 2]
    assert total_slow.mean() / total_normal.mean() == pytest.approx(5, rel=0.05)
    assert slow[:, 2].min() >= 1 and np.std(slow[:, 2]) > 1  # never faster than itself, drawn per task


def test_the_asynchronous_clock_charges_download_and_upload(tmp_path):
    base = {**FEDBUFF, "buffer-size": 1, "num-rounds": 6, "output-dir": str(tmp_path)}
    d0, _ = run_inprocess({**base, "run-name": "free"}, workers=0)
    assert read_rounds(d0)[1]["clock_s"] == 4 * 0.01  # 2 E_i = 4 steps of sim-step-s: unchanged
    cfg = {**base, "comm-s": 0.05, "straggler-factor": 5.0, "slow-clients": "0", "latency-s": 0.001}
    d, _ = run_inprocess({**cfg, "run-name": "comm"}, workers=0)
    rec = read_rounds(d)[1:]

    def due(n, pid):
        down, up, mult = task_delays(0, n, pid, 0.05, 5.0 if pid == 0 else 1.0)
        return 4 * 0.01 / 1.0 * mult + down + up + 0.001

    first = min(range(4), key=lambda p: due(p, p))  # tasks 0..3 go to clients 0..3 at time 0
    assert rec[0]["clients"] == [first] and rec[0]["clock_s"] == due(first, first)
    d2, _ = run_inprocess({**cfg, "run-name": "again"}, workers=0)
    assert [r["clock_s"] for r in read_rounds(d2)[1:]] == [r["clock_s"] for r in rec]


def test_fednest_rounds_are_charged_their_slowest_client_and_skip_unavailable_clients(tmp_path):
    d0, _ = run_inprocess({**FEDNEST, "output-dir": str(tmp_path), "run-name": "free"}, workers=0)
    rec0 = read_rounds(d0)
    assert all(r["sampled"] == [0, 1, 2, 3] for r in rec0[1:])  # availability 1: everyone, as before
    cfg = {**FEDNEST, "comm-s": 0.02, "straggler-factor": 5.0, "slow-clients": "1", "availability": "1,0.5",
           "leave": "2:1:2", "output-dir": str(tmp_path), "run-name": "comm"}
    d, _ = run_inprocess(cfg, workers=0)
    rec = read_rounds(d)
    assert len(rec) == 1 + 2 * (2 + 2 + 1)  # 1 + N + 2 = 5 communication rounds per outer round, all charged
    leave = parse_leave("2:1:2")
    for prev, r in zip(rec, rec[1:]):
        k = r["round"] - 1
        assert r["sampled"] == round_available(0, k, [0, 1, 2, 3], "1,0.5", leave)
        assert r["failures"] == 0 and r["participants"] == len(r["sampled"])
        assert (2 in r["sampled"]) == (not away(leave, 2, k))
        steps = r["H"]  # E local steps in the inner rounds, one product in the others
        want = max(steps * 0.01 * mult + down + up for p in r["sampled"]
                   for down, up, mult in [task_delays(0, k, p, 0.02, 5.0 if p == 1 else 1.0)])
        assert r["clock_s"] - prev.get("clock_s", 0.0) == pytest.approx(want, rel=1e-12)
    assert any(len(r["sampled"]) < 4 for r in rec[1:] if r["round"] > 3)  # availability < 1 was exercised


def test_a_client_that_leaves_gets_no_task_until_it_returns(tmp_path):
    # client 1 leaves at version 2 for 4 versions: no task on versions 2-5, one as version 6 is made
    d, x = run_inprocess({**FEDBUFF, "num-rounds": 14, "leave": "1:2:4", "output-dir": str(tmp_path),
                          "run-name": "leave"}, workers=0)
    rec = read_rounds(d)[1:]
    versions = [u["version"] for r in rec for u in r["used"] if u["client"] == 1]
    assert versions and not any(2 <= v < 6 for v in versions) and 6 in versions, versions
    assert any(r["away"] == [1] for r in rec) and all(r["away"] == [] for r in rec if r["round"] >= 6)
    assert np.isfinite(x).all()


def test_resume_with_a_client_on_leave_gives_the_uninterrupted_run(tmp_path):
    cfg = {**FEDBUFF, "speed-profile": "uniform", "speed-param": 0.3, "checkpoint-every": 1, "leave": "1:2:5",
           "comm-s": 0.01, "straggler-factor": 3.0, "slow-clients": "2"}
    d_ref, x_ref = run_inprocess({**cfg, "output-dir": str(tmp_path), "run-name": "ref"}, workers=0)
    run_inprocess({**cfg, "num-rounds": 4, "output-dir": str(tmp_path), "run-name": "cut"}, workers=0)
    d, x = run_inprocess({**cfg, "resume": True, "output-dir": str(tmp_path), "run-name": "cut"}, workers=0)
    np.testing.assert_array_equal(x, x_ref)
    keys = ("round", "clients", "staleness", "clock_s", "used", "away")
    assert [[r.get(k) for k in keys] for r in read_rounds(d)] == [[r.get(k) for k in keys] for r in read_rounds(d_ref)]


@pytest.mark.parametrize("key,value,match", [
    ("leave", "1:2", "client:start:length"),
    ("leave", "1:2:0", "client:start:length"),
    ("leave", "a:1:1", "client:start:length"),
    ("leave", "9:1:1", r"names clients \[9\]"),
    ("straggler-factor", 0.5, ">= 1"),
    ("comm-s", -1.0, ">= 0"),
])
def test_the_new_keys_are_checked(key, value, match):
    with pytest.raises(ConfigError, match=match):
        parse_config({"num-clients": 4, key: value})


@pytest.mark.parametrize("engine", ["sync", "legacy"])
def test_every_synchronous_method_contacts_only_the_available_clients(tmp_path, engine):
    """``SyncRun.plan`` narrows S_r to the clients available in the round and not on leave, for every
    synchronous method and engine (ZO-HFL here); with the defaults it is S_r, bit for bit as before."""
    from zofl.core.sampling import sample_round

    base = {"num-rounds": 6, "num-clients": 5, "beta": 0.8, "tau": 2.0, "engine": engine, "output-dir": str(tmp_path)}
    d, _ = run_inprocess({**base, "availability": "0.5,1", "leave": "1:2:2", "run-name": "anarchic"}, workers=0)
    rec = read_rounds(d)[1:]
    leave = parse_leave("1:2:2")
    for r in rec:
        k = r["round"] - 1
        s_r = sample_round(0, k, 5, 0.8, 0.0)[0]
        assert r["sampled"] == round_available(0, k, s_r, "0.5,1", leave)
        assert r["failures"] == 0 and r["participants"] == len(r["sampled"])
    assert sum(len(sample_round(0, r["round"] - 1, 5, 0.8, 0.0)[0]) - len(r["sampled"]) for r in rec) >= 2
    d0, _ = run_inprocess({**base, "run-name": "plain"}, workers=0)
    assert all(r["sampled"] == sample_round(0, r["round"] - 1, 5, 0.8, 0.0)[0] for r in read_rounds(d0)[1:])


def test_fednest_takes_the_first_of_several_neumann_steps(tmp_path):
    """``neumann-steps`` "3,5" (AFBO's per-client N_i): FedNest uses N = 3, so an outer round is
    inner-rounds + N + 1 = 7 communication rounds."""
    cfg = {**FEDNEST, "neumann-steps": "3,5", "inner-rounds": 3, "num-rounds": 1, "output-dir": str(tmp_path),
           "run-name": "n"}
    d, _ = run_inprocess(cfg, workers=0)
    assert len(read_rounds(d)) == 1 + (3 + 3 + 1)


def test_the_wall_clock_does_not_wait_for_a_slow_device_with_clients_in_processes_of_their_own(tmp_path):
    # Client 0's device is 10x slower: its task (2 x 2 local steps of 0.05 s at speed 0.1) takes 2 s of
    # real sleep in its worker process, a fast client's about 0.2 s. With K = 1 the fast clients' updates
    # are applied while it works (18 in those 2 s on an idle machine, at most 20; 3 are asked for, and 40
    # updates are made: more load only means fewer before it), and its own comes late, with the staleness
    # it has. (Through Flower's Ray backend the asynchronous engine runs in tests/test_flower_e2e.py.)
    cfg = {**FEDBUFF, "clock": "wall", "buffer-size": 1, "num-rounds": 40, "num-clients": 3,
           "speed-profile": "slow", "slow-clients": "0", "speed-param": 0.1, "step-time-s": 0.05,
           "output-dir": str(tmp_path), "run-name": "wall"}
    d, x = run_inprocess(cfg, workers=3)
    rec = read_rounds(d)[1:]
    slow = [i for i, r in enumerate(rec) if 0 in r["clients"]]
    assert slow and slow[0] >= 3, [r["clients"] for r in rec]
    assert rec[slow[0]]["staleness"] == [slow[0]]  # computed on version 0, applied after slow[0] updates
    assert np.isfinite(x).all()
