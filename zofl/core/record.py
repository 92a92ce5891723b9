"""The round record: one line of rounds.jsonl per synchronous round or asynchronous update.

Its schema is ``RoundRecord`` (every field, its type and meaning, here and nowhere else); ``make_record``
is the only place a record is built, by both engines (``zofl.core.rounds``, ``zofl.core.asynchronous``);
the run folder writes it (``zofl.results``: ``ROUND_FIELDS`` first, then the rest in this order) and the
summary (``zofl.core.summary``), the runner's CSV (``zofl.compare``) and the report scripts read it.
A method adds its own fields (``Method.update``'s second value: e.g. ZO-HFL's ``gamma_r``, AFBO's
``step``); JSON has no NaN, so a NaN is written as null.

With run-config eval-every = K > 1 the server evaluates (its test pass, ``Method.metrics``) only x_0, every K-th
round and the last (``zofl.core.evaluation.server_eval_due``); the other records hold every field of that
evaluation (test_acc, test_loss, f1, objective and a task's own, e.g. weight_auc) as null, and
``eval_skipped: true``. The fields that are no test pass (who took part, failures, bytes, clocks) are in every
record. A reader of the evaluation skips those records (``evaluated``, ``last_evaluated``).
"""
from __future__ import annotations

from typing import Any, Iterable, TypedDict

from .policy import kind_counts
from .protocol import Failure, Reply


class RoundRecord(TypedDict, total=False):
    # -- the model after round (update) k: the method's metrics (Method.metrics) ------------------------
    round: int  # k: 0 is x_0, then 1, 2, ... (communication rounds; server steps of the async engine)
    test_acc: float  # test accuracy (nan where a task has none)
    test_loss: float
    f1: float  # the loss on the server's data (ZO-HFL's upper objective; nan where meaningless)
    f2_est: float  # ZO-HFL: the round's mean two-point f2 value (else nan)
    objective: float  # f1 + f2_est
    eval_skipped: bool  # only true, where the server did not evaluate (eval-every): the fields above are null
    # -- who took part ----------------------------------------------------------------------------------
    sampled: list[int]  # S_r (async: the clients whose replies were buffered since the previous update)
    participants: int  # usable replies the update used
    stragglers: int  # of S_r, clients sent H = 0
    H: int  # the round's local steps H_{i,r}
    dropped: int  # sampled without a usable reply
    away: list[int]  # async with leave: clients on leave after this update
    unavailable: int  # async: tasks sat out since the previous update (availability)
    clients: list[int]  # async: the buffered replies' clients, in arrival order
    staleness: list[int]  # async: each one's staleness in versions
    used: list[dict[str, Any]]  # async: the updates the step combined {client, kind, version, delay}
    # -- what went wrong (zofl.core.policy) ----------------------------------------------------------
    failures: int  # failed clients (late + errors + rejected + lost)
    late: int
    errors: int
    rejected: int
    lost: int
    late_queued: int  # late replies classified since the previous record: queued behind other work,
    late_slow: int  # a slow client,
    late_failed: int  # or an error that came late
    failed_clients: list[int]
    round_failed: bool  # fewer usable replies than min-replies (sync)
    outliers: list[int]  # replies far outside the round's spread (a diagnostic; changes nothing)
    model_rejected: bool  # the update made a non-finite model: the previous one was kept (core.checks)
    # -- cost ---------------------------------------------------------------------------------------------
    uplink_bytes: int
    downlink_bytes: int
    wall_s: float  # the round's (update's) wall time on the server
    clock_s: float  # the simulated clock after it (or the wall clock: async with clock = wall)
    client_compute_s: float  # the used replies' compute time, summed
    client_compute_max_s: float
    client_wall_max_s: float  # the slowest used reply's wall time on its client
    local_steps: int  # the used replies' local steps, summed
    gamma_r: float  # ZO-HFL's server step (0 for the others)
    # -- federated evaluation (zofl.core.evaluation; only the rounds the clients evaluated have them) -------
    fed_loss: float  # the clients' mean loss of x_k on their held-out data, weighted by examples (null: none)
    fed_acc: float  # the same for accuracy
    fed_examples: int  # the held-out examples of the answers used
    fed_clients: int  # the clients whose answers were used (with at least one example)
    fed_refused: int  # the clients asked whose answer failed the checks, was an error or did not come


# every record holds these (results.record_problem checks them on resume; the runner's CSV columns)
ROUND_FIELDS = (
    "round", "test_acc", "test_loss", "f1", "f2_est", "objective", "sampled", "participants", "stragglers",
    "failures", "uplink_bytes", "downlink_bytes", "wall_s", "client_compute_s", "client_compute_max_s",
    "local_steps", "H", "gamma_r",
)
# the failure counts the summary totals (checked, when a record has them, on resume)
COUNT_FIELDS = ("dropped", "rejected", "late", "errors", "lost", "late_queued", "late_slow", "late_failed")
# a record's engine fields before a round fills them (round 0, x_0, has only these)
EMPTY: dict[str, Any] = {
    "sampled": [], "participants": 0, "stragglers": 0, "failures": 0, "dropped": 0, "rejected": 0, "late": 0,
    "errors": 0, "lost": 0, "late_queued": 0, "late_slow": 0, "late_failed": 0, "client_wall_max_s": 0.0,
    "uplink_bytes": 0, "downlink_bytes": 0, "wall_s": 0.0, "outliers": [], "client_compute_s": 0.0,
    "client_compute_max_s": 0.0, "local_steps": 0, "H": 0, "gamma_r": 0.0,
}


def make_record(k: int, metrics: dict[str, Any], info: dict[str, Any]) -> RoundRecord:
    """The record of round (update) ``k``: the model's ``metrics``, then the engine's and the method's fields
    (``info``, over ``EMPTY``); ``f2_est`` (ZO-HFL's, from its fields) makes ``objective``."""
    info = dict(info)
    f2_est = info.pop("f2_est", float("nan"))
    empty = {key: list(v) if isinstance(v, list) else v for key, v in EMPTY.items()}  # lists of its own
    return {**metrics, "round": k, "f2_est": f2_est, "objective": metrics["f1"] + f2_est, **empty,  # type: ignore
            **info}


def evaluated(record: RoundRecord) -> bool:
    """Whether ``record`` holds the server's evaluation (every record at eval-every = 1)."""
    return not record.get("eval_skipped")


def last_evaluated(records: list[RoundRecord]) -> RoundRecord:
    """The newest record that holds the server's evaluation (the last round's, once a run is finished; round 0's,
    x_0, at the latest), or the last record when none does (a folder whose records start after x_0)."""
    return next((r for r in reversed(records) if evaluated(r)), records[-1])


def reply_fields(replies: Iterable[Reply]) -> dict[str, Any]:
    """What the used replies cost: compute (sum, max), the slowest wall time, local steps."""
    replies = list(replies)
    computes = [float(rep.metrics.get("compute_s", 0.0)) for rep in replies]
    return {"client_compute_s": float(sum(computes)), "client_compute_max_s": max(computes, default=0.0),
            "client_wall_max_s": max((float(rep.metrics.get("wall_s", 0.0)) for rep in replies), default=0.0),
            "local_steps": sum(int(rep.metrics.get("steps", 0)) for rep in replies)}


def failure_fields(failures: list[Failure], late: dict[str, int]) -> dict[str, Any]:
    """The failures' counts by kind, the late replies classified since the previous record, who failed."""
    return {"failures": len(failures), **kind_counts(failures), **late,
            "failed_clients": sorted({f.pid for f in failures if f.pid is not None})}
