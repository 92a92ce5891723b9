"""Where a run's start-up goes, said by the run itself: summary.json's ``startup`` and the summary's
``start-up:`` line.

    runtime_s      from ``zofl run`` starting its SuperLink to the ServerApp's start: the SuperLink, Flower's
                   simulation process, Ray (null where the ServerApp cannot know it: a plain ``flwr run``, a
                   deployment, the runner's shared SuperLinks, the in-process engine)
    setup_s        the ServerApp's own preparation besides the node map: the run-config, the data, the method,
                   x_0 and its evaluation (round 0), or the checkpoint a resume continues from
    node_map_s     learning which SuperNode holds which partition (``zofl.strategies.nodes``), waiting for the
                   SuperNodes to connect included
    first_answer_s of node_map_s, the time to the first node's answer: the runtime ready to run a ClientApp (Ray's
                   actors started, zofl imported in them); the rest is the cost of asking every node
    first_round    the first record this process wrote after its start: 1, or a resume's checkpoint round + 1
    first_round_s  from the end of the set-up to that record: the round, its messages' first trip included
                   (Ray's actors, the ClientApps' imports and data)

Together they are the time from the SuperLink's start to the first record. They are this process's: a
resumed run reports its own start-up, not the first run's.

``zofl run`` tells the ServerApp when it started the runtime by an environment variable of the SuperLink
(``LAUNCH_ENV``, inherited by the processes the SuperLink starts), which names the run folder too: a ServerApp
of another run folder ignores it.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("zofl")

LAUNCH_ENV = "ZOFL_LAUNCH"  # "<time.time() when zofl run started the SuperLink>:<the run folder>"


def launch_stamp(run_dir: str | os.PathLike, now: float | None = None) -> str:
    """The value of ``LAUNCH_ENV`` that ``zofl run`` gives its SuperLink for the run in ``run_dir``."""
    return f"{time.time() if now is None else now:.6f}:{Path(run_dir).resolve()}"


def runtime_s(run_dir: str | os.PathLike, now: float | None = None) -> float | None:
    """Seconds since ``zofl run`` started the runtime of the run in ``run_dir`` (``LAUNCH_ENV``), or None: no
    such variable, one of another run folder, or one that cannot be read or lies in the future."""
    stamp, _, folder = os.environ.get(LAUNCH_ENV, "").partition(":")
    if not folder or Path(folder) != Path(run_dir).resolve():
        return None
    try:
        elapsed = (time.time() if now is None else now) - float(stamp)
    except ValueError:
        log.warning("%s=%r is not <time>:<run folder>: the runtime's start-up is not reported", LAUNCH_ENV,
                    os.environ[LAUNCH_ENV][:200])
        return None
    return elapsed if 0.0 <= elapsed < float("inf") else None


def _s(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


@dataclass
class Startup:
    """This process's start-up of a run (see the module docstring); ``t0``: ``time.perf_counter()`` when the
    ServerApp started (None: unknown, e.g. a user's App strategy, which starts inside the user's ServerApp)."""

    t0: float | None = None
    runtime_s: float | None = None
    node_map_s: float | None = None
    first_answer_s: float | None = None
    t_ready: float | None = None  # perf_counter when the set-up ended (``ready``)
    first_round: int | None = None
    first_round_s: float | None = None

    def ready(self) -> None:
        """The set-up has ended (the run's state is x_0, or the checkpoint's): the first round's clock starts."""
        if self.t_ready is None:
            self.t_ready = time.perf_counter()

    def recorded(self, k: int) -> None:
        """Record ``k`` was written: the first after the set-up is the first round's end."""
        if self.first_round is None and self.t_ready is not None:
            self.first_round, self.first_round_s = k, time.perf_counter() - self.t_ready

    def fields(self) -> dict[str, Any]:
        """summary.json's ``startup``: seconds (3 decimals), null where unknown."""
        setup = None
        if self.t0 is not None and self.t_ready is not None:
            setup = max(0.0, self.t_ready - self.t0 - (self.node_map_s or 0.0))
        return {"runtime_s": _s(self.runtime_s), "setup_s": _s(setup), "node_map_s": _s(self.node_map_s),
                "first_answer_s": _s(self.first_answer_s), "first_round": self.first_round,
                "first_round_s": _s(self.first_round_s)}


def startup_line(s: dict[str, Any] | None) -> list[str]:
    """The summary's ``start-up:`` line of summary.json's ``startup`` (its known parts), or none."""
    s = s or {}
    first = s.get("first_answer_s")
    parts = [(what, s.get(key), "") for what, key in (("runtime", "runtime_s"), ("server set-up", "setup_s"))]
    parts.append(("node map", s.get("node_map_s"), f" (first answer after {first:.1f} s)" if first is not None else ""))
    parts.append((f"round {s.get('first_round')}", s.get("first_round_s"), ""))
    known = [f"{what} {v:.1f} s{note}" for what, v, note in parts if v is not None]
    return [f"  start-up: {', '.join(known)}"] if known else []
