"""Defining behaviours of three methods pinned by tests of their own (issue 52), not only by the frozen
reference figures (tests/reference/*.json):

* SCAFFOLD's correction direction: the client's local step uses c - c_i (methods/scaffold.py);
* FedRZO_bl's oracle warm start: every lower-level oracle call starts from the last y_base (the oracle's
  answer at x^_r), not from y_plus (its answer at x^_r + v) (methods/fedrzo_bl.py, ``begin``);
* AFBO's recorded versions and delays: each used update carries the version its task was sent on (its
  staleness), and its delay counts the steps of its kind from there (methods/afbo.py, ``receive``).

Each was checked against the planted bug its docstring names: the test fails with it."""
import numpy as np

from zofl.config import parse_config
from zofl.core.protocol import Work
from zofl.inprocess import run_inprocess
from zofl.results import read_rounds
from zofl.tasks import DataSpec
from zofl.tasks.data import ArrayData

# -- SCAFFOLD ------------------------------------------------------------------------------------------


class _TwoQuadratics:
    """A stand-in task: client i's loss is f_i(y) = (h_i / 2) ||y - a_i||^2 (every row of its data holds
    a_i and h_i as features, so every minibatch gives the same gradient: the steps are deterministic)."""

    A = (np.array([1.0, -2.0]), np.array([3.0, 4.0]))
    Hs = (1.0, 3.0)

    def client_data(self, spec, pid):
        row = np.append(self.A[pid], self.Hs[pid])
        return ArrayData(np.tile(row, (8, 1)), np.zeros(8, np.int64), 1)

    def grad(self, params, x, y):
        return x[:, 2].mean() * (params - x[:, :2].mean(axis=0))

    def client_grad(self, pid, p):
        return self.Hs[pid] * (p - self.A[pid])

    def global_grad(self, p):
        return np.mean([self.client_grad(i, p) for i in range(2)], axis=0)

    def minimiser(self):
        return sum(h * a for h, a in zip(self.Hs, self.A)) / sum(self.Hs)


def test_scaffold_correction_turns_each_clients_steps_into_global_gradient_steps():
    """SCAFFOLD's client step is y <- y - lr (grad f_i(y) - c_i + c): with the exact controls (c_i =
    grad f_i(x), c = their mean = grad f(x)) the global minimiser is a fixed point of every client's local
    steps, and from any other x each client's move points along -grad f(x), although the uncorrected
    steps drift to the client's own minimiser a_i. Catches the correction's sign flipped in
    methods/scaffold.py (``correction=c_i - c`` instead of ``c - c_i``)."""
    from zofl.methods import scaffold

    task = _TwoQuadratics()
    cfg = parse_config({"strategy": "scaffold", "local-lr": 0.1, "local-lr-schedule": "constant"})
    spec = DataSpec(num_clients=2)

    def local(pid, x, c_i=None, H=10):
        c = task.global_grad(x) if c_i is not None else np.zeros(2)
        state = {} if c_i is None else {"c_i": c_i.copy()}  # no c_i: a new client, c_i = 0 (and c = 0)
        return scaffold.client_work(cfg, task, spec, Work(pid, 0, H, {"x": x, "c": c}), state)

    x_star = task.minimiser()
    np.testing.assert_allclose(task.global_grad(x_star), 0.0, atol=1e-12)
    for pid in range(2):
        c_i = task.client_grad(pid, x_star)
        assert np.linalg.norm(c_i) > 1.0  # the clients disagree at x*: without the controls they drift
        plain = local(pid, x_star)
        assert np.linalg.norm(plain.arrays["dy"]) > 1.0
        assert np.linalg.norm(x_star + plain.arrays["dy"] - task.A[pid]) < 0.5 * np.linalg.norm(x_star - task.A[pid])
        # with the exact controls: no move, and the control learns nothing new
        rep = local(pid, x_star, c_i)
        np.testing.assert_allclose(rep.arrays["dy"], 0.0, atol=1e-12)
        np.testing.assert_allclose(rep.arrays["dc"], 0.0, atol=1e-12)
    # away from x*: every client moves along the global descent direction -grad f(x) (h_i is a scalar)
    x = np.array([-1.0, 0.5])
    g = task.global_grad(x)
    for pid in range(2):
        dy = local(pid, x, task.client_grad(pid, x), H=2).arrays["dy"]
        cos = float(dy @ -g) / (np.linalg.norm(dy) * np.linalg.norm(g))
        assert cos > 1 - 1e-12, (pid, dy, g)


# -- FedRZO_bl -----------------------------------------------------------------------------------------


def test_fedrzo_bl_oracle_calls_start_from_the_last_y_base(tmp_path, monkeypatch):
    """FedRZO_bl's oracle (R~_r lower-level FedAvg rounds at x^_r + v, giving y_plus, then R~_r rounds at
    x^_r, giving y_base) is warm-started (``lower-warm-start``, the default): the first lower round of both
    calls of upper round r starts from the y_base that the upper round r - 1 used, i.e. the last
    y_eps(x^_{r-1}), never from y_plus (an answer at a perturbed point). Spied on the real client code of
    an in-process run. Catches ``begin`` warm-starting from ``state["y_plus"]`` instead of
    ``state["y_base"]`` (methods/fedrzo_bl.py)."""
    from zofl import methods
    from zofl.algorithms.fedrzo_bl import LOWER_BASE, LOWER_PLUS, UPPER
    from zofl.methods import MethodEntry, fedrzo_bl

    sent = {}  # (upper round, phase, lower round) -> the arrays client 0 was sent

    def spy(cfg, task, spec, work, state):
        if work.pid == 0:
            c = work.config
            sent[int(c["upper_round"]), c["phase"], int(c.get("lower_round", 0))] = \
                {k: np.array(v, copy=True) for k, v in work.arrays.items()}
        return fedrzo_bl.client_work(cfg, task, spec, work, state)

    monkeypatch.setitem(methods.METHODS, "fedrzo-bl", MethodEntry(fedrzo_bl.FedRZObl, spy))
    R = 4
    run_inprocess({"strategy": "fedrzo-bl", "task": "zofl.tasks.toy:QuadraticBilevel", "num-clients": 3,
                   "beta": 1.0, "num-rounds": R, "local-steps": 2, "zo-lr": 0.01, "eta": 0.5, "lower-lr": 0.3,
                   "lower-rounds": 2, "lower-rounds-growth": 0.0, "checkpoint-every": 0,
                   "output-dir": str(tmp_path), "run-name": "warm"}, workers=0)
    assert {(r, UPPER, 0) for r in range(R)} <= set(sent)
    for r in range(1, R):
        y_base, y_plus = sent[r - 1, UPPER, 0]["y_base"], sent[r - 1, UPPER, 0]["y_plus"]
        assert np.linalg.norm(y_plus - y_base) > 1e-3  # the two differ, so the check below tells them apart
        for phase in (LOWER_PLUS, LOWER_BASE):
            np.testing.assert_array_equal(sent[r, phase, 0]["y"], y_base, err_msg=f"upper round {r}, {phase}")
        # and the perturbed call runs at x^_r + v, the base call at x^_r (the y's above are for these points)
        up = sent[r, UPPER, 0]
        np.testing.assert_allclose(sent[r, LOWER_PLUS, 0]["point"], up["x"] + up["v"])
        np.testing.assert_array_equal(sent[r, LOWER_BASE, 0]["point"], up["x"])


# -- AFBO ----------------------------------------------------------------------------------------------


def test_afbo_records_each_used_update_with_the_version_it_was_computed_on(tmp_path, monkeypatch):
    """AFBO's records: each step's ``used`` entries {client, kind, version, delay} name the model version
    the client's task was sent on (the reply's staleness kept), and delay = (steps of that kind before the
    step's version) - (steps of that kind before that version) -- rho_i for G_i on inner steps, tau_i for
    H_i on outer steps -- and it is also the client's entry of the record's rho / tau. With devices of
    different speeds some replies are stale, so some delays are > 0. Catches the version taken from the
    current state at arrival (staleness dropped) in ``AFBO.receive`` (methods/afbo.py): the model is
    unchanged, but every delay becomes 0 and the versions are not those the tasks were sent on."""
    from zofl.methods.afbo import AFBO, INNER

    K = 2  # inner-rounds: version v is inner step (v // 3) * 2 + min(v % 3, 2), outer round v // 3
    sent = set()  # (client, kind, version) of every task the server sent
    plan_task = AFBO.plan_task

    def spy(self, state, version, task, pid):
        work = plan_task(self, state, version, task, pid)
        assert version == self.version_of(state)
        sent.add((pid, work.config["phase"], version))
        return work

    monkeypatch.setattr(AFBO, "plan_task", spy)
    d, x = run_inprocess({"strategy": "afbo", "engine": "async", "task": "zofl.tasks.hypergrad:QuadraticHypergrad",
                          "num-clients": 4, "local-steps": 1, "lower-lr": 0.2, "inner-lr": 0.3, "inner-rounds": K,
                          "outer-lr": 0.3, "lipschitz-g": 2.6, "neumann-steps": "1", "aphe": "sum",
                          "buffer-size": 2, "num-rounds": 24, "speed-profile": "slow", "slow-clients": "0",
                          "speed-param": 0.3, "checkpoint-every": 0, "output-dir": str(tmp_path), "run-name": "a"},
                         workers=0)
    assert np.isfinite(x).all()

    def steps_before(kind, v):  # inner steps (counted through the outer rounds) or outer steps before version v
        return (v // (K + 1)) * K + min(v % (K + 1), K) if kind == INNER else v // (K + 1)

    rec = read_rounds(d)[1:]
    delays, held = [], set()
    for r in rec:
        now = r["round"] - 1  # the version the step starts from
        accepted = {(c, now - s) for c, s in zip(r["clients"], r["staleness"])}  # the engine's staleness
        for u in r["used"]:
            c, kind, v = u["client"], u["kind"], u["version"]
            assert kind == r["step"] and (c, kind, v) in sent, (r["round"], u)
            assert (c, v) in accepted or (c, kind, v) in held, (r["round"], u)  # the reply's own version
            assert u["delay"] == steps_before(kind, now) - steps_before(kind, v), (r["round"], u)
            assert u["delay"] == r["rho" if kind == INNER else "tau"][c], (r["round"], u)
            delays.append(u["delay"])
        held |= {(h["client"], h["kind"], h["version"]) for h in r["held"]}
    assert len(delays) >= 2 * len(rec) and max(delays) > 0 and delays.count(0) > len(delays) // 2, delays
