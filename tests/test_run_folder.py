"""A run folder cannot be corrupted: one writer at a time, nothing written before a run or resume is
accepted, and a resume checks what it reads (records, checkpoint) and names the file (and line)."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from zofl.core.protocol import MAX_FINGERPRINT
from zofl.inprocess import run_inprocess
from zofl.results import ResultsWriter, RunFolderError, read_rounds, read_text

BASE = {"num-rounds": 3, "num-clients": 3, "tau": 1.0, "checkpoint-every": 1}


def _run(tmp_path, name="r", **keys):
    return run_inprocess({**BASE, "output-dir": str(tmp_path), "run-name": name, **keys}, workers=0)


def _finished(tmp_path, **keys):
    """A finished 3-round run and the bytes of its config.json (to show a refusal leaves it alone)."""
    d, x = _run(tmp_path, **keys)
    return d, x, (d / "config.json").read_bytes()


def test_a_second_writer_of_a_live_run_folder_is_refused_by_name(tmp_path):
    d = tmp_path / "r"
    code = ("import sys, time; from zofl.results import ResultsWriter; "
            "w = ResultsWriter(sys.argv[1], {}); print('locked', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(d)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunFolderError, match=rf"{re.escape(str(d))} is in use by another run \(pid {holder.pid}\)"):
            _run(tmp_path, resume=True)
        assert not (d / "config.json").exists() and not (d / "rounds.jsonl").exists()  # nothing written
    finally:
        holder.kill()
        holder.wait()
    d, _ = _run(tmp_path, resume=True)  # the holder is gone: its lock went with it
    assert [r["round"] for r in read_rounds(d)] == [0, 1, 2, 3]


def test_a_refused_or_empty_resume_says_so_and_writes_nothing(tmp_path):
    d, _, config = _finished(tmp_path)
    for rounds in (3, 2):  # a finished run; fewer rounds than done
        with pytest.raises(RunFolderError, match=r"'num-rounds': nothing to resume .* it has run 3 of"):
            _run(tmp_path, resume=True, **{"num-rounds": rounds})
    with pytest.raises(RunFolderError, match=r"'resume': cannot resume .* differs in \['seed'\]"):
        _run(tmp_path, resume=True, seed=5)
    assert (d / "config.json").read_bytes() == config


def test_records_out_of_order_or_unreadable_are_refused_with_file_and_line(tmp_path):
    d, _, config = _finished(tmp_path)
    lines = (d / "rounds.jsonl").read_text().splitlines(keepends=True)
    (d / "summary.json").unlink()
    for bad, line, what in ((lines[:3] + [lines[2]] + lines[3:], 4, "round 2 where round 3"),  # a duplicate
                            ([lines[0], lines[2], lines[1], lines[3]], 2, "round 2 where round 1"),
                            (lines[:2] + ["garbage}\n"] + lines[3:], 3, "not a round record")):
        (d / "rounds.jsonl").write_text("".join(bad))
        with pytest.raises(RunFolderError, match=rf"rounds.jsonl, line {line}: {what}"):
            _run(tmp_path, resume=True, **{"num-rounds": 5})
    assert (d / "config.json").read_bytes() == config


def _corrupt_checkpoint(path, how):
    if how == "truncated":
        path.write_bytes(path.read_bytes()[:200])
    elif how == "flipped byte":
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    else:
        with np.load(path) as ck:
            arrays = {k: ck[k] for k in ck.files}
        if how == "NaN":
            arrays["x"] = np.full_like(arrays["x"], np.nan)
        else:  # wrong shape
            arrays["x"] = arrays["x"][:-1]
        np.savez(path, **arrays)


@pytest.mark.parametrize("how,message", [("truncated", "is not a readable checkpoint"),
                                         ("flipped byte", "is not a readable checkpoint"),
                                         ("NaN", "array 'x' holds NaN or Inf"),
                                         ("wrong shape", "array 'x' has shape")])
def test_a_corrupt_checkpoint_is_refused_by_name(tmp_path, how, message):
    d, _, config = _finished(tmp_path)
    _corrupt_checkpoint(d / "checkpoint.npz", how)
    with pytest.raises(RunFolderError, match=rf"{re.escape(str(d / 'checkpoint.npz'))}:? .*{message}"):
        _run(tmp_path, resume=True, **{"num-rounds": 5})
    assert (d / "config.json").read_bytes() == config
    assert [r["round"] for r in read_rounds(d)] == [0, 1, 2, 3]  # the records are kept


def test_records_without_their_checkpoint_are_refused_not_restarted(tmp_path):
    d, _, _ = _finished(tmp_path, **{"checkpoint-every": 0})
    (d / "summary.json").unlink()
    with pytest.raises(RunFolderError, match=r"holds rounds 0-3 but there is no checkpoint.npz"):
        _run(tmp_path, resume=True, **{"num-rounds": 5, "checkpoint-every": 0})
    d, _, _ = _finished(tmp_path / "lost", **{"checkpoint-every": 2})
    (d / "checkpoint.npz").unlink()  # a checkpoint that should be there is not
    with pytest.raises(RunFolderError, match=r"holds rounds 0-3 but there is no checkpoint.npz"):
        _run(tmp_path / "lost", resume=True, **{"num-rounds": 5, "checkpoint-every": 2})


def test_a_run_stopped_before_its_first_checkpoint_starts_again(tmp_path, caplog):
    _, x_ref = _run(tmp_path, "ref", **{"checkpoint-every": 5})
    d, _ = _run(tmp_path, **{"checkpoint-every": 5, "num-rounds": 2})  # as if killed after round 2
    (d / "summary.json").unlink()
    (d / "checkpoint.npz").unlink()
    d, x = _run(tmp_path, resume=True, **{"checkpoint-every": 5})
    assert "before its first checkpoint (round 5): it starts again from round 0" in caplog.text
    assert [r["round"] for r in read_rounds(d)] == [0, 1, 2, 3]
    np.testing.assert_array_equal(x, x_ref)


def test_a_torn_last_record_is_left_out_and_written_again(tmp_path):
    _, x_ref = _run(tmp_path, "ref")
    d, _ = _run(tmp_path, **{"num-rounds": 1})  # checkpoint at round 1
    with open(d / "rounds.jsonl", "a") as f:
        f.write(json.dumps({"round": 2, "test_acc": 0.5})[:20])  # killed while writing round 2
    assert [r["round"] for r in read_rounds(d)] == [0, 1]
    (d / "summary.json").unlink()
    d, x = _run(tmp_path, resume=True)
    assert [r["round"] for r in read_rounds(d)] == [0, 1, 2, 3]
    np.testing.assert_array_equal(x, x_ref)


def test_the_writer_releases_its_lock(tmp_path):
    with ResultsWriter(tmp_path / "w", {"a": 1}) as w:
        assert not (w.dir / "config.json").exists()  # written only once the run is accepted
        w.accept()
    with ResultsWriter(tmp_path / "w", {"a": 1}):  # a second writer after the first closed
        pass


def test_a_non_finite_x0_is_refused_before_anything_is_written(tmp_path):
    from zofl.config import ConfigError

    with pytest.raises(ConfigError, match=r"x_0 is not finite \(x0 = 'pretrained', x0-lr = 0.1\)"):
        _run(tmp_path, task="tests.plugin_task:DivergingTask")
    assert not (tmp_path / "r" / "config.json").exists() and not (tmp_path / "r" / "rounds.jsonl").exists()


def _mnist(path, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 10, 600).astype(np.uint8)
    x = (rng.integers(0, 60, (600, 28, 28)) + y[:, None, None] * 19).astype(np.uint8)
    np.savez(path, x_train=x[:500], y_train=y[:500], x_test=x[500:], y_test=y[500:])


def test_a_resume_on_a_swapped_data_file_is_refused_by_name(tmp_path):
    """The data's fingerprint (arrays as read, and the split) is stored in data.json; a resume after
    the file was replaced in place is refused naming both, and nothing is written."""
    data = tmp_path / "data"
    data.mkdir()
    _mnist(data / "mnist.npz", 0)
    keys = {"dataset": "mnist", "data-dir": str(data)}
    d, _, config = _finished(tmp_path, **keys)
    stored = json.loads((d / "data.json").read_text())
    assert stored["source"] == str((data / "mnist.npz").resolve()) and len(stored["fingerprint"]) == 33
    _mnist(data / "mnist.npz", 1)  # another file at the same path
    fp, src = stored["fingerprint"], re.escape(stored["source"])
    swapped = rf"data\.json has fingerprint {fp} \({src}\), the data now read from {src} have (?!{fp})"
    with pytest.raises(RunFolderError, match=swapped):
        _run(tmp_path, resume=True, **{**keys, "num-rounds": 4})
    assert (d / "config.json").read_bytes() == config and len(read_rounds(d)) == 4
    _mnist(data / "mnist.npz", 0)  # the run's data again
    (d / "data.json").write_text(json.dumps({**stored, "clients": ["0"]}))  # its clients' fingerprints unreadable
    with pytest.raises(RunFolderError, match=rf"{re.escape(str(d / 'data.json'))}'s \"clients\" is not an object"):
        _run(tmp_path, resume=True, **{**keys, "num-rounds": 4})
    (d / "data.json").write_text(json.dumps(stored))  # data.json as the run wrote it: the resume goes on
    d, _ = _run(tmp_path, resume=True, **{**keys, "num-rounds": 4})
    assert [r["round"] for r in read_rounds(d)] == list(range(5))


def test_a_client_with_other_data_refuses_to_train(tmp_path):
    """Every work message carries the server's fingerprint; a client whose data differ (another file
    under the same data-dir on its machine) raises, naming its file, and never trains."""
    from flwr.app import Context, RecordDict

    from zofl.client_app import ZOFLClient
    from zofl.core.protocol import NUM_PARTITIONS, PARTITION_ID
    from zofl.setup import DataMismatch, data_identity, prepare

    for name, seed in (("a", 0), ("b", 1)):
        (tmp_path / name).mkdir()
        _mnist(tmp_path / name / "mnist.npz", seed)
    cfg_a = {"dataset": "mnist", "data-dir": str(tmp_path / "a"), "num-clients": 3}
    _, task, spec = prepare(cfg_a)
    fp = data_identity(task, spec)["fingerprint"]
    x = task.init_params(784, 10)

    def client(data_dir):
        ctx = Context(run_id=1, node_id=7, node_config={PARTITION_ID: 1, NUM_PARTITIONS: 3}, state=RecordDict(),
                      run_config={**cfg_a, "data-dir": data_dir})
        return ZOFLClient(ctx)

    config = {"round": 0, "H": 2, "arrays": "x", "data-fp": fp, "eta": 0.01, "lr": 0.01}
    with pytest.raises(DataMismatch, match=rf"client 1: its data differ from the server's: 'mnist' read from "
                                           rf"{re.escape(str((tmp_path / 'b' / 'mnist.npz').resolve()))} .* the "
                                           rf"server's is {fp}"):
        client(str(tmp_path / "b")).fit([x], config)
    client(str(tmp_path / "a")).fit([x], config)  # the same data: it trains


def test_a_forked_child_closes_its_copies_of_the_lock_descriptors(tmp_path):
    """What every forked child runs first (os.register_at_fork, here called in this process): the lock
    descriptors closed, so that the child does not hold the folder's lock once its parent is gone; a number that
    is no longer the lock file's (closed, then reused by another file) is left open."""
    import os

    from zofl import results

    (tmp_path / "run").mkdir()
    fd = results.lock_folder(tmp_path / "run")
    results._close_inherited_locks()
    with pytest.raises(OSError):
        os.fstat(fd)
    assert results._HELD == {}
    fd = results.lock_folder(tmp_path / "run")  # free again
    other = os.open(tmp_path / "other.txt", os.O_CREAT | os.O_RDWR)
    os.close(fd)  # closed elsewhere, still listed as held
    os.dup2(other, fd)  # the number reused by a file that is not the lock
    try:
        results._close_inherited_locks()
        os.fstat(fd)  # still open
        assert results._HELD == {}
    finally:
        os.close(fd)
        os.close(other)


def test_a_busy_folder_s_message_says_who_holds_it_and_what_to_do(tmp_path):
    """zofl.results.busy_message, the one line `zofl run` prints for a run-name in use: a live holder; a dead one
    whose children still hold the lock file open (named, with the kill command); a dead one, holders unknown."""
    from zofl.results import FolderBusy, busy_message

    folder, lock = tmp_path / "r", tmp_path / "r" / ".lock"
    assert busy_message(folder, FolderBusy("41")) == (
        f"run-config key 'run-name': {folder} is in use by another run (pid 41); wait for it to end, stop it, or "
        f"choose another run-name")
    assert busy_message(folder, FolderBusy("41", stale=True, holders=(52, 63))) == (
        f"run-config key 'run-name': {folder} is locked, but the run that locked it (pid 41) is no longer running: "
        f"process(es) 52, 63 still hold {lock} open (started by it, e.g. its in-process workers); stop them (kill 52 "
        f"63) and run again, or choose another run-name")
    assert busy_message(folder, FolderBusy("?", stale=True)) == (
        f"run-config key 'run-name': {folder} is locked, but the run that locked it (pid ?) is no longer running: a "
        f"process it started still holds {lock} open; stop it (`fuser -v {lock}` names it) and run again, or choose "
        f"another run-name")


def test_a_run_s_outcome_is_read_only_from_the_files_this_run_wrote(tmp_path):
    """zofl.results.run_outcome, how `zofl run` and `zofl deploy local` tell what the run they started did: config.json
    written by this run = accepted; its summary.json (with results_dir) = finished; a file left by an earlier run (the
    same stamp as before the start) says nothing, nor does a summary that is no object or names no results folder."""
    import os

    from zofl.results import file_version, run_outcome

    out = tmp_path / "run"
    out.mkdir()

    def stamps():
        return {name: file_version(out / name) for name in ("config.json", "summary.json")}

    def write(name, doc):  # replaced atomically, as the ServerApp writes them: a new inode
        (out / (name + ".tmp")).write_text(json.dumps(doc))
        os.replace(out / (name + ".tmp"), out / name)

    before = stamps()
    assert run_outcome(out, before) == (None, False)
    write("config.json", {"a": 1})
    assert run_outcome(out, before) == (None, True)
    write("summary.json", {"results_dir": str(out), "rounds": 3})
    assert run_outcome(out, before) == ({"results_dir": str(out), "rounds": 3}, True)
    earlier = stamps()  # the next run starts on this folder: both files are an earlier run's
    assert run_outcome(out, earlier) == (None, False)
    write("summary.json", {"results_dir": str(out)})  # a summary written, but config.json is the earlier run's
    assert run_outcome(out, earlier) == (None, False)
    write("config.json", {"a": 2})
    assert run_outcome(out, earlier) == ({"results_dir": str(out)}, True)
    for doc in ([1], {"rounds": 3}, {"results_dir": ""}):
        write("summary.json", doc)
        assert run_outcome(out, earlier) == (None, True)
    (out / "summary.json").write_text("{")
    assert run_outcome(out, earlier) == (None, True)
    (tmp_path / "elsewhere.json").write_text("{}")
    (out / "link.json").symlink_to(tmp_path / "elsewhere.json")  # a link's own stamp, not its target's
    assert file_version(out / "link.json")[0] == os.lstat(out / "link.json").st_ino != os.stat(out / "link.json").st_ino


def test_a_cap_is_said_in_its_largest_whole_unit_and_a_file_by_its_kind():
    import stat

    from zofl.safeio import GiB, KiB, MiB, _human, kind

    assert [kind(m) for m in (stat.S_IFDIR, stat.S_IFIFO, stat.S_IFCHR, stat.S_IFBLK, stat.S_IFSOCK, stat.S_IFLNK, 0)] \
        == ["folder", "FIFO (named pipe)", "character device", "block device", "socket", "symbolic link",
            "special file"]

    assert [_human(n) for n in (0, 1023, KiB, 1536, 3 * MiB, MiB + KiB, 2 * GiB, 5 * GiB + 1)] == [
        "0 bytes", "1,023 bytes", "1 KiB", "1,536 bytes", "3 MiB", "1025 KiB", "2 GiB", "5,368,709,121 bytes"]


def test_the_records_are_forced_to_the_disk_with_each_checkpoint_and_the_last_round_only(tmp_path, monkeypatch):
    """rounds.jsonl is written through at every record (a killed process loses none) but fsynced only with a
    checkpoint and at the last round: a checkpoint that outlives a crash of the machine has every record before it
    on the disk, and a run pays one fsync per checkpoint, not per round."""
    from zofl.core import run as run_module
    from zofl.inprocess import run_inprocess
    from zofl.results import ResultsWriter

    calls = []
    write_round, save = ResultsWriter.write_round, run_module.save_checkpoint

    def recording_write(self, record, sync=True):
        calls.append(("record", record["round"], sync))
        return write_round(self, record, sync)

    def recording_save(run_dir, k, *args, **kwargs):
        calls.append(("checkpoint", k, (run_dir / "rounds.jsonl").read_text().count("\n")))
        return save(run_dir, k, *args, **kwargs)

    monkeypatch.setattr(ResultsWriter, "write_round", recording_write)
    monkeypatch.setattr(run_module, "save_checkpoint", recording_save)
    run_inprocess({"num-rounds": 7, "num-clients": 3, "checkpoint-every": 3, "output-dir": str(tmp_path),
                   "run-name": "r"}, workers=0)
    assert [c for c in calls if c[0] == "checkpoint" or c[2]] == [
        ("record", 3, True), ("checkpoint", 3, 4), ("record", 6, True), ("checkpoint", 6, 7), ("record", 7, True),
        ("checkpoint", 7, 8)]
    assert [c[1] for c in calls if c[0] == "record" and not c[2]] == [0, 1, 2, 4, 5]


def _seen_by(uid: int | None, fn, *args):
    """``fn(*args)`` (its answer JSON), run as user ``uid`` (a forked child that drops to it), or here."""
    if uid is None:
        return fn(*args)
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        try:
            os.close(r)
            os.setgid(uid)
            os.setuid(uid)
            os.write(w, json.dumps(fn(*args)).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read()
    os.waitpid(child, 0)
    return json.loads(out)


def _holders_seen_by(uid: int | None, st) -> tuple[int, ...]:
    """zofl.results._processes_holding(st), run as user ``uid``, or here."""
    from zofl.results import _processes_holding

    return tuple(_seen_by(uid, _processes_holding, st))


def test_a_lock_holder_is_alive_while_it_runs_not_once_it_ended_or_is_a_zombie(tmp_path):
    """_alive (whether a lock's holder still holds it): this process runs, and so does one of another user's whose
    signals the asker may not send (as root, asked as 'nobody'), and one whose name reads like a zombie's state
    (its /proc stat line "pid (x) Z (y) S ...": the state follows the last parenthesis); a child that exited
    unreaped (a zombie: its descriptors, and locks, are gone) and one reaped do not."""
    import shutil
    import time

    from zofl.results import _alive

    named = tmp_path / "x) Z (y"
    named.symlink_to(shutil.which("sleep"))
    sleeper = subprocess.Popen([str(named), "60"])
    try:
        end = time.monotonic() + 60
        while Path(f"/proc/{sleeper.pid}/comm").read_text().strip() != named.name and time.monotonic() < end:
            time.sleep(0.01)  # until the exec has given it its name
        assert _alive(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait()
    child = subprocess.Popen([sys.executable, "-c", ""])
    end = time.monotonic() + 60
    while time.monotonic() < end:  # until the child has exited (a zombie until it is waited for)
        state = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if state == "Z":
            break
        time.sleep(0.01)
    assert state == "Z" and not _alive(child.pid) and _alive(os.getpid())
    child.wait()
    assert not _alive(child.pid)
    if os.geteuid() == 0:
        assert _seen_by(65534, _alive, os.getpid()) is True


def test_the_processes_still_holding_a_lock_file_are_found_by_pid(tmp_path):
    """_processes_holding (whom busy_message tells to stop): the pids of the other processes with the file open, in
    order, not this one; past the processes whose descriptors it may not read (another user's: as root, the search
    runs as 'nobody', the holders too); () for a file no other process holds."""
    lock, other = tmp_path / ".lock", tmp_path / "other"
    lock.write_text("")
    other.write_text("")
    tmp_path.chmod(0o755)
    nobody = 65534 if os.geteuid() == 0 else None
    here = open(lock)  # noqa: SIM115 - this process holds it too: never named
    holders = []
    try:
        for _ in range(2):
            with open(lock) as f:
                holders.append(subprocess.Popen(["sleep", "60"], stdin=f, user=nobody, group=nobody))
        assert _holders_seen_by(nobody, os.stat(lock)) == tuple(sorted(p.pid for p in holders))
        assert _holders_seen_by(nobody, os.stat(other)) == ()
    finally:
        here.close()
        for p in holders:
            p.kill()
            p.wait()


@pytest.mark.parametrize("clients", [["1"], {"1": 5}, {"1": ["ab"]}, {"a": "fp"}, {"1": ""},
                                     {"1": "x" * (MAX_FINGERPRINT + 1)}])
def test_a_resumes_stored_clients_must_be_partition_ids_and_fingerprints(tmp_path, clients):
    """data.json's "clients" ({partition: fingerprint}): anything else is refused by name, not used or raised."""
    from types import SimpleNamespace

    check = ResultsWriter._stored_clients
    path, folder = tmp_path / "data.json", SimpleNamespace(dir=tmp_path)
    good = {"0": "f", "12": "x" * MAX_FINGERPRINT}
    assert check(folder, {"clients": good}, path) == good and check(folder, {}, path) == {}
    with pytest.raises(RunFolderError, match=r"data\.json's \"clients\" is not an object of partition ids"):
        check(folder, {"clients": clients}, path)


def test_a_record_a_resume_reads_back_names_its_first_field_of_the_wrong_type():
    """record_problem: every field of ROUND_FIELDS after 'round' and 'sampled' (test_acc the first) and the
    summary's counts must be numbers or null, 'round_failed' true or false; the refusal names the field."""
    from zofl.core.record import COUNT_FIELDS, ROUND_FIELDS
    from zofl.results import record_problem

    good = {**{k: 0 for k in ROUND_FIELDS + COUNT_FIELDS}, "round": 1, "sampled": [0, 2], "round_failed": False}
    assert record_problem(good) is None and record_problem({**good, "test_acc": None}) is None
    assert record_problem({**good, "test_acc": "0.5"}) == "'test_acc' is '0.5', not a number"
    assert record_problem({**good, "late": [1]}) == "'late' is [1], not a number"
    assert record_problem({**good, "round_failed": "yes"}) == "'round_failed' is 'yes', not true or false"


def test_a_resumes_config_json_is_read_without_blocking_and_its_checkpoint_every_and_keys_checked(tmp_path):
    """config.json of the run to resume: a FIFO is refused at once (opened without O_NONBLOCK it would block for
    ever); text that is no JSON names the file; 'checkpoint-every' (0 when absent) an integer >= 0; a key only one
    side has counts as a difference."""
    import signal

    d, _, config = _finished(tmp_path)
    stored = json.loads(config)

    def resume(text=None, fifo=False):
        (d / "config.json").unlink()
        if fifo:
            os.mkfifo(d / "config.json")
        else:
            (d / "config.json").write_text(text)
        with pytest.raises(RunFolderError) as refused:
            _run(tmp_path, resume=True)
        return str(refused.value)

    def hung(*_):
        raise TimeoutError("the resume blocked on a FIFO")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    try:
        assert "config.json" in resume(fifo=True)
        with pytest.raises(RunFolderError, match=r"config\.json is not a regular file"):
            read_text(d / "config.json")  # what reads config.json and data.json
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert re.search(rf"cannot resume {re.escape(str(d))}: {re.escape(str(d / 'config.json'))} is not readable \(",
                     resume("{not json"))
    assert "'checkpoint-every' = -1, not an integer >= 0" in resume(json.dumps({**stored, "checkpoint-every": -1}))
    assert "differs in ['extra-key']" in resume(json.dumps({**stored, "extra-key": 1}))
    without = {k: v for k, v in stored.items() if k != "checkpoint-every"}  # read as 0, a resumable change
    assert "differs in ['seed']" in resume(json.dumps(without | {"seed": 9}))
