"""A resume trusts nothing it reads (issue 30): the checkpoint (dtypes, shapes, round, magnitudes, the
engines' extras), the records' fields and data.json are checked before anything is written, and every
refusal is one RunFolderError naming the file (and array or line) that leaves the folder byte for byte
as it was. Files in a run folder are never opened through a link, and the folder's lock belongs to the
process that took it (a forked child does not keep it after its parent died)."""
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from zofl.core.checkpoint import TMP, save_checkpoint
from zofl.inprocess import run_inprocess
from zofl.results import RUN_FILES, ResultsWriter, RunFolderError, read_rounds

BASE = {"num-rounds": 3, "num-clients": 3, "tau": 1.0, "checkpoint-every": 1}
ASYNC = {"strategy": "fedbuff", "engine": "async", "num-clients": 4, "local-steps": 2, "num-rounds": 7,
         "buffer-size": 2, "checkpoint-every": 3, "speed-profile": "uniform", "speed-param": 0.3,
         "availability": "0.7"}


def _run(tmp_path, name="r", base=BASE, **keys):
    return run_inprocess({**base, "output-dir": str(tmp_path), "run-name": name, **keys}, workers=0)


def _snapshot(d: Path) -> dict[str, bytes | str]:
    """Every entry of the folder: a file's bytes, a link's target."""
    return {p.name: (os.readlink(p) if p.is_symlink() else p.read_bytes()) for p in sorted(d.iterdir())}


def _refused(tmp_path, d, match, base=BASE, **keys):
    """A resume of ``d`` is refused with ``match`` and changes nothing in the folder."""
    before = _snapshot(d)
    with pytest.raises(RunFolderError, match=match) as exc:
        _run(tmp_path, resume=True, base=base, **{"num-rounds": 5 if base is BASE else 9, **keys})
    assert "\n" not in str(exc.value)
    assert _snapshot(d) == before
    return str(exc.value)


def _edit_checkpoint(d, edit):
    path = d / "checkpoint.npz"
    with np.load(path) as ck:
        arrays = {k: ck[k] for k in ck.files}
    edit(arrays)
    np.savez(path, **arrays)


# -- data.json -----------------------------------------------------------------------------------
def _mnist(path, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, 600).astype(np.uint8)
    x = (rng.integers(0, 60, (600, 28, 28)) + y[:, None, None] * 19).astype(np.uint8)
    np.savez(path, x_train=x[:500], y_train=y[:500], x_test=x[500:], y_test=y[500:])


def test_a_deleted_data_json_does_not_switch_the_data_check_off(tmp_path):
    """Once: deleting data.json skipped the fingerprint check, and a swapped data file resumed."""
    data = tmp_path / "data"
    data.mkdir()
    _mnist(data / "mnist.npz", 0)
    keys = {"dataset": "mnist", "data-dir": str(data)}
    d, _ = _run(tmp_path, **keys)
    (d / "data.json").unlink()
    _mnist(data / "mnist.npz", 1)  # another file at the same path
    _refused(tmp_path, d, rf"{re.escape(str(d / 'data.json'))} is missing: .* restore it, or start a new run",
             **keys)
    _mnist(data / "mnist.npz", 0)  # even with the run's own data: without data.json it cannot be told
    _refused(tmp_path, d, r"data\.json is missing", **keys)
    (d / "data.json").write_text(json.dumps({"fingerprint": 7}))
    _refused(tmp_path, d, r"data\.json is not readable \(TypeError: fingerprint 7 is not a string\)", **keys)


# -- the checkpoint's state ------------------------------------------------------------------------
@pytest.mark.parametrize("how,message", [
    ("complex", r"array 'x' has dtype complex128, this run's is float64"),
    ("bool", r"array 'x' has dtype bool, this run's is float64"),
    ("float16", r"array 'x' has dtype float16, this run's is float64"),
    ("int", r"array 'x' has dtype int64, this run's is float64"),
    ("1e300", r"array 'x' holds values as large as 1e\+300, whose squared norm overflows float64"),
    ("Inf", r"array 'x' holds NaN or Inf"),
])
def test_a_checkpoint_model_of_another_dtype_or_absurd_magnitude_is_refused(tmp_path, how, message):
    """Once accepted: x stored as complex, bool, float16 or int, or as finite but absurd 1e300."""
    d, _ = _run(tmp_path)
    change = {"complex": lambda x: x.astype(np.complex128), "bool": lambda x: x > 0,
              "float16": lambda x: x.astype(np.float16), "int": lambda x: np.round(x).astype(np.int64),
              "1e300": lambda x: np.full_like(x, 1e300), "Inf": lambda x: np.full_like(x, np.inf)}[how]
    _edit_checkpoint(d, lambda a: a.update(x=change(a["x"])))
    out = _refused(tmp_path, d, rf"{re.escape(str(d / 'checkpoint.npz'))}: {message}")
    assert out.endswith("delete the run folder (or choose another run-name) to start again")


@pytest.mark.parametrize("edit,message", [
    (lambda a: a.update(round=np.array(-3)), r"array 'round' is -3, not a finite number >= 0"),
    (lambda a: a.update(round=np.array(2.0)), r"array 'round' is float64 of shape \(\), not one integer"),
    (lambda a: a.update(round=np.array([1, 2])), r"array 'round' is int64 of shape \(2,\), not one integer"),
    (lambda a: a.update(wall_s=np.array(np.nan)), r"array 'wall_s' is nan, not a finite number >= 0"),
    (lambda a: a.update(wall_s=np.array(-1.0)), r"array 'wall_s' is -1.0, not a finite number >= 0"),
    (lambda a: a.pop("async/sim_clock"), r"the engine's arrays are \[\], a synchronous run writes"),
    (lambda a: a.update({"async/sim_clock": np.array(np.inf)}), r"array 'async/sim_clock' is inf"),
    (lambda a: a.update(extra=np.zeros(2)), r"arrays \[\] missing, \['extra'\] unknown"),
    (lambda a: a.update({"async/now": np.array(0.0)}), r"the engine's arrays are \['async/now', 'async/sim_clock'\]"),
])
def test_a_checkpoint_round_clock_or_key_out_of_range_is_refused(tmp_path, edit, message):
    """Once: round = -3 emptied rounds.jsonl to 0 bytes and raised ValueError; a float round, a NaN or
    negative wall_s, a deleted or infinite simulated clock and unknown arrays were taken as they came."""
    d, _ = _run(tmp_path)
    _edit_checkpoint(d, edit)
    _refused(tmp_path, d, rf"{re.escape(str(d / 'checkpoint.npz'))}: {message}")
    assert [r["round"] for r in read_rounds(d)] == [0, 1, 2, 3]


def test_a_checkpoint_that_is_a_bare_array_is_refused(tmp_path):
    d, _ = _run(tmp_path)
    np.save(d / "checkpoint.npz.npy", np.zeros(3))
    (d / "checkpoint.npz.npy").replace(d / "checkpoint.npz")
    _refused(tmp_path, d, r"checkpoint\.npz is not a readable checkpoint \(ValueError: not an \.npz archive\)")


def test_a_checkpoint_whose_header_claims_more_memory_than_exists_is_refused_in_one_line(tmp_path):
    """Issue 47: an array header claiming 2**40 floats (8 TiB) made np.load raise MemoryError, a traceback."""
    import zipfile

    d, _ = _run(tmp_path)
    path = d / "checkpoint.npz"
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    header = members["x.npy"]
    start, end = header.index(b"'shape': (") + len(b"'shape': ("), header.index(b"), }")
    members["x.npy"] = header[:start] + b"1099511627776," + header[end:]  # 8 TiB of floats (the padding absorbs it)
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    _refused(tmp_path, d, r"checkpoint\.npz is not a readable checkpoint \(MemoryError: ")


class _Planted:
    """A pickle that creates a file when it is loaded: what a hostile checkpoint could carry."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_checkpoint_holding_a_pickle_is_refused_without_unpickling_it(tmp_path):
    d, _ = _run(tmp_path)
    marker = tmp_path / "unpickled"
    _edit_checkpoint(d, lambda a: a.update(x=np.array([_Planted(str(marker))], dtype=object)))
    _refused(tmp_path, d, r"checkpoint\.npz is not a readable checkpoint \(ValueError: Object arrays cannot be loaded")
    assert not marker.exists()  # np.load(allow_pickle=False): the pickle was never run


# -- the asynchronous queue ----------------------------------------------------------------------
@pytest.mark.parametrize("edit,message", [
    (lambda a: a.pop("async/now"), r"the asynchronous queue's arrays \['async/now'\] are missing, \[\] unknown"),
    (lambda a: a.pop("async/task1/config"), r"the asynchronous queue's arrays \['async/task1/config'\] are missing"),
    (lambda a: a.update({"async/task0/extra": np.zeros(1)}),
     r"the asynchronous queue's arrays \[\] are missing, \['async/task0/extra'\] unknown"),
    (lambda a: a.update({"async/task_no": np.array(-1)}), r"array 'async/task_no' is -1"),
    (lambda a: a.update({"async/now": np.array(np.inf)}), r"array 'async/now' is inf"),
    (lambda a: a.update({"async/policy": np.array([0, 9, 0])}), r"array 'async/policy' is int64 \[0, 9, 0\]"),
    (lambda a: a.update({"async/lost": np.array([7])}), r"array 'async/lost' .* not client ids in 0..3"),
    (lambda a: a.update({"async/rejoins": np.array([[0.5, 1.0, 9.0]])}), r"array 'async/rejoins' .* not float64"),
    (lambda a: a["async/task0/meta"].__setitem__(0, 99.0), r"array 'async/task0/meta' is \[99.0, .*client in 0..3"),
    (lambda a: a["async/task0/meta"].__setitem__(3, 8.0), r"array 'async/task0/meta' .* version in 0..7"),
    (lambda a: a["async/task0/meta"].__setitem__(5, np.nan), r"array 'async/task0/meta' .* due >= sent_at\)"),
    (lambda a: a.update({"async/task0/config": np.array("[1, 2]")}),
     r"array 'async/task0/config' is not a JSON object"),
    (lambda a: a.update({"async/task0/config": np.array("[" * 100_000 + "]" * 100_000)}),  # was a RecursionError
     r"array 'async/task0/config' is not a JSON object"),
    (lambda a: a.update({"async/task0/arrays/x": a["async/task0/arrays/x"].astype(np.float32)}),
     r"array 'async/task0/arrays/x' has dtype float32, this run's is float64"),
    (lambda a: a.update({"async/task0/arrays/x": np.full_like(a["async/task0/arrays/x"], 1e300)}),
     r"array 'async/task0/arrays/x' holds values as large as 1e\+300"),
    (lambda a: a.pop("async/task0/arrays/x"), r"task 0 carries arrays \[\], a task of this run \['x'\]"),
])
def test_an_asynchronous_queue_that_is_not_the_runs_is_refused(tmp_path, edit, message):
    """Once: a missing array raised KeyError, and a task of client 99, of a future version or with a
    float32 or 1e300 model was sent as it came."""
    d, _ = _run(tmp_path, base=ASYNC)  # the last checkpoint at update 7, with tasks in flight
    _edit_checkpoint(d, edit)
    _refused(tmp_path, d, rf"{re.escape(str(d / 'checkpoint.npz'))}: {message}", base=ASYNC)


def test_an_unedited_asynchronous_checkpoint_still_resumes_bit_for_bit(tmp_path):
    _, x_ref = _run(tmp_path, "ref", base=ASYNC, **{"num-rounds": 9})
    d, _ = _run(tmp_path, base=ASYNC)
    _edit_checkpoint(d, lambda a: None)  # written again by numpy: the same arrays
    d, x = _run(tmp_path, resume=True, base=ASYNC, **{"num-rounds": 9})
    np.testing.assert_array_equal(x, x_ref)


# -- records and config.json -----------------------------------------------------------------------
@pytest.mark.parametrize("edit,message", [
    (lambda r: r.pop("test_loss"), r"line 3: not a round record \(fields \['test_loss'\] missing\)"),
    (lambda r: r.update(round=2.0), r"line 3: not a round record \('round' is 2.0, not an integer\)"),
    (lambda r: r.update(sampled="012"), r"line 3: .*'sampled' is '012', not a list of client ids\)"),
    (lambda r: r.update(local_steps="many"), r"line 3: .*'local_steps' is 'many', not a number\)"),
    (lambda r: r.update(rejected=[1]), r"line 3: .*'rejected' is \[1\], not a number\)"),
    (lambda r: r.update(failed_clients=[[0]]), r"line 3: .*'failed_clients' is \[\[0\]\], not a list of client ids\)"),
])
def test_a_record_without_its_fields_is_refused_with_file_and_line(tmp_path, edit, message):
    """Once: a record without test_loss raised KeyError; a float round or a string for a list or count
    was taken (and summed) as it came."""
    d, _ = _run(tmp_path)
    lines = (d / "rounds.jsonl").read_text().splitlines(keepends=True)
    rec = json.loads(lines[2])
    edit(rec)
    (d / "rounds.jsonl").write_text("".join(lines[:2] + [json.dumps(rec) + "\n"] + lines[3:]))
    _refused(tmp_path, d, rf"{re.escape(str(d / 'rounds.jsonl'))}, {message}; restore the file")


def test_a_config_json_that_is_not_a_run_config_is_refused(tmp_path):
    d, _ = _run(tmp_path)
    config = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps([config]))  # once: AttributeError
    _refused(tmp_path, d, r"config\.json is not a JSON object \(a run-config\); restore it")
    (d / "config.json").write_text(json.dumps({**config, "checkpoint-every": "2"}))  # once: int('2') read it
    _refused(tmp_path, d, r"config\.json has 'checkpoint-every' = '2', not an integer >= 0")


def test_a_checkpoint_without_records_is_not_overwritten_by_a_new_run(tmp_path):
    d, _ = _run(tmp_path)
    (d / "rounds.jsonl").unlink()
    before = _snapshot(d)
    with pytest.raises(RunFolderError, match=r"already holds results"):
        _run(tmp_path)
    assert _snapshot(d) == before
    _refused(tmp_path, d, r"holds round 3 but rounds.jsonl ends at no round; restore the records")


# -- links -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", RUN_FILES)
@pytest.mark.parametrize("dangling", [False, True])
def test_a_link_in_the_run_folder_is_refused_by_name_and_never_followed(tmp_path, name, dangling):
    """Once: a link at .config.json.tmp had its target overwritten, one at .lock had it created."""
    d = tmp_path / "r"
    d.mkdir()
    target = tmp_path / "target"
    if not dangling:
        target.write_text("precious")
    (d / name).symlink_to(target)
    with pytest.raises(RunFolderError, match=rf"{re.escape(str(d / name))} is a symbolic link \(to {target}\); "
                                             rf"a run folder's files are never links"):
        _run(tmp_path)
    assert (target.read_text() == "precious") if not dangling else not target.exists()
    assert [p.name for p in d.iterdir()] == [name]  # and no lock file left: the refused run took and removed it


def test_a_link_planted_while_the_run_writes_is_refused_not_followed(tmp_path):
    """The writes themselves never follow a link (O_NOFOLLOW, O_CREAT|O_EXCL), not only the first check."""
    target = tmp_path / "target"
    target.write_text("precious")
    with ResultsWriter(tmp_path / "w", {"a": 1}) as w:
        w.accept()
        for name, write in ((".summary.json.tmp", lambda: w.write_summary({"a": 1})),
                            ("rounds.jsonl", lambda: w.write_round({"round": 0})),
                            (TMP, lambda: save_checkpoint(w.dir, 1, 0.0, {"x": np.zeros(2)}))):
            (w.dir / name).symlink_to(target)
            with pytest.raises(RunFolderError, match=rf"{re.escape(str(w.dir / name))} is a symbolic link"):
                write()
            (w.dir / name).unlink()
    assert target.read_text() == "precious"
    assert not (w.dir / "summary.json").exists() and not (w.dir / "checkpoint.npz").exists()


def test_a_run_folder_reached_through_a_link_is_used_and_locked_as_itself(tmp_path):
    """The folder itself may be a link (an output-dir on a linked disk): its files are not; the lock is
    on the lock file's inode, so the two paths exclude each other."""
    (tmp_path / "real").mkdir()
    (tmp_path / "r").symlink_to(tmp_path / "real")
    with ResultsWriter(tmp_path / "real", {}):
        with pytest.raises(RunFolderError, match=r"is in use by another run"):
            _run(tmp_path)
    _run(tmp_path)
    assert (tmp_path / "real" / "rounds.jsonl").is_file() and not (tmp_path / "real" / "rounds.jsonl").is_symlink()


def test_a_leftover_temporary_file_of_a_killed_run_is_replaced(tmp_path):
    with ResultsWriter(tmp_path / "w", {"a": 1}) as w:
        (w.dir / ".config.json.tmp").write_text("half a config")
        (w.dir / TMP).write_text("half a checkpoint")
        w.accept()
        save_checkpoint(w.dir, 1, 0.0, {"x": np.zeros(2)})
    assert json.loads((w.dir / "config.json").read_text()) == {"a": 1}
    assert sorted(p.name for p in w.dir.iterdir()) == ["checkpoint.npz", "config.json"]  # the lock file removed


# -- the lock ------------------------------------------------------------------------------------
def test_a_lock_file_removed_by_its_holder_between_open_and_flock_is_not_taken(tmp_path, monkeypatch):
    """A finished run removes its lock file while still holding it (issue 47: finished folders kept .lock and
    .cli.lock). A process that opened the old file meanwhile gets its flock on a file that is no longer
    FOLDER/.lock: lock_folder must drop it and lock the file there now, or two processes would both hold
    "the" lock. The holder's removal is played at the flock (its one moment of interest)."""
    import fcntl

    from zofl import results

    real_flock, calls = fcntl.flock, []

    def flock_after_removal(fd, op):
        calls.append(os.fstat(fd).st_ino)
        if len(calls) == 1:  # the holder finishes now: removes the file, then lets go
            os.unlink(tmp_path / ".lock")
        return real_flock(fd, op)

    monkeypatch.setattr(results.fcntl, "flock", flock_after_removal)
    fd = results.lock_folder(tmp_path)
    try:
        assert len(calls) == 2 and (tmp_path / ".lock").stat().st_ino == os.fstat(fd).st_ino
        assert (tmp_path / ".lock").read_text() == str(os.getpid())
    finally:
        results.unlock_folder(fd, remove=True)
    assert not (tmp_path / ".lock").exists()
    fd = results.lock_folder(tmp_path)  # a lock file replaced by another: left alone by the old holder
    (tmp_path / ".lock").rename(tmp_path / "old")
    (tmp_path / ".lock").write_text("someone else's")
    results.unlock_folder(fd, remove=True)
    assert (tmp_path / ".lock").read_text() == "someone else's"


HOLD_THEN_FORK = """
import os, sys, time
from concurrent.futures import ProcessPoolExecutor
import multiprocessing as mp
from zofl.results import ResultsWriter
w = ResultsWriter(sys.argv[1], {})
if sys.argv[2] == "fork":
    r, ready = os.pipe()
    child = os.fork()
    if child == 0:  # the at-fork hooks have run when os.fork returns here: say so (a loaded machine may
        os.write(ready, b"1")  # schedule the child long after the parent printed its pid)
        time.sleep(60)
        os._exit(0)
    os.read(r, 1)
else:  # an in-process worker pool, as zofl.inprocess forks it after the lock is taken
    pool = ProcessPoolExecutor(1, mp_context=mp.get_context("fork"))
    child = pool.submit(os.getpid).result()
print(child, flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("how", ["fork", "pool"])
def test_a_forked_child_does_not_keep_the_lock_after_its_parent_died(tmp_path, how):
    """Once: a child forked after the lock was taken shared its file description, so after the parent
    was killed the folder stayed 'in use by another run (pid <dead pid>)' for as long as the child lived."""
    d = tmp_path / "r"
    parent = subprocess.Popen([sys.executable, "-c", HOLD_THEN_FORK, str(d), how], stdout=subprocess.PIPE, text=True)
    child = None
    try:
        child = int(parent.stdout.readline())
        with pytest.raises(RunFolderError, match=rf"in use by another run \(pid {parent.pid}\)"):
            ResultsWriter(d, {})  # the parent holds it
        parent.kill()
        parent.wait()
        os.kill(child, 0)  # the child lives on
        with ResultsWriter(d, {}):  # and the lock is free
            pass
    finally:
        parent.kill()
        parent.wait()
        if child:
            os.kill(child, signal.SIGKILL)


HOLD_AS = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, sys.argv[2].encode())
print("locked", flush=True)
time.sleep(60)
"""


def test_a_lock_held_for_a_dead_run_says_who_holds_it_and_what_to_do(tmp_path):
    """A lock whose pid is dead but which a live process still holds (an older zofl's worker) is
    reported as such, with the pids to stop; one nobody holds is simply taken."""
    d = tmp_path / "r"
    d.mkdir()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    holder = subprocess.Popen([sys.executable, "-c", HOLD_AS, str(d / ".lock"), str(gone.pid)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunFolderError, match=rf"{re.escape(str(d))} is locked, but the run that locked it "
                                                 rf"\(pid {gone.pid}\) is no longer running: process\(es\) "
                                                 rf"{holder.pid} still hold .*\.lock open .*kill {holder.pid}\)"):
            ResultsWriter(d, {})
    finally:
        holder.kill()
        holder.wait()
    with ResultsWriter(d, {}):  # nobody holds it now: taken, though the file names a dead pid
        assert (d / ".lock").read_text() == str(os.getpid())


# -- issue 47: run files read with a size cap, from regular files only, parsed with a depth limit -------------
DEEP = "[" * 100_000 + "]" * 100_000
NESTED = "nested deeper than 32 levels (arrays and tables/objects within each other); zofl's files nest a few " \
         "levels at most"


@pytest.mark.parametrize("deep", [DEEP, "[" * 100 + "]" * 100], ids=["100000", "100"])
@pytest.mark.parametrize("name", ["config.json", "data.json", "rounds.jsonl"])
def test_a_run_file_nested_too_deep_is_refused_in_one_line(tmp_path, name, deep):
    """A record (a line of rounds.jsonl), config.json or data.json nested 100,000 deep was a RecursionError
    traceback on resume; 100 deep, which json reads, is refused as well (by the count before parsing)."""
    d, _ = _run(tmp_path)
    path = d / name
    if name == "rounds.jsonl":
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(lines[:2] + [deep + "\n"] + lines[3:]))
        want = f"{path}, line 3: {NESTED}; restore the file, or start a new run (another run-name)"
    else:
        path.write_text(deep)
        want = f"cannot resume {d}: {path}: {NESTED}; restore it, or start a new run (another run-name)"
    assert _refused(tmp_path, d, re.escape(want)) == want


@pytest.mark.parametrize("name", ["config.json", "data.json"])
def test_a_run_file_larger_than_its_cap_is_refused_unread(tmp_path, name):
    d, _ = _run(tmp_path)
    os.truncate(d / name, 2 << 20)  # a sparse tail of zeros: no disk
    want = (f"cannot resume {d}: {d / name}: 2,097,152 bytes, more than the 1 MiB (1,048,576 bytes) a run's {name} "
            f"may be; restore it, or start a new run (another run-name)")
    assert _refused(tmp_path, d, re.escape(want)) == want


def test_a_record_longer_than_its_cap_is_refused_by_line(tmp_path):
    d, _ = _run(tmp_path)
    with open(d / "rounds.jsonl", "a") as f:
        f.write(" " * (8 << 20) + "{}\n")
    want = (f"{d / 'rounds.jsonl'}, line 5: more than 8,388,608 bytes, more than the 8 MiB a round record may be; "
            f"restore the file, or start a new run (another run-name)")
    assert _refused(tmp_path, d, re.escape(want)) == want


def test_records_larger_than_their_cap_are_refused_unread_by_zofl_run(tmp_path):
    """A 4 GiB rounds.jsonl (sparse: no disk) was read whole; ``zofl run --set resume=true`` (a real process,
    2 GiB of address space: it stops before Flower starts) refuses it in one line, exit 2."""
    import resource

    d, _ = _run(tmp_path)
    os.truncate(d / "rounds.jsonl", 4 << 30)
    res = subprocess.run([sys.executable, "-m", "zofl.cli", "run", "--rounds", "5", "--clients", "3", "--set",
                          f'output-dir="{tmp_path}"', "run-name=r", "resume=true", "tau=1.0", "checkpoint-every=1"],
                         capture_output=True, text=True, timeout=300,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)))
    assert (res.returncode, res.stderr) == (2, f"zofl run: error: {d / 'rounds.jsonl'}: 4,294,967,296 bytes, more than "
                                               f"the 2 GiB (2,147,483,648 bytes) a run's rounds.jsonl may be; restore "
                                               f"the file, or start a new run (another run-name)\n")


def test_zofl_run_refuses_a_resume_of_a_config_json_nested_too_deep_in_one_line(tmp_path, capsys):
    from zofl.cli import main

    d, _ = _run(tmp_path)
    (d / "config.json").write_text(DEEP)
    assert main(["run", "--rounds", "5", "--clients", "3", "--set", f'output-dir="{tmp_path}"', "run-name=r",
                 "resume=true", "tau=1.0", "checkpoint-every=1"]) == 2
    assert capsys.readouterr().err == (f"zofl run: error: cannot resume {d}: {d / 'config.json'}: {NESTED}; restore "
                                       f"it, or start a new run (another run-name)\n")
