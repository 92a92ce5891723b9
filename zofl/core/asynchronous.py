"""``AsyncRun``: updates applied as replies arrive, with staleness (the asynchronous engine's core).

The server keeps every client busy: an idle client gets a task on the newest model x^(v) (or, with
probability 1 - p_i per task, sits it out for as long as the task would have taken: any
participation, ``availability``); each reply is checked and put in a buffer with its staleness
s = v_now - v_task; when the buffer holds K replies (``Method.buffer_size``) the method's
``update_async`` makes x^(v+1), a record is written, and the client that delivered the K-th reply
gets a new task. No client is ever waited for as a group.

Two clocks (``clock``):
* ``simulated``: a task sent at simulated time t finishes at
  t + d_down + c_n (steps sim-step-s / s_i) + d_up + latency-s (+ hang-s for an injected hang), with
  steps the method's cost of the task (FedBuff 2 E_i), s_i the device speed (``speed-profile``), and
  d_down, d_up, c_n drawn per task n and client (``zofl.faults.task_delays``, stream 0x74): the
  download and upload delays Exp(mean ``comm-s``), c_n = 1; for a client in ``slow-clients`` with
  ``straggler-factor`` F the delays have mean F comm-s and c_n = 1 + (F - 1) Exp(1), so its mean
  communication + computation time is F times a normal client's, drawn afresh per task. Events are
  handled in that order, waiting for the real reply of the next one. The run is a pure function of
  the seed: two runs, or a run and its resume from any checkpoint, are equal bit for bit.
* ``wall``: events are handled in real arrival order; device speeds make clients really slower
  (the client sleeps), so the asynchrony is the machine's.

Anarchic clients: a client sits a task out with probability 1 - p_i (``availability``), has its own
local work (``local-work``) and, for AFBO, Neumann depth (``neumann-steps``); with ``leave`` =
"i:start:length,..." client i leaves when the model reaches version ``start`` (server steps taken)
and returns at version start + length: a task due to it in between is not sent (it is ``away``),
and it gets one when the update that makes version start + length is applied. A task it was running
when it left is finished and its reply used (it left after sending). Versions, not seconds, so the
same setting means the same under both clocks.

A client whose reply does not come within ``reply-timeout-s`` (real seconds; the simulated clock
needs it next, or in wall mode it is outstanding that long) is given up ("lost") and gets no more
work; in wall mode it comes back if its reply arrives after all. Under the wall clock a client whose
SuperNode is gone (the SuperLink's NODE_UNAVAILABLE, a failure of kind "lost") gets its next task
``reply-timeout-s`` later, not at once: the SuperLink answers for a dead node immediately, and an
immediate retry would fill every window of the failure policy with that one client's failures. A reply later than
``round-deadline-s`` after its task was sent (simulated or wall seconds) is dropped as late.

Everything goes through a ``Transport`` (``submit(work) -> handle``, ``poll() -> [(handle, Reply |
Failure)]``, ``wait(s)``): Flower's grid (``zofl.strategies.asynchronous``) or any other.
"""
from __future__ import annotations

import heapq
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np

from ..algorithms.outliers import far_replies
from ..faults import draw_fault
from .checks import finite_or_kept, reply_problem
from .evaluation import EvalAnswer
from .method import Method
from .policy import allowed_failures, async_windows, failure_message, round_failed
from .protocol import Failure, Reply, Work
from .record import failure_fields, reply_fields
from .run import Run, progress_unit
from .sampling import available, away, per_client

log = logging.getLogger("zofl")
POLL_S = 0.002


class Transport(Protocol):
    def submit(self, work: Work) -> str: ...

    def poll(self) -> list[tuple[str, Reply | Failure]]: ...

    def wait(self, seconds: float) -> None: ...


@dataclass
class Task:
    work: Work
    version: int  # v of the model it was computed from
    sent_at: float  # clock time
    due: float  # simulated completion time (nan under the wall clock)


class AsyncRun(Run):
    """One run of an asynchronous method over a ``Transport`` (see the module docstring)."""

    def __init__(self, cfg, method: Method, writer, transport: Transport):
        super().__init__(cfg, method, writer)
        self.transport = transport
        self.simulated = cfg.clock == "simulated"
        self.K = method.buffer_size()
        self.version = self.offset
        self.now = 0.0  # simulated clock
        self.task_no = 0
        self.tasks: dict[str, Task] = {}
        self.arrived: dict[str, Reply | Failure] = {}
        self.rejoins: list[tuple[float, int, int]] = []  # (clock time, task number, pid)
        self.lost: dict[str, int] = {}  # handle -> pid of a client given up
        self.buffer: list[tuple[Reply, int]] = []
        self.replied: set[int] = set()  # clients whose reply was buffered at this version
        self.waiting: list[int] = []  # clients waiting for the next version (one_task_per_version)
        self.away: list[int] = []  # clients on leave (``leave``), back when the version leaves their stretch
        # the failure policy over windows of m task results (zofl.core.policy)
        self.windows_needed = async_windows(self.total, self.K, self.m)
        self.allowed_failed = allowed_failures(self.windows_needed, cfg.max_failed_rounds)
        self.window_results, self.window_usable = 0, 0
        # federated evaluation (run-config federated-eval): x_v -> (checked answers, refused), from the engine
        self.evaluate_clients: Callable[[np.ndarray, int], tuple[list[EvalAnswer], int]] | None = None
        self._reset_counts()

    @property
    def m(self) -> int:
        return self.cfg.num_clients

    def pending_failures(self) -> list[Failure]:
        return list(self.counts["failures"])

    def _reset_counts(self) -> None:
        self.counts = {"failures": [], "uplink_bytes": 0, "downlink_bytes": 0, "unavailable": 0,
                       "t0": time.perf_counter()}

    # -- clock and durations --------------------------------------------------------------
    def clock(self) -> float:
        return self.now if self.simulated else self.wall_s()

    def duration(self, work: Work) -> float:
        """Simulated seconds a task takes: download, its local steps at the client's speed (times a
        straggler's multiplier), upload, latency (the module docstring; ``Run.sim_delays``)."""
        steps = self.method.task_steps(work)
        down, up, mult = self.sim_delays(work.round, work.pid)
        return steps * self.cfg.sim_step_s / self.speeds[work.pid] * mult + down + up + self.cfg.latency_s

    # -- sending --------------------------------------------------------------------------
    def dispatch(self, pid: int) -> None:
        if pid in self.unheld:
            return  # no SuperNode holds this partition: it never gets work
        if away(self.leave, pid, self.version):
            if pid not in self.away:
                self.away.append(pid)  # on leave: no task (no task number) until it returns
            return
        cfg = self.cfg
        n = self.task_no
        self.task_no += 1
        work = self.stamp(self.method.plan_task(self.state, self.version, n, pid))
        if not available(cfg.seed, n, pid, per_client(cfg.availability, pid)):
            self.counts["unavailable"] += 1
            heapq.heappush(self.rejoins, (self.clock() + self.duration(work), n, pid))
            return
        due = float("nan")
        if self.simulated:
            hang = draw_fault(cfg.seed, n, pid, cfg.crash_prob, cfg.hang_prob, cfg.corrupt_prob) == "hang"
            due = self.now + self.duration(work) + (cfg.hang_s if hang else 0.0)
        self._send(Task(work, self.version, self.clock(), due))

    def _send(self, task: Task) -> None:
        self.counts["downlink_bytes"] += task.work.nbytes()
        self.tasks[self.transport.submit(task.work)] = task

    def _collect(self) -> None:
        for handle, result in self.transport.poll():
            if handle in self.tasks:
                self.arrived[handle] = result
            elif handle in self.lost and not self.simulated:  # a client given up is back after all
                pid = self.lost.pop(handle)
                log.warning("client %d: its reply came after reply-timeout-s; it gets work again", pid)
                self.dispatch(pid)

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> dict[str, Any] | None:
        if self.version >= self.total:
            return None
        if self.resumed_extra:
            self._restore(self.resumed_extra)
        else:
            limit = self.cfg.concurrency or self.m
            for pid in range(min(limit, self.m)):
                self.dispatch(pid)
        while self.version < self.total:
            if not self.tasks and not self.rejoins:
                # nothing can arrive any more: the run ends as failed, with its summary (``fail``)
                if self.away:
                    self.fail(f"asynchronous run: update {self.version + 1} cannot come: no work is in flight and "
                              f"clients {sorted(self.away)} are on leave until a version the run cannot reach "
                              f"(run-config key 'leave' = {self.cfg.leave!r})")
                if self.waiting:
                    self.fail(f"asynchronous run: update {self.version + 1} needs buffer-size = {self.K} usable "
                              f"replies, but no work is in flight: {len(self.waiting)} client(s) have replied for "
                              f"this version and wait for the update (the other replies were rejected or their "
                              f"clients given up after reply-timeout-s = {self.cfg.reply_timeout_s:g} s: see the log)")
                self.fail(f"asynchronous run: no client left with work after {self.version} updates (every client "
                          f"was given up after reply-timeout-s = {self.cfg.reply_timeout_s:g} s without a reply: see "
                          f"the log; in a deployment a first reply can take tens of seconds)")
            if self.simulated:
                self._step_simulated()
            else:
                self._step_wall()
        return self.writer.records[-1]

    def _step_simulated(self) -> None:
        handle, task = min(self.tasks.items(), key=lambda kv: (kv[1].due, kv[1].work.round), default=(None, None))
        if self.rejoins and (task is None or (self.rejoins[0][0], self.rejoins[0][1]) < (task.due, task.work.round)):
            t, _, pid = heapq.heappop(self.rejoins)
            self.now = max(self.now, t)
            self.dispatch(pid)
            return
        t_wait = time.perf_counter()
        while handle not in self.arrived:
            self._collect()
            if handle in self.arrived:
                break
            if time.perf_counter() - t_wait > self.cfg.reply_timeout_s:
                self.arrived[handle] = Failure(task.work.pid, f"no reply within reply-timeout-s = "
                                               f"{self.cfg.reply_timeout_s:g} s; client given up", "late")
                self.lost[handle] = task.work.pid
                break
            self.transport.wait(POLL_S)
        self.now = max(self.now, task.due)
        self._handle(handle, self.arrived.pop(handle))

    def _step_wall(self) -> None:
        self._collect()
        if self.arrived:
            handle = next(iter(self.arrived))
            self._handle(handle, self.arrived.pop(handle))
            return
        now = self.clock()
        if self.rejoins and self.rejoins[0][0] <= now:
            _, _, pid = heapq.heappop(self.rejoins)
            self.dispatch(pid)
            return
        for handle, task in list(self.tasks.items()):
            if now - task.sent_at > self.cfg.reply_timeout_s:
                self.lost[handle] = task.work.pid
                self._handle(handle, Failure(task.work.pid, f"no reply within reply-timeout-s = "
                                                           f"{self.cfg.reply_timeout_s:g} s; client given up", "late"))
                return
        self.transport.wait(POLL_S)

    def _handle(self, handle: str, result: Reply | Failure) -> None:
        task = self.tasks.pop(handle)
        pid = task.work.pid
        deadline = self.cfg.round_deadline_s
        late = deadline and (task.due if self.simulated else self.clock()) - task.sent_at > deadline
        if isinstance(result, Reply) and late:
            self.note_late([result], self.simulated)  # queued behind other work, or a slow client
            result = Failure(pid, f"reply {self.clock() - task.sent_at:.2f} s after its task, later than "
                                  f"round-deadline-s = {deadline:g}", "late")
        applied = None
        usable = False
        if isinstance(result, Failure):
            self.counts["failures"].append(result)
            log.warning("update %d: client %s failed: %s", self.version + 1, pid, result.reason)
        else:
            self.counts["uplink_bytes"] += result.nbytes()
            result.pid = pid  # the server knows whom it sent the task to
            problem = reply_problem(result.arrays, self.method.task_reply_shapes(self.state, task.work),
                                    self.cfg.reply_max_abs, result.num_examples)
            if problem:
                self.counts["failures"].append(Failure(pid, problem, "rejected"))
                log.warning("update %d: dropped client %d: %s", self.version + 1, pid, problem)
            else:
                usable = True
                self.state = self.method.receive(self.state, result, self.version - task.version)
                self.buffer.append((result, self.version - task.version))
                if self.method.ready(self.state, [rep for rep, _ in self.buffer]):
                    applied = self._apply()
        if isinstance(result, Reply) and applied is None and self.method.counts(self.state, result):
            self.replied.add(pid)
        if handle not in self.lost:
            if isinstance(result, Failure) and result.kind == "lost" and not self.simulated:
                # its SuperNode is gone (the SuperLink answers at once): retry after reply-timeout-s, not
                # in a loop that would fill every window with failures (a restarted node takes its work back)
                log.warning("client %d: no SuperNode (lost); its next task in reply-timeout-s = %g s", pid,
                            self.cfg.reply_timeout_s)
                heapq.heappush(self.rejoins, (self.clock() + self.cfg.reply_timeout_s, self.task_no, pid))
            elif self.method.one_task_per_version and pid in self.replied:
                self.waiting.append(pid)  # it has given its update for this version
            else:
                self.dispatch(pid)
        # the policy counts this result before the update's record, so that the checkpoint written with the
        # record holds the window as it is (a resume continues the same windows); its stop comes after the
        # record (in _write_record, or here when no update was applied)
        self._count_window(usable)
        if applied is not None:
            waiting, self.waiting = self.waiting, []
            for other in waiting:
                self.dispatch(other)
            back = [p for p in self.away if not away(self.leave, p, self.version)]
            self.away = [p for p in self.away if p not in back]
            for other in back:  # back from leave at this version, in the order they left
                self.dispatch(other)
            if self.leave:
                applied["away"] = sorted(self.away)
            if self.evaluates(self.version) and self.evaluate_clients is not None:
                # federated evaluation of this version: the server waits for the answers (the simulated clock
                # does not move; on the wall clock the clients' work goes on meanwhile)
                applied.update(self.fed_fields(self.version, *self.evaluate_clients(self.x, self.version)))
            self._write_record(self.version, applied)
        self.stop_if_policy_failed()

    def policy_failure(self) -> str:
        return failure_message(self.failed_rounds, self.windows_needed, self.cfg.min_replies,
                               self.cfg.max_failed_rounds, unit="windows")

    def _count_window(self, usable: bool) -> None:
        """The failure policy's count: every m task results make a window; too few usable replies fail it
        (the stop, when more windows failed than allowed, is the caller's)."""
        self.window_results += 1
        self.window_usable += usable
        if self.window_results < self.m:
            return
        if round_failed(self.window_usable, self.cfg.min_replies):
            self.failed_rounds += 1
            log.warning("a window of %d task results failed: %d usable, fewer than min-replies = %d (%d failed "
                        "window(s) of %d allowed)", self.m, self.window_usable, self.cfg.min_replies,
                        self.failed_rounds, self.allowed_failed)
        self.window_results, self.window_usable = 0, 0

    def _apply(self) -> dict[str, Any]:
        """One update from the buffer, and its record's engine fields:

        * ``clients``, ``staleness``: every reply accepted since the previous update, in arrival order, and
          its staleness in versions (server steps of any kind since the model its task was sent on). For
          FedBuff these are the updates combined; for AFBO a reply of the other kind is among them, held
          for a later step (the method's ``held``). ``sampled`` = ``clients``, ``participants`` = their count.
        * ``used``: the updates the step combined, each {client, kind, version (the model version its task
          was sent on), delay (in steps of its kind)}; a method with several kinds (AFBO) says it itself,
          else every buffered reply with kind "update" and its staleness as delay.
        * ``away`` (with ``leave`` set): clients on leave after this update; ``unavailable``: tasks sat out since the
          previous update (``availability``); the failure counts, bytes and clocks as in every record."""
        replies = [rep for rep, _ in self.buffer]
        staleness = [s for _, s in self.buffer]
        # before the update: the buffer's replies far outside its spread (a diagnostic for the summary)
        outliers = sorted({replies[i].pid for i in far_replies([rep.arrays for rep in replies])})
        state, fields = self.method.update_async(self.state, self.version, replies, staleness)
        if "used" not in fields:
            fields = {**fields, "used": [{"client": rep.pid, "kind": "update", "version": self.version - s,
                                          "delay": s} for rep, s in self.buffer]}
        self.state, fields = finite_or_kept(state, fields, self.state, f"update {self.version + 1}")
        self.version += 1
        self.buffer = []
        self.replied = set()
        c = self.counts
        info = {
            "clients": [rep.pid for rep in replies], "staleness": staleness, "sampled": [rep.pid for rep in replies],
            "participants": len(replies), **failure_fields(c["failures"], self.late_fields()), "dropped": 0,
            "unavailable": c["unavailable"], "uplink_bytes": c["uplink_bytes"],
            "downlink_bytes": c["downlink_bytes"], "wall_s": time.perf_counter() - c["t0"],
            "clock_s": self.clock(), **reply_fields(replies), "outliers": outliers, **fields,
        }
        self._reset_counts()
        return info

    def setting(self) -> str:
        cfg = self.cfg
        return (f"{progress_unit(cfg.num_rounds, self.total, 'server steps', 'updates')}, m={cfg.num_clients}, "
                f"alpha={self.method.spec.alpha}, buffer K={self.K}, clock={cfg.clock}")

    # -- checkpoint and exact resume --------------------------------------------------------
    def checkpoint_extra(self) -> dict[str, np.ndarray]:
        """The queue: clock, task counter, tasks in flight (with the work they carry), rejoins, given-up clients."""
        out = {"now": np.array(self.now), "task_no": np.array(self.task_no),
               "policy": np.array([self.failed_rounds, self.window_results, self.window_usable]),
               "rejoins": np.array(self.rejoins, dtype=np.float64).reshape(-1, 3),
               "lost": np.array(sorted(self.lost.values()), dtype=np.int64)}
        for i, task in enumerate(sorted(self.tasks.values(), key=lambda t: t.work.round)):
            w = task.work
            out[f"task{i}/meta"] = np.array([w.pid, w.round, w.H, task.version, task.sent_at, task.due])
            out[f"task{i}/config"] = np.array(json.dumps(w.config))
            out.update({f"task{i}/arrays/{k}": v for k, v in w.arrays.items()})
        return out

    def _restore(self, extra: dict[str, np.ndarray]) -> None:
        """The queue as ``checkpoint_extra`` wrote it (checked by ``check_async_extra`` before the resume)."""
        self.now = float(extra["now"])
        self.task_no = int(extra["task_no"])
        if "policy" in extra:
            self.failed_rounds, self.window_results, self.window_usable = (int(v) for v in extra["policy"])
        self.rejoins = [(float(t), int(n), int(p)) for t, n, p in extra["rejoins"]]
        heapq.heapify(self.rejoins)
        lost = set(int(p) for p in extra["lost"])
        i = 0
        while f"task{i}/meta" in extra:
            pid, n, H, version, sent_at, due = extra[f"task{i}/meta"]
            prefix = f"task{i}/arrays/"
            arrays = {k[len(prefix):]: v for k, v in extra.items() if k.startswith(prefix)}
            work = Work(int(pid), int(n), int(H), arrays, json.loads(str(extra[f"task{i}/config"])))
            i += 1
            if work.pid in self.unheld:
                log.warning("resume: client %d's task in flight is dropped: no SuperNode holds its partition now",
                            work.pid)
                continue
            self._send(Task(work, int(version), float(sent_at), float(due)))
        # a client with neither a task in flight, a rejoin nor given up was on leave at the checkpoint (one is
        # written right after an update, when every other client has been given work): it stays away
        busy = {t.work.pid for t in self.tasks.values()} | {p for _, _, p in self.rejoins} | lost | self.unheld
        limit = self.cfg.concurrency or self.m
        self.away = [p for p in range(min(limit, self.m)) if p not in busy and away(self.leave, p, self.version)]
        if lost:
            log.warning("resume: clients %s were given up before the checkpoint and stay so", sorted(lost))
