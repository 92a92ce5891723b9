"""The zofl command without Flower runs: data conversion, plot, argument errors (the Flower runs of
``zofl run`` are in test_flower_e2e.py)."""
import gzip
import os
import pickle
import re
from pathlib import Path

import numpy as np
import pytest

from zofl.cli import main
from zofl.tasks.data import _load_pooled, load_pooled


def _idx(path, arr, gz):
    header = bytes([0, 0, 8, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    (gzip.open if gz else open)(path, "wb").write(header + arr.astype(np.uint8).tobytes())


def test_data_get_converts_idx_files(tmp_path, capsys):
    rng = np.random.default_rng(0)
    src = tmp_path / "originals" / "raw"
    src.mkdir(parents=True)
    parts = {"train-images-idx3-ubyte": rng.integers(0, 255, (30, 28, 28)),
             "train-labels-idx1-ubyte": np.arange(30) % 10,
             "t10k-images-idx3-ubyte": rng.integers(0, 255, (10, 28, 28)), "t10k-labels-idx1-ubyte": np.arange(10) % 10}
    for i, (stem, arr) in enumerate(parts.items()):
        _idx(src / (stem + (".gz" if i % 2 else "")), arr, gz=bool(i % 2))
    assert main(["data", "get", "fashion_mnist", "--data-dir", str(tmp_path / "d"), "--from",
                 str(tmp_path / "originals")]) == 0
    assert "40 examples, 784 features, 10 classes" in capsys.readouterr().out
    with np.load(tmp_path / "d" / "fashion_mnist.npz") as f:
        np.testing.assert_array_equal(f["x_train"], parts["train-images-idx3-ubyte"])
    # a truncated IDX file is named
    raw = (src / "t10k-images-idx3-ubyte").read_bytes()
    (src / "t10k-images-idx3-ubyte").write_bytes(raw[:-100])
    assert main(["data", "get", "mnist", "--data-dir", str(tmp_path / "d"), "--from", str(tmp_path / "originals")]) == 2
    assert "t10k-images-idx3-ubyte: holds" in capsys.readouterr().err


def test_data_get_converts_cifar_pickles_and_covtype(tmp_path, capsys):
    rng = np.random.default_rng(1)
    src = tmp_path / "cifar-10-batches-py"
    src.mkdir()
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 255, (4, 3072), dtype=np.uint8), b"labels": list(range(4))}
        pickle.dump(batch, open(src / name, "wb"))
    assert main(["data", "get", "cifar10", "--data-dir", str(tmp_path / "d"), "--from", str(tmp_path)]) == 0
    with np.load(tmp_path / "d" / "cifar10.npz") as f:
        assert f["x_train"].shape == (20, 32, 32, 3) and f["x_test"].shape == (4, 32, 32, 3)
        first = pickle.load(open(src / "data_batch_1", "rb"), encoding="bytes")[b"data"][0]
        np.testing.assert_array_equal(f["x_train"][0][..., 0].reshape(-1), first[:1024])  # red plane first
    table = np.hstack([rng.integers(0, 100, (21, 54)), (np.arange(21) % 7 + 1)[:, None]])
    np.savetxt(tmp_path / "covtype.data", table, fmt="%d", delimiter=",")
    assert main(["data", "get", "covtype", "--data-dir", str(tmp_path / "d"), "--from",
                 str(tmp_path / "covtype.data")]) == 0
    _load_pooled.cache_clear()
    assert load_pooled("covtype", str(tmp_path / "d")).num_classes == 7


def test_data_get_from_reads_original_files_bounded_and_runs_no_pickled_code(tmp_path, capsys, monkeypatch):
    """Issue 47: `--from`'s readers took any file whole: a FIFO named like an IDX file hung, a gzip bomb
    unpacked without end, a CIFAR "batch" pickle could run any callable, the search went through link loops.
    Each is now one line, exit 2, nothing written."""
    import os

    from zofl.tasks import data

    def refused(name, source, match):
        assert main(["data", "get", name, "--data-dir", str(tmp_path / "d"), "--from", str(source)]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and re.search(match, err), err
        assert not (tmp_path / "d" / f"{name}.npz").exists()

    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "train-images-idx3-ubyte")  # opened blocking, this waited for a writer for ever
    refused("mnist", fifo, r"train-images-idx3-ubyte: is a FIFO \(named pipe\), not a regular file")
    bomb = tmp_path / "bomb"
    bomb.mkdir()
    monkeypatch.setattr(data, "SOURCE_CAP", 1000)
    _idx(bomb / "train-images-idx3-ubyte.gz", np.zeros((10, 28, 28)), gz=True)  # 7,856 bytes unpacked, ~60 packed
    refused("mnist", bomb, r"train-images-idx3-ubyte.gz: unpacks to more than 1,000 bytes")
    monkeypatch.undo()
    evil = tmp_path / "cifar-10-batches-py"
    evil.mkdir()
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    pickle.dump({b"data": Payload(), b"labels": [0]}, open(evil / "data_batch_1", "wb"))
    refused("cifar10", tmp_path / "cifar-10-batches-py", r"posix.system is not part of a CIFAR-10 batch")
    assert not marker.exists()
    loop = tmp_path / "loop"
    (loop / "a").mkdir(parents=True)
    (loop / "a" / "back").symlink_to(loop)  # a link loop: never followed
    (loop / "a" / "b" / "c" / "d").mkdir(parents=True)
    _idx(loop / "a" / "b" / "c" / "d" / "train-images-idx3-ubyte", np.zeros((2, 28, 28)), gz=False)  # 4 below
    refused("mnist", loop, r"none of \['train-images-idx3-ubyte', 'train-images-idx3-ubyte.gz'\] found \(in it or up "
                           r"to 3 folders below\)")


def test_plot_and_argument_errors(tmp_path, capsys):
    from zofl.inprocess import run_inprocess

    for name in ("a", "b"):
        run_inprocess({"num-rounds": 2, "num-clients": 3, "output-dir": str(tmp_path), "run-name": name,
                       "strategy": "fedavg" if name == "b" else "zohfl"}, workers=0)
    out = tmp_path / "p.png"
    assert main(["plot", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000
    assert main(["plot", str(tmp_path)]) == 2 and "not a run folder" in capsys.readouterr().err
    assert main(["run", "--set", "alpha"]) == 2 and "expected KEY=VALUE" in capsys.readouterr().err
    # a resume with nothing to run is refused here, before any SuperLink starts (exit 2)
    assert main(["run", "--rounds", "2", "--clients", "3", "--set", f'output-dir="{tmp_path}"', "run-name=a",
                 "resume=true"]) == 2
    assert "nothing to resume" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["data", "get", "imagenet"])


def test_progress_reads_only_whole_records(tmp_path):
    import json

    from zofl.cli import _Progress

    f = tmp_path / "rounds.jsonl"
    f.write_text(json.dumps({"round": 0, "test_acc": 0.5}) + "\n" + '{"round": 1, "test_')  # being written
    p = _Progress(f, 3, quiet=True)
    p.poll()
    assert (p.seen, p.last["round"]) == (1, 0)
    f.write_text(json.dumps({"round": 0, "test_acc": 0.5}) + "\n" + json.dumps({"round": 1, "test_acc": 0.6}) + "\n")
    p.poll()  # from where the last poll stopped: the file only grows
    assert (p.seen, p.last["round"], p.last["test_acc"]) == (2, 1, 0.6)


def test_progress_time_left_counts_the_rounds_after_the_first(tmp_path, monkeypatch, capsys):
    """Issue 47: right after Ray's start the bar said 1/5 rounds [00:35<02:20] for a run that ended a second
    later (tqdm's rate counted the first round, which pays for the start). The time left is now from the
    rounds after the first: unknown ('?') until two are in, then (left) x (their mean time)."""
    import json

    import zofl.cli
    from zofl.cli import _Progress

    now = [100.0]
    monkeypatch.setattr(zofl.cli.time, "monotonic", lambda: now[0])
    f = tmp_path / "rounds.jsonl"
    p = _Progress(f, 5, quiet=False, unit="rounds", tty=True)
    for k, t in ((0, 100.0), (1, 135.0), (2, 136.0), (3, 137.0)):  # round 1 at 35 s, then 1 s each
        now[0] = t
        f.write_text("".join(json.dumps({"round": j}) + "\n" for j in range(k + 1)))
        p.poll()
        if k == 1:
            assert p.rate() == 0.0  # '?': one round says nothing of the next
    assert p.rate() == pytest.approx(1.0) and p.rate(now=139.0) == pytest.approx(0.5)
    meter = p.bar.format_meter(**{**p.bar.format_dict, "elapsed": 37.0})
    assert "3/5 rounds [00:37<00:02]" in meter, meter
    p.close()
    drawn = capsys.readouterr().out  # as drawn: after round 1, time left unknown; after round 3, 2 s
    assert re.search(r"1/5 rounds \[\d\d:\d\d<\?\]", drawn), drawn
    assert re.search(r"3/5 rounds \[\d\d:\d\d<00:02\]", drawn), drawn

def test_progress_follows_a_resume_that_replaces_the_records(tmp_path, capsys):
    """A resume rewrites rounds.jsonl (the records up to its checkpoint, in a new file) and runs the rounds
    after it again. The progress, reading from where it stopped, must read the new file from its start and
    count each round once: 10/10 at the end, never more (reading on at the old offset, mid-line, it stalled
    before 10/10)."""
    import json
    import os

    from zofl.cli import _Progress

    f = tmp_path / "rounds.jsonl"

    def records(n, acc=0.5):
        return "".join(json.dumps({"round": k, "test_acc": acc, "test_loss": 1.0}) + "\n" for k in range(n + 1))

    f.write_text(records(7))
    p = _Progress(f, 10, quiet=False, unit="rounds", tty=False)
    p.poll()
    assert p.done == 7
    tmp = tmp_path / ".rounds.jsonl.tmp"
    tmp.write_text(records(3, acc=0.25))  # the resume keeps its checkpoint's records 0..3, in a new file
    os.replace(tmp, f)
    p.poll()
    assert p.done == 7 and p.last["test_acc"] == 0.25  # rounds 1-3 again: no progress, nothing counted twice
    f.write_text(records(10, acc=0.25))
    p.close()
    out = capsys.readouterr().out
    assert p.done == 10 and out.count("zofl run: 10/10 rounds") == 1 and "11/10" not in out, out


def test_progress_off_a_terminal_is_plain_lines_in_the_summarys_unit(tmp_path, capsys):
    """Redirected output gets a line every tenth of the run and no carriage returns; FedNest's bar counts the
    communication rounds its summary gives in brackets, AFBO's the server steps."""
    import json

    from zofl.cli import _Progress, progress_unit
    from zofl.config import parse_config

    f = tmp_path / "rounds.jsonl"
    f.write_text("".join(json.dumps({"round": k, "test_acc": 0.5, "test_loss": 1.0}) + "\n" for k in range(21)))
    p = _Progress(f, 20, quiet=False, unit="rounds", tty=False)
    p.close()
    out = capsys.readouterr().out
    assert "\r" not in out and out.count("zofl run: ") == 10
    assert "zofl run: 20/20 rounds, round 20: test acc 0.5000" in out
    fednest = parse_config({"strategy": "fednest", "task": "hyper-cleaning"})
    assert progress_unit(fednest, 220) == "communication rounds" and progress_unit(fednest, 20) == "rounds"
    afbo = parse_config({"strategy": "afbo", "engine": "async", "task": "hyper-cleaning"})
    assert progress_unit(afbo, 120) == "server steps"


# -- issue 30: one-line errors, exit 2, before any work ------------------------------------------

def _refused(capsys, argv, match):
    """``zofl ARGV`` exits 2 with one line on stderr matching ``match`` (argparse's exit too)."""
    import re

    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, (code, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert re.search(match, err), err


def test_cpus_per_client_below_one_is_refused_by_the_parser(capsys):
    """--cpus-per-client 0 got through to Flower, which failed after ~30 s."""
    _refused(capsys, ["run", "--cpus-per-client", "0"], r"^zofl run: error: argument --cpus-per-client: expected an "
                                                       r"integer in \[1, \d+\]")
    _refused(capsys, ["run", "--cpus-per-client", "100000"], "this machine's CPUs")
    _refused(capsys, ["run", "--rounds", "many"], "^zofl run: error: argument --rounds: invalid int value")


def test_ray_cpus_reaches_flower_as_init_args_and_is_checked_first(tmp_path, monkeypatch, capsys):
    """--ray-cpus N: Ray's CPU count (Flower's init-args-num-cpus) in the federation config, so that N /
    cpus-per-client ClientApps run at once; bad values, or fewer than one client's CPUs, exit 2 at once."""
    _refused(capsys, ["run", "--ray-cpus", "0"], r"^zofl run: error: argument --ray-cpus: expected an integer in "
                                                 r"\[1, 1024\]")
    _refused(capsys, ["run", "--ray-cpus", "x"], "argument --ray-cpus")
    _refused(capsys, ["run", "--ray-cpus", "1", "--cpus-per-client", "2"] if os.cpu_count() >= 2 else
             ["run", "--ray-cpus", "2000"], "more than --ray-cpus 1|expected an integer")
    seen = []
    _fake_flower(monkeypatch, ACCEPT + "; raise SystemExit(3)")
    import zofl.launch

    real = zofl.launch.flwr_run_command
    monkeypatch.setattr(zofl.launch, "flwr_run_command", lambda *a, **k: seen.append(k) or real(*a, **k))
    main(["run", "--quiet", "--ray-cpus", "10", "--set", f'output-dir="{tmp_path}"', "num-clients=3", "num-rounds=1"])
    assert seen and seen[0]["federation_config"].split() == ["num-supernodes=3", "client-resources-num-cpus=1",
                                                             "init-args-num-cpus=10"]
    main(["run", "--quiet", "--set", f'output-dir="{tmp_path}"', 'run-name="b"', "num-clients=3", "num-rounds=1"])
    assert "init-args" not in seen[1]["federation_config"]  # default: Ray counts the machine's CPUs


def test_a_set_value_of_several_toml_lines_is_refused(capsys):
    """--set 'seed=1\nnum-rounds = 3' set num-rounds without naming it."""
    from zofl.config import parse_set

    with pytest.raises(ValueError, match="more than one TOML line"):
        parse_set(["seed=1\nnum-rounds = 3"])
    assert parse_set(["seed=1", "dataset=mnist", 'data-dir="/x"']) == {"seed": 1, "dataset": "mnist", "data-dir": "/x"}


def _run_folder(path, lines, config=None):
    path.mkdir(parents=True)
    (path / "rounds.jsonl").write_bytes(lines)
    if config is not None:
        (path / "config.json").write_bytes(config)
    return str(path)


@pytest.mark.parametrize("make, match", [
    (lambda p: (p.mkdir(), str(p))[1], r"holds no rounds.jsonl \(not a run folder\)"),
    (lambda p: _run_folder(p, b""), r"rounds.jsonl: no round records \(nothing to plot\)"),
    (lambda p: _run_folder(p, b"\n\n"), "no round records"),
    (lambda p: _run_folder(p, bytes(range(256)) * 4), r"rounds.jsonl: not text \(binary or corrupt\)"),
    (lambda p: _run_folder(p, b'{"round": 0}\n[1, 2]\n'), r"rounds.jsonl, line 2: not a round record"),
    (lambda p: _run_folder(p, b'{"round": "0", "test_acc": 0.1}\n'), r"rounds.jsonl, record 1: not a round record"),
    (lambda p: _run_folder(p, b'{"round": 0, "test_acc": "high"}\n'), "record 1: not a round record"),
    (lambda p: _run_folder(p, b'{"round": 0, "test_acc": 0.5}\n', b"\x00\xff"), r"config.json: not a run's"),
    (lambda p: _run_folder(p, b'{"round": 0, "test_acc": 0.5}\n', b"[1]"), r"config.json: not a run's"),
    (lambda p: (p.write_text("x"), str(p))[1], "is not a folder"),
])
def test_plot_refuses_folders_that_hold_no_run(tmp_path, capsys, make, match):
    """An empty folder's plot was an empty PNG and exit 0; a binary or corrupt one was a traceback."""
    out = tmp_path / "p.png"
    _refused(capsys, ["plot", make(tmp_path / "run"), "--out", str(out)], "^zofl plot: error: .*" + match)
    assert not out.exists()


def test_plot_refuses_an_output_it_cannot_write_before_reading_runs(tmp_path, capsys):
    run = _run_folder(tmp_path / "run", b'{"round": 0, "test_acc": 0.5, "test_loss": 1.0}\n')
    _refused(capsys, ["plot", run, "--out", str(tmp_path)], "is a folder")
    _refused(capsys, ["plot", run, "--out", str(tmp_path / "no" / "p.png")], "no folder")
    _refused(capsys, ["plot", run, "--out", str(tmp_path / "p.docx")], "unknown image type '.docx'")
    assert main(["plot", run, "--out", str(tmp_path / "p.png")]) == 0 and (tmp_path / "p.png").stat().st_size > 1000


def test_data_get_from_a_file_that_is_no_npz_says_what_it_is(tmp_path, capsys):
    (tmp_path / "x.npz").write_text("just text")
    _refused(capsys, ["data", "get", "mnist", "--data-dir", str(tmp_path / "d"), "--from", str(tmp_path / "x.npz")],
             r"x.npz: is not a .npz file \(a zip archive")
    (tmp_path / "cifar-10-batches-py").mkdir()
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (tmp_path / "cifar-10-batches-py" / name).write_bytes(b"garbage")
    _refused(capsys, ["data", "get", "cifar10", "--data-dir", str(tmp_path / "d"), "--from", str(tmp_path)],
             r"--from .*: not cifar10's original files \(UnpicklingError")


# -- zofl run's outcome: this run's own files decide it (issue 30, item 3) -------------------------------
# Flower is replaced by a stand-in whose "flwr run" is a short script: what decides the outcome is the
# CLI's reading of the run folder, a matter of logic; tests/test_flower_e2e.py runs the real thing.
# the ServerApp's acceptance of the folder: config.json replaced atomically (ResultsWriter.accept)
ACCEPT = ("import os, sys; d = sys.argv[1]; open(d + '/.c.tmp', 'w').write(open(d + '/config.json').read()); "
          "os.replace(d + '/.c.tmp', d + '/config.json')")


def _fake_superlink(monkeypatch, popen):
    """``zofl.launch.local_superlink`` replaced by a stand-in whose ``popen(cmd, **kwargs)`` is ``popen``."""
    import contextlib

    import zofl.launch

    class Link:
        def popen(self, cmd, **kwargs):
            return popen(cmd, **kwargs)

        def stop_run(self, run_id):
            return False

    @contextlib.contextmanager
    def fake(*args, **kwargs):
        yield Link()

    monkeypatch.setattr(zofl.launch, "local_superlink", fake)


def _fake_flower(monkeypatch, script: str):
    """``zofl.launch.local_superlink`` whose ``popen`` runs ``python -c script OUT`` (OUT: the run folder,
    read from the run-config in the command) and prints what it is told to."""
    import subprocess
    import sys

    def popen(cmd, **kwargs):
        rc = cmd[cmd.index("--run-config") + 1]
        out = dict(kv.split("=", 1) for kv in rc.split(" ") if "=" in kv)
        folder = f"{out['output-dir'].strip(chr(34))}/{out['run-name'].strip(chr(34))}"
        return subprocess.Popen([sys.executable, "-c", script, folder], **kwargs)

    _fake_superlink(monkeypatch, popen)


def _finished_run(tmp_path):
    from zofl.inprocess import run_inprocess

    d, _ = run_inprocess({"num-rounds": 2, "num-clients": 3, "output-dir": str(tmp_path), "run-name": "r"}, workers=0)
    (d / "flwr.log").write_text("the first run's log\n")
    return d


def _zofl_run(*keys):
    return main(["run", "--quiet", "--set", *keys])


def test_a_resume_whose_flower_run_ends_without_its_summary_failed(tmp_path, monkeypatch, capsys):
    """Extending a finished run whose Flower run then dies: the earlier run's summary.json says
    nothing about this one (it exited 0 and printed "done:" before)."""
    d = _finished_run(tmp_path)
    _fake_flower(monkeypatch, ACCEPT + "; print('Flower: the SuperLink went away')")
    rc = _zofl_run(f'output-dir="{tmp_path}"', 'run-name="r"', "num-clients=3", "num-rounds=5", "resume=true")
    err = capsys.readouterr().err
    assert rc == 1 and "the run failed; Flower's output is in " + str(d / "flwr.log") in err, err
    assert "the SuperLink went away" in (d / "flwr.log").read_text()  # this run was accepted: its log is the folder's


def test_a_run_its_serverapp_refused_leaves_the_earlier_runs_files_alone(tmp_path, monkeypatch, capsys):
    """The ServerApp refused the folder (another process held it): exit 1, and the earlier run's summary
    and flwr.log stay as they were; Flower's output goes to a file of its own."""
    d = _finished_run(tmp_path)
    before = {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}
    _fake_flower(monkeypatch, "print('Invalid run-config, nothing was run: in use by another run')")
    rc = _zofl_run(f'output-dir="{tmp_path}"', 'run-name="r"', "num-clients=3", "num-rounds=5", "resume=true")
    err = capsys.readouterr().err
    assert rc == 1 and "before its ServerApp accepted" in err and "in use by another run" in err, err
    assert {p.name: p.read_bytes() for p in d.iterdir() if p.is_file() and p.name != ".cli.lock"} == before


def test_a_run_that_writes_its_summary_succeeds(tmp_path, monkeypatch, capsys):
    d = _finished_run(tmp_path)
    summary = (d / "summary.json").read_text()
    _fake_flower(monkeypatch, ACCEPT + f"; open(d + '/.s', 'w').write({summary!r}); os.replace(d + '/.s', "
                 "d + '/summary.json')")
    rc = _zofl_run(f'output-dir="{tmp_path}"', 'run-name="r"', "num-clients=3", "num-rounds=5", "resume=true")
    assert rc == 0, capsys.readouterr().err


# The ServerApp's own code on the in-process Grid, in a process of its own, in place of `flwr run` on a
# SuperLink with Ray: what it prints (its summary, a traceback) reaches ``zofl run`` as Flower's stream does.
SERVERAPP = ("import sys, tomllib; from zofl.inprocess import run_inprocess; "
             "run_inprocess(tomllib.loads(chr(10).join(sys.argv[1].split(' '))), workers=0)")


def _serverapp_in_process(monkeypatch):
    """``zofl.launch.local_superlink`` whose ``popen`` runs the command's run-config with ``run_inprocess``."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent

    def popen(cmd, **kwargs):
        assert cmd[1:5] == ["run", str(root), "zofl", "--stream"], cmd  # `flwr run APP zofl --stream`
        return subprocess.Popen([sys.executable, "-c", SERVERAPP, cmd[cmd.index("--run-config") + 1]],
                                cwd=root, **kwargs)

    _fake_superlink(monkeypatch, popen)


def test_zofl_run_exit_codes(tmp_path, monkeypatch, capsys):
    """A bad key: one line naming it, exit 2, before anything starts. A run that fails inside its ServerApp,
    or that the failure policy stops: exit 1 with the error (plain ``flwr run`` exits 0 for both). The
    ServerApp runs on the in-process Grid here; the real Flower runs are in test_flower_e2e.py (there a
    failed run's real output is shown to give its error to ``_error_lines``)."""
    _fake_flower(monkeypatch, "raise SystemExit('must not start')")
    assert main(["run", "--set", "alpha=0"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["zofl run: error: run-config key 'alpha' must be a number > 0, got 0.0"]
    _serverapp_in_process(monkeypatch)
    rc = main(["run", "--rounds", "2", "--clients", "3", "--quiet", "--set", 'task="tests.plugin_task:FailingTask"',
               f'output-dir="{tmp_path}"', 'run-name="fails"'])
    out, err = capsys.readouterr()
    assert rc == 1, out + err
    assert "zofl run: the run failed" in err and "Flower's output is in " in err, err
    assert "RuntimeError: FailingTask: a deliberate failure inside the run" in err, err
    # no client ever answers: the failure policy stops the run, exit 1, its summary says why
    rc = main(["run", "--rounds", "2", "--clients", "2", "--quiet", "--set", "crash-prob=1.0",
               f'output-dir="{tmp_path}"', 'run-name="dead"'])
    out, err = capsys.readouterr()
    assert rc == 1, out + err
    assert "FAILED: the failure policy stopped the run: 2 rounds had fewer than min-replies" in out, out
    assert "clients with failures (rounds): " in out
    assert out.strip().splitlines()[-1] == f"  results: {tmp_path / 'dead'}"  # the summary, printed last
    assert "zofl run: the run failed: the failure policy stopped the run" in err, err


def test_a_second_zofl_run_of_the_same_run_name_is_refused_at_once(tmp_path, monkeypatch, capsys):
    """While one ``zofl run`` holds a run-name, a second is refused before it starts anything (before,
    its ServerApp was refused after Ray's start-up and it exited 0 with the first run's results)."""
    import fcntl
    import os

    d = tmp_path / "r"
    d.mkdir()
    fd = os.open(d / ".cli.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, b"4242")
    _fake_flower(monkeypatch, "raise SystemExit('must not start')")
    try:
        rc = _zofl_run(f'output-dir="{tmp_path}"', 'run-name="r"', "num-clients=3")
    finally:
        os.close(fd)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == [f"zofl run: error: run-config key 'run-name': {d} is in use by another zofl run "
                               f"(pid 4242); wait for it to end, stop it, or choose another run-name"], err


@pytest.mark.parametrize("tamper", ["checkpoint-round", "record-fields"])
def test_a_tampered_resume_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys, tamper):
    """A checkpoint edited to round -3, a record without its fields: exit 2 naming the file, and the
    folder as it was (before: rounds.jsonl emptied, a ValueError / KeyError, exit 0)."""
    import json

    d = _finished_run(tmp_path)
    if tamper == "checkpoint-round":
        with np.load(d / "checkpoint.npz") as ck:
            arrays = {k: ck[k] for k in ck.files}
        arrays["round"] = np.array(-3)
        np.savez(d / "checkpoint.npz", **arrays)
    else:
        lines = (d / "rounds.jsonl").read_text().splitlines()
        lines[1] = json.dumps({"round": 1})
        (d / "rounds.jsonl").write_text("\n".join(lines) + "\n")
    before = {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}
    _fake_flower(monkeypatch, "raise SystemExit('must not start')")
    capsys.readouterr()
    rc = _zofl_run(f'output-dir="{tmp_path}"', 'run-name="r"', "num-clients=3", "num-rounds=5", "resume=true")
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("zofl run")]
    assert rc == 2 and len(err) == 1 and err[0].startswith("zofl run: error: ") and str(d) in err[0], err
    assert {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()} == before


def test_zofl_run_warns_when_real_sleeps_meet_fewer_clientapps_at_once_than_clients():
    """Flower's simulation engine runs at most min(32, cores + 4) ClientApps at once, Ray at most ray-cpus /
    cpus-per-client: with real sleeps and fewer than num-clients at once, clients queue (the wall-clock study)."""
    from zofl.cli import concurrency_warning
    from zofl.config import parse_config

    sleeps = parse_config({"num-clients": 10, "step-time-s": 0.2})
    text = concurrency_warning(sleeps, 10, 1, cores=2)  # 6 engine threads on 2 cores
    assert text and "at most 6 of the 10 ClientApps" in text
    assert "at most 2 of the 10" in concurrency_warning(sleeps, None, 1, cores=2)  # Ray: the machine's 2 CPUs
    assert "at most 5 of the 10" in concurrency_warning(sleeps, 10, 2, cores=8)  # Ray: 10 CPUs / 2 per client
    assert concurrency_warning(sleeps, 10, 1, cores=6) is None  # 10 threads, 10 Ray CPUs
    assert concurrency_warning(parse_config({"num-clients": 10}), 1, 1, cores=1) is None  # no real sleeps


def test_zofl_compare_help_names_the_command_the_user_typed(capsys):
    with pytest.raises(SystemExit) as done:
        main(["compare", "--help"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("usage: zofl compare ")


def test_flowers_final_results_show_the_recorded_test_metrics(tmp_path, caplog):
    """Flower's "Final results" (its server-side evaluation) hold each round's recorded test metrics, not {}."""
    import logging

    from zofl.inprocess import run_inprocess
    from zofl.results import read_rounds

    caplog.set_level(logging.INFO, logger="flwr")
    d, _ = run_inprocess({"strategy": "fedavg", "num-rounds": 2, "num-clients": 3, "beta": 1.0, "tau": 1.0,
                          "output-dir": str(tmp_path), "run-name": "r", "checkpoint-every": 0}, workers=0)
    acc = read_rounds(d)[-1]["test_acc"]
    text = caplog.text
    assert "ServerApp-side Evaluate Metrics" in text and f"'test_acc': '{acc:.4e}'" in text, text[-1500:]



def test_run_out_is_the_output_dir_made_absolute(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from zofl.cli import _run_config

    monkeypatch.chdir(tmp_path)
    args = SimpleNamespace(set=[], strategy=None, rounds=None, clients=None, out="runs")
    assert _run_config(args)["output-dir"] == str(tmp_path / "runs")
    args.set = ["output-dir=/elsewhere"]
    with pytest.raises(ValueError, match="--out .* and --set output-dir='/elsewhere' disagree"):
        _run_config(args)


def test_deploy_local_writes_its_results_under_its_folder(tmp_path, monkeypatch, capsys):
    """`python -m zofl.deploy local DIR`: the run-config's output-dir defaults to DIR/results (the deployment
    itself is replaced here: this is about where results go; tests/test_deploy.py runs real deployments)."""
    import contextlib
    import json

    import zofl.deploy as deploy

    seen = {}

    @contextlib.contextmanager
    def fake_deployment(workdir, n, tls=True):
        class Dep:
            def run(self, run_config, capture=False):
                seen.update(run_config)
                folder = Path(run_config["output-dir"]) / run_config["run-name"]
                folder.mkdir(parents=True)  # as an accepted run that finished writes them
                (folder / "config.json").write_text(json.dumps(run_config))
                (folder / "summary.json").write_text(json.dumps({"failure": None, "results_dir": str(folder)}))
                return SimpleNamespace(returncode=0)
        yield Dep()

    from pathlib import Path
    from types import SimpleNamespace

    monkeypatch.setattr(deploy, "local_deployment", fake_deployment)
    assert deploy.main(["local", str(tmp_path / "dep"), "--run-config", "num-rounds=1"]) == 0
    assert seen["output-dir"] == str(tmp_path / "dep" / "results")
    assert f"results in {tmp_path / 'dep' / 'results'}" in capsys.readouterr().out


def test_a_task_of_the_users_is_found_from_their_folder(tmp_path, monkeypatch):
    """`zofl run --set task=mymodels:TASK` in the model's folder, a relative PYTHONPATH, or the task as a file:
    the folders every process of the run needs are absolute (the real run: tests/test_flower_e2e.py)."""
    from zofl.cli import user_task_path

    (tmp_path / "mymodels.py").write_text("")
    (tmp_path / "lib").mkdir()
    monkeypatch.delenv("PYTHONPATH", raising=False)
    assert user_task_path({"task": "mymodels:TASK"}, cwd=str(tmp_path)) == [str(tmp_path)]
    assert user_task_path({"task": "softmax"}, cwd=str(tmp_path)) == []  # the folder is added only for its task
    monkeypatch.setenv("PYTHONPATH", "lib")
    assert user_task_path({"task": "other:TASK"}, cwd=str(tmp_path)) == [str(tmp_path / "lib")]
    cfg = {"task": "mymodels.py:TASK"}
    assert user_task_path(cfg, cwd=str(tmp_path)) == [str(tmp_path / "lib")] and \
        cfg["task"] == f"{tmp_path / 'mymodels.py'}:TASK"


def test_a_task_given_as_a_file_runs(tmp_path):
    from zofl.config import ConfigError
    from zofl.inprocess import run_inprocess
    from zofl.setup import prepare

    (tmp_path / "mytask.py").write_text("from zofl.tasks import SoftmaxTask\n\n\nclass Mine(SoftmaxTask):\n    pass\n")
    d, x = run_inprocess({"task": f"{tmp_path / 'mytask.py'}:Mine", "num-rounds": 1, "output-dir": str(tmp_path),
                          "run-name": "file"}, workers=0)
    assert x.size == 64 * 10  # digits: 64 features x 10 classes
    with pytest.raises(ConfigError, match="cannot be imported: no such file: .*nothere.py"):
        prepare({"task": f"{tmp_path / 'nothere.py'}:Mine"})
    (tmp_path / "broken.py").write_text("def (:\n")
    with pytest.raises(ConfigError, match="cannot be imported: SyntaxError"):
        prepare({"task": f"{tmp_path / 'broken.py'}:Mine"})


SIGTERM_RUN = """
import subprocess, sys
import zofl.launch
from zofl.cli import main

def popen(self, cmd, **kwargs):  # `flwr run` stands in as a process of the run that would go on for 10 minutes
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=self.env,
                            start_new_session=True, stdout=kwargs.get("stdout"), stderr=kwargs.get("stderr"))
    self.tracked.append(proc)
    print(f"pid {proc.pid}", file=sys.__stderr__, flush=True)
    return proc

zofl.launch.SuperLink.popen = popen
sys.exit(main(["run", "--quiet", "--set", f'output-dir="{sys.argv[1]}"', 'run-name="t"']))
"""


def test_sigterm_of_zofl_run_stops_its_superlink_and_run_within_seconds(tmp_path):
    """``kill`` of ``zofl run``: exit 143 within seconds (5 s idle; 30 s allowed for a loaded machine), its real
    SuperLink and the run's process stopped, the run folder's locks free. ``flwr run`` is a stand-in (no Ray); the
    run through Flower is killed with SIGKILL and Ctrl-C in test_flower_e2e.py, and SIGKILL of the parent in
    test_launch.py."""
    import signal
    import subprocess
    import sys
    import time

    from tests.procs import cmdline, left_behind, lock_free, still_alive
    from zofl.launch import descendants

    proc = subprocess.Popen([sys.executable, "-c", SIGTERM_RUN, str(tmp_path)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()  # once the stand-in runs, the SuperLink is up
    assert line.startswith("pid "), line + proc.stderr.read()
    started = descendants(proc.pid)
    assert int(line.split()[1]) in started and any("flower-superlink" in cmdline(p) for p in started), started
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    took = time.monotonic() - t0
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert took < 30, f"SIGTERM took {took:.1f} s (the margin is for load: 15.5 s once at load 16)"
    end = time.monotonic() + 30
    while still_alive(started) and time.monotonic() < end:
        time.sleep(0.2)
    assert [cmdline(p, 200) for p in still_alive(started)] == []
    assert not left_behind()
    assert lock_free(tmp_path / "t" / ".cli.lock") and not (tmp_path / "t" / "summary.json").exists()


# -- issue 47: zofl plot reads run files with bounds and writes exactly the path it prints ---------------------
GOOD = b'{"round": 0, "test_acc": 0.5, "test_loss": 1.0}\n'


def _plot_process(argv, cwd, timeout=120):
    """A real ``python -m zofl.cli plot ...`` with 2 GiB of address space and a timeout: a reader that waits for
    ever or reads a 4 GiB file whole fails the test instead of hanging it or filling the machine's memory."""
    import resource
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "zofl.cli", "plot", *argv], capture_output=True, text=True,
                         timeout=timeout, cwd=cwd,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)))
    return res.returncode, res.stdout, res.stderr


def test_plot_refuses_run_files_nested_too_deep_in_one_line(tmp_path, capsys):
    """A record or config.json nested 100,000 deep was a RecursionError traceback."""
    deep = b"[" * 100_000 + b"]" * 100_000
    run = _run_folder(tmp_path / "a", GOOD + deep + b"\n")
    _refused(capsys, ["plot", run, "--out", str(tmp_path / "p.png")],
             rf"^zofl plot: error: {tmp_path / 'a' / 'rounds.jsonl'}, line 2: nested deeper than 32 levels")
    run = _run_folder(tmp_path / "b", GOOD, deep)
    _refused(capsys, ["plot", run, "--out", str(tmp_path / "p.png")],
             rf"^zofl plot: error: {tmp_path / 'b' / 'config.json'}: nested deeper than 32 levels")
    assert not (tmp_path / "p.png").exists()


@pytest.mark.parametrize("name, make, match", [
    ("rounds.jsonl", lambda p: os.truncate(p, 4 << 30),
     r"4,294,967,296 bytes, more than the 2 GiB \(2,147,483,648 bytes\) a run's rounds.jsonl may be"),
    ("rounds.jsonl", lambda p: os.truncate(p, (2 << 30) - 1),  # under the file's cap, but one line of 2 GiB
     r"line 2: more than 8,388,608 bytes, more than the 8 MiB a round record may be"),
    ("config.json", lambda p: os.truncate(p, 4 << 30),
     r"4,294,967,296 bytes, more than the 1 MiB \(1,048,576 bytes\) a run's config.json may be"),
    ("config.json", lambda p: (p.unlink(), os.mkfifo(p)),
     r"is a FIFO \(named pipe\), not a regular file; a run's config.json is read only from a regular file"),
])
def test_plot_refuses_run_files_too_large_or_not_regular_unread(tmp_path, name, make, match):
    """A 4 GiB rounds.jsonl or config.json (sparse: no disk) was read whole (a MemoryError), and so was a line of
    2 GiB in a rounds.jsonl under its cap; a FIFO config.json waited for ever."""
    _run_folder(tmp_path / "run", GOOD, b"{}")
    make(tmp_path / "run" / name)
    code, out, err = _plot_process(["run", "--out", "p.png"], tmp_path)
    where = re.escape(str(Path("run") / name))
    assert code == 2 and re.fullmatch(rf"zofl plot: error: {where}(: |, ){match}\n", err), (code, err[-2000:])
    assert not (tmp_path / "p.png").exists()


def test_plot_writes_exactly_the_path_it_prints(tmp_path, capsys):
    """--out X wrote X.png and printed X; --out /dev/full wrote a regular file /dev/full.png and exited 0. Now
    the suffix must name an image type matplotlib writes, the target be new or a regular file, and what is
    written is that path, a regular file, with no temporary file left beside it."""
    run = _run_folder(tmp_path / "run", GOOD)
    known = r"one of (\.\w+, )*\.eps, .*\.pdf, .*\.png, .*\.svg"
    _refused(capsys, ["plot", run, "--out", str(tmp_path / "X")],
             rf"--out {tmp_path / 'X'}: no image type suffix \(the file is written as named\); end it in {known}")
    os.symlink("/dev/full", tmp_path / "full")
    _refused(capsys, ["plot", run, "--out", str(tmp_path / "full")], "no image type suffix")
    os.symlink("/dev/full", tmp_path / "full.png")
    _refused(capsys, ["plot", run, "--out", str(tmp_path / "full.png")],
             r"full.png: is a character device, not a regular file; give the path of an image file")
    os.mkfifo(tmp_path / "fifo.pdf")
    _refused(capsys, ["plot", run, "--out", str(tmp_path / "fifo.pdf")], r"fifo.pdf: is a FIFO \(named pipe\)")
    _refused(capsys, ["plot", run, "--out", str(tmp_path / "p.docx")], rf"unknown image type '.docx'; {known}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.pdf", "full", "full.png", "run"]
    for name in ("p.png", "p.SVG", "p.pdf"):
        assert main(["plot", run, "--out", str(tmp_path / name)]) == 0
        assert capsys.readouterr().out == f"wrote {tmp_path / name}\n"
        assert (tmp_path / name).is_file() and not (tmp_path / name).is_symlink()
    assert (tmp_path / "p.SVG").read_bytes().lstrip().startswith(b"<?xml")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.pdf", "full", "full.png", "p.SVG", "p.pdf", "p.png",
                                                          "run"]


def test_plot_that_cannot_be_written_exits_non_zero_in_one_line_and_writes_nothing(tmp_path):
    """A write error (here: a file size limit, as a full disk) is one line naming --out, exit 1, and leaves no
    file, whole or partial (it was a truncated p.png)."""
    import resource
    import subprocess
    import sys

    _run_folder(tmp_path / "run", GOOD)
    res = subprocess.run([sys.executable, "-m", "zofl.cli", "plot", "run", "--out", "p.png"], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000)))
    assert (res.returncode, res.stdout, res.stderr) == (1, "", "zofl plot: error: --out p.png: cannot be written (File "
                                                               "too large); nothing was written\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_plot_counts_no_brackets_inside_strings_as_nesting(tmp_path, capsys):
    """The depth is counted outside strings (escaped quotes too): a record or config holding brackets is no
    deep record."""
    text = '[[{\\"' * 40
    run = _run_folder(tmp_path / "run", b'{"round": 0, "test_acc": 0.5, "test_loss": 1.0, "note": "%s"}\n'
                      % text.encode(), b'{"strategy": "%s", "dataset": "x"}' % text.encode())
    assert main(["plot", run, "--out", str(tmp_path / "p.png")]) == 0, capsys.readouterr().err
