"""``SyncRun``: a synchronous run as a sequence of rounds, shared by every synchronous engine.

    run = SyncRun(cfg, method, writer)            # x_0 (round 0 record) or the resumed state
    for r in run.pending_rounds():
        plan = run.plan(r)                         # S_r, stragglers, each sampled client's Work
        ... an engine delivers plan.works and collects Replies / Failures ...
        run.complete(plan, replies, failures)      # checks, update, record, checkpoint, summary
        run.complete_evaluation(answers, refused)  # with federated-eval, when due: the record, after the clients'

Engines differ only in how work reaches clients (Flower's Message API, its legacy API, or a
process pool); this object does everything else, so every engine gives the same numbers. What it
shares with the asynchronous run (state, resume, records, checkpoints, summary) is ``zofl.core.run.Run``.
"""
from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from ..algorithms.outliers import far_replies
from .checks import finite_or_kept, reply_problem
from .evaluation import EvalAnswer
from .method import Method, RoundPlan  # noqa: F401  (RoundPlan: the engines import it from here)
from .policy import round_failed
from .protocol import Failure, Reply
from .record import failure_fields, reply_fields
from .run import Run, progress_unit
from .sampling import round_available, sample_round

log = logging.getLogger("zofl")


class SyncRun(Run):
    """One run of a synchronous method: rounds (see the module docstring)."""

    def __init__(self, cfg, method: Method, writer):
        super().__init__(cfg, method, writer)
        # simulated device time (``round_sim_s``); on resume the clock at the checkpoint
        self.sim_clock = float(self.resumed_extra.get("sim_clock", 0.0))
        self.deferred: tuple[int, dict[str, Any]] | None = None  # (k, info) of a round waiting for its evaluation

    def round_of(self, server_round: int) -> int:
        """The papers' 0-based round index r of Flower's 1-based ``server_round`` (after a resume, counted on
        from the checkpoint's round)."""
        return self.offset + server_round - 1

    def pending_rounds(self) -> range:
        return range(self.offset, self.total)

    def plan(self, r: int) -> RoundPlan:
        cfg = self.cfg
        t0 = time.perf_counter()
        sampled, stragglers = ([], []) if self.method.server_only else \
            sample_round(cfg.seed, r, cfg.num_clients, cfg.beta, cfg.straggler_prob)
        # anarchic clients (ours, issue 31): of S_r, only those available in round r (``availability`` p_i,
        # the asynchronous engine's draw with the round for the task number) and not on ``leave`` are
        # contacted; the others get no work and count as no failure. availability "1", no leave: all of S_r.
        there = round_available(cfg.seed, r, sampled, cfg.availability, self.leave)
        if len(there) < len(sampled):
            sampled, stragglers = there, [p for p in stragglers if p in there]
        works = [self.stamp(w) for w in self.method.plan(self.state, r, sampled, stragglers)]
        unreachable = [w.pid for w in works if w.pid in self.unheld]
        works = [w for w in works if w.pid not in self.unheld]
        return RoundPlan(r, sampled, stragglers, works, self.method.round_H(self.state, r), t0,
                         unreachable=unreachable)

    def check(self, plan: RoundPlan, replies: list[Reply],
              failures: list[Failure]) -> tuple[list[Reply], list[Failure]]:
        """The usable replies (one per sampled client, checked, sorted by client id) and all failures."""
        shapes = self.method.reply_shapes(self.state, plan.r)
        good: dict[int, Reply] = {}
        failures = list(failures) + [Failure(p, f"no connected SuperNode holds partition {p}", "lost")
                                     for p in plan.unreachable]
        k = plan.r + 1
        for rep in replies:
            if rep.pid not in plan.sampled or rep.pid in good:
                log.warning("round %d: ignored a reply from client %d (not sampled, or a second reply)", k, rep.pid)
                continue
            problem = reply_problem(rep.arrays, shapes, self.cfg.reply_max_abs, rep.num_examples)
            if problem:
                log.warning("round %d: dropped client %d: %s", k, rep.pid, problem)
                failures.append(Failure(rep.pid, problem, "rejected"))
                continue
            good[rep.pid] = rep
        for f in failures:  # a failure of no sampled client (an unknown node) names nobody
            if f.pid is not None and f.pid not in plan.sampled:
                f.pid = None
        # a sampled client with neither reply nor failure missed the deadline (the Message API returns
        # nothing for it); a failure that names no client (an exception of a legacy ClientProxy other than
        # zofl's ``ClientOnNode``, which names its client) is one of those
        accounted = {rep.pid for rep in replies} | {f.pid for f in failures if f.pid is not None}
        missing = [p for p in plan.sampled if p not in accounted]
        anonymous = [f for f in failures if f.pid is None]
        if len(anonymous) == len(missing):  # the failures that name no client are these clients
            for f, p in zip(anonymous, missing):  # (which error was whose is unknown; who failed is exact)
                f.pid = p
        failures += [Failure(p, "no reply before the round deadline", "late") for p in missing[len(anonymous):]]
        for f in failures:
            if not f.rejected:
                log.warning("round %d: client %s failed or missed the deadline: %s", k, f.pid, f.reason)
        if not good and plan.sampled:
            log.warning("round %d: no usable client reply (%d sampled, %d failed)", k, len(plan.sampled),
                        len(failures))
        return [good[p] for p in sorted(good)], failures

    def complete(self, plan: RoundPlan, replies: list[Reply], failures: list[Failure],
                 aggregate=None) -> dict[str, Any]:
        """Apply round ``plan.r``: check the replies, update the state, write the record.

        ``aggregate(state, plan, used_replies) -> (state, fields)`` replaces the method's ``update``
        (the cross-check with Flower's own FedAvg aggregation)."""
        used, failures = self.check(plan, replies, failures)
        outliers = self.outliers(plan, used)  # before the update: the replies as the clients sent them
        failed = not self.method.server_only and round_failed(len(used), self.cfg.min_replies)
        if failed:
            self.failed_rounds += 1
            log.warning("round %d failed: %d usable replies, fewer than min-replies = %d (%d failed round(s) of "
                        "%d allowed)", plan.r + 1, len(used), self.cfg.min_replies, self.failed_rounds,
                        self.allowed_failed)
        state, fields = (aggregate or self.method.update)(self.state, plan, used)  # the plan: who was asked what
        self.state, fields = finite_or_kept(state, fields, self.state, f"round {plan.r + 1}")
        self.sim_clock += self.round_sim_s(used, plan.r)
        info = {
            "sampled": plan.sampled, "stragglers": len(plan.stragglers), "participants": len(used),
            **failure_fields(failures, self.late_fields()), "dropped": len(plan.sampled) - len(used),
            "round_failed": failed, "uplink_bytes": sum(rep.nbytes() for rep in replies),
            "downlink_bytes": sum(w.nbytes() for w in plan.works) if plan.downlink_bytes is None
            else plan.downlink_bytes,
            "wall_s": time.perf_counter() - plan.t0, **reply_fields(used), "H": plan.H,
            "clock_s": self.sim_clock, "outliers": outliers, **fields,
        }
        if self.evaluates(plan.r + 1):  # the record waits for the clients' evaluation (``complete_evaluation``)
            self.deferred = (plan.r + 1, info)
            return None
        return self._write_record(plan.r + 1, info)

    def complete_evaluation(self, answers: list[EvalAnswer], refused: int) -> dict[str, Any] | None:
        """Write the record ``complete`` kept for the clients' evaluation, with their weighted metrics
        (``weighted_metrics``; ``answers``: the checked answers of the clients asked, ``refused``: those refused);
        None when no round waits (no federated evaluation this round)."""
        if self.deferred is None:
            return None
        (k, info), self.deferred = self.deferred, None
        return self._write_record(k, {**info, **self.fed_fields(k, answers, refused)})

    def latest_metrics(self) -> dict[str, Any]:
        """The test metrics of the newest round, written or waiting for the clients' evaluation."""
        if self.deferred is not None:
            return self.method.metrics(self.state)
        return self.writer.records[-1] if self.writer.records else {}

    @staticmethod
    def outliers(plan: RoundPlan, used: list[Reply]) -> list[int]:
        """The clients whose used reply lay far outside the round's spread (``zofl.algorithms.outliers``; a
        diagnostic for the summary, which changes nothing), a model read as its update from what was sent."""
        sent = {w.pid: w.arrays for w in plan.works}
        return [used[i].pid for i in far_replies([rep.arrays for rep in used], [sent.get(rep.pid) for rep in used])]

    def round_sim_s(self, used: list[Reply], r: int = 0) -> float:
        """Simulated duration of synchronous round ``r``: its slowest participant's download + local steps
        x ``sim-step-s`` / s_i (x a straggler's multiplier) + upload, plus ``latency-s``, at most
        ``round-deadline-s`` (the device and network model of the asynchronous engine's simulated clock,
        drawn from (seed, r, client), so that both can be compared on one clock). Every communication
        round is charged: FedNest's outer round is inner-rounds + neumann-steps + 1 of them."""
        cfg = self.cfg

        def client_s(rep: Reply) -> float:
            down, up, mult = self.sim_delays(r, rep.pid)
            return int(rep.metrics.get("steps", 0)) * cfg.sim_step_s / self.speeds[rep.pid] * mult + down + up

        longest = max((client_s(rep) for rep in used), default=0.0) + cfg.latency_s
        return min(longest, cfg.round_deadline_s) if cfg.round_deadline_s else longest

    def checkpoint_extra(self) -> dict[str, np.ndarray]:
        """More to checkpoint besides the method's state: the simulated clock (and the asynchronous queue)."""
        return {"sim_clock": np.array(self.sim_clock)}

    def setting(self) -> str:
        cfg = self.cfg
        return f"{progress_unit(cfg.num_rounds, self.total, 'communication rounds')}, m={cfg.num_clients}, " \
               f"alpha={self.method.spec.alpha}, beta={cfg.beta}"
