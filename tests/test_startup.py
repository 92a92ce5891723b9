"""Where a run's start-up goes (issue 51, item 5; ``zofl.core.startup``): summary.json's ``startup`` and the
summary's ``start-up:`` line, on the in-process engine (no Ray: it has no runtime to start, but it learns a node
map). The block through ``zofl run`` and Ray, on a resume: tests/test_flower_e2e.py."""
import json
import time

import pytest

from zofl.core.startup import LAUNCH_ENV, Startup, launch_stamp, runtime_s, startup_line
from zofl.inprocess import run_inprocess
from zofl.results import read_rounds

KEYS = {"num-rounds": 2, "num-clients": 3, "checkpoint-every": 1}


def _startup(d) -> dict:
    return json.loads((d / "summary.json").read_text())["startup"]


def _line(out: str) -> str:
    (line,) = [line for line in out.splitlines() if line.startswith("  start-up: ")]
    return line


def test_a_run_s_summary_says_where_its_start_up_went_and_a_resume_says_its_own(tmp_path, capsys):
    """A fresh run: no runtime (nothing started it), its set-up, its node map and round 1, each >= 0, together at
    most the time the run took; round 1's time holds at least the record's own wall time. Its resume reports its
    own start-up: the first round it ran is the checkpoint's + 1, and so says its line."""
    keys = {**KEYS, "output-dir": str(tmp_path), "run-name": "r"}
    t0 = time.perf_counter()
    d, _ = run_inprocess(keys, workers=0)
    took = time.perf_counter() - t0
    s = _startup(d)
    assert s["runtime_s"] is None and s["first_round"] == 1
    parts = [s[k] for k in ("setup_s", "node_map_s", "first_round_s")]
    assert all(isinstance(v, float) and v >= 0 for v in parts), s
    assert sum(parts) <= took
    assert s["first_round_s"] >= read_rounds(d)[1]["wall_s"] - 1e-3  # the round, and what came before its plan
    line = _line(capsys.readouterr().out)
    assert line == (f"  start-up: server set-up {s['setup_s']:.1f} s, node map {s['node_map_s']:.1f} s (first answer "
                    f"after {s['first_answer_s']:.1f} s), round 1 {s['first_round_s']:.1f} s"), line
    assert 0 <= s["first_answer_s"] <= s["node_map_s"], s

    run_inprocess({**keys, "num-rounds": 4, "resume": True}, workers=0)
    again = _startup(d)
    assert again["first_round"] == 3 and again["runtime_s"] is None, again
    assert all(again[k] >= 0 for k in ("setup_s", "node_map_s", "first_round_s")), again
    assert ", round 3 " in _line(capsys.readouterr().out)


def test_the_asynchronous_engine_reports_its_first_update(tmp_path):
    d, _ = run_inprocess({**KEYS, "strategy": "fedbuff", "engine": "async", "output-dir": str(tmp_path),
                          "run-name": "a"}, workers=0)
    s = _startup(d)
    assert s["first_round"] == 1 and s["node_map_s"] >= 0 and s["first_round_s"] >= 0 and s["setup_s"] >= 0, s


def test_zofl_run_s_stamp_gives_the_runtime_of_its_own_run_folder_only(tmp_path, monkeypatch, capsys):
    """``zofl run`` names the run folder with its start time (``LAUNCH_ENV``, in the SuperLink's environment): a
    ServerApp of that folder reports the time since as ``runtime_s``; one of another folder, a stamp that cannot
    be read or one in the future, nothing."""
    folder = tmp_path / "r"
    monkeypatch.setenv(LAUNCH_ENV, launch_stamp(folder, now=1000.0))
    assert runtime_s(folder, now=1012.5) == 12.5
    before = time.time()
    monkeypatch.setenv(LAUNCH_ENV, launch_stamp(folder))  # now, by default
    assert 0.0 <= runtime_s(folder, now=before + 1.0) <= 1.0
    monkeypatch.setenv(LAUNCH_ENV, launch_stamp(folder, now=1000.0))
    assert runtime_s(tmp_path / "other", now=1012.5) is None
    assert runtime_s(folder, now=999.0) is None  # a clock that went back: no number rather than a wrong one
    for bad in ("", "x", f"nan:{folder}", f"soon:{folder}", f"1000:{folder}/.."):
        monkeypatch.setenv(LAUNCH_ENV, bad)
        assert runtime_s(folder, now=1012.5) is None, bad

    monkeypatch.setenv(LAUNCH_ENV, launch_stamp(folder, now=time.time() - 5.0))
    t0 = time.perf_counter()
    d, _ = run_inprocess({**KEYS, "output-dir": str(tmp_path), "run-name": "r"}, workers=0)
    s = _startup(d)
    assert 5.0 <= s["runtime_s"] <= 5.0 + time.perf_counter() - t0, s
    assert _line(capsys.readouterr().out).startswith(f"  start-up: runtime {s['runtime_s']:.1f} s, server set-up ")


def test_the_set_up_is_the_server_s_time_to_its_first_round_less_the_node_map():
    """The parts add up to the time from the ServerApp's start to its first record: the set-up is what is left
    before the first round once the node map is taken out; unknown parts are null, never a guess."""
    s = Startup(t0=10.0, runtime_s=41.0, node_map_s=3.0, t_ready=20.0, first_round=1, first_round_s=5.0)
    assert s.fields() == {"runtime_s": 41.0, "setup_s": 7.0, "node_map_s": 3.0, "first_answer_s": None,
                          "first_round": 1, "first_round_s": 5.0}
    assert Startup(t0=10.0, t_ready=12.5).fields()["setup_s"] == 2.5  # no node map (a direct test of the core)
    assert Startup(node_map_s=3.0, t_ready=20.0).fields() == {  # a user's App: no ServerApp start known
        "runtime_s": None, "setup_s": None, "node_map_s": 3.0, "first_answer_s": None, "first_round": None,
        "first_round_s": None}
    late = Startup(t0=10.0)
    late.recorded(1)  # a record before the set-up ended (round 0) starts no round
    late.ready()
    late.recorded(2)
    late.recorded(3)
    assert late.first_round == 2 and 0 <= late.first_round_s < 1


@pytest.mark.parametrize("block, line", [
    (None, []),
    ({}, []),
    ({"runtime_s": None, "setup_s": None, "node_map_s": None, "first_round": None, "first_round_s": None}, []),
    ({"runtime_s": 41.25, "setup_s": 2.0, "node_map_s": 146.04, "first_round": 1, "first_round_s": 50.0},
     ["  start-up: runtime 41.2 s, server set-up 2.0 s, node map 146.0 s, round 1 50.0 s"]),
    ({"runtime_s": None, "setup_s": 0.5, "node_map_s": None, "first_round": None, "first_round_s": None},
     ["  start-up: server set-up 0.5 s"]),  # a run that failed before its first round
    ({"runtime_s": 3.0, "setup_s": 0.0, "node_map_s": 0.01, "first_round": 7, "first_round_s": 1.0},
     ["  start-up: runtime 3.0 s, server set-up 0.0 s, node map 0.0 s, round 7 1.0 s"]),  # a resume
])
def test_the_start_up_line_says_the_known_parts_only(block, line):
    assert startup_line(block) == line
