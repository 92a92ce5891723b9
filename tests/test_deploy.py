"""Deployment: a SuperLink and three SuperNodes as separate processes on 127.0.0.1, one run per kind of
deployment. With TLS (certificates made by the test) and SuperNode authentication (keys registered with
``flwr supernode register``; an unregistered SuperNode is refused): ZO-HFL (engine sync) submitted with
``flwr run``. Without TLS: the legacy engine dropping a slow device at the round deadline, ``flwr run``'s two
early failures (a bad run-config value; more clients than SuperNodes), then the SuperLink killed in the middle
of a last run. Every process is stopped. (Each engine's run through the
Ray simulation, with its numbers against the in-process Grid's: tests/test_flower_e2e.py.)

The exit code of ``python -m zofl.deploy local`` is decided from the run's folder, so it is tested without a
deployment (folders prepared as a refused, a failed and a finished run leave them, and ``local_deployment``
replaced by a stand-in); so is its ``--help``. (The keys' and certificates' file rules: tests/test_fleet_proxy.py,
with the other input checks of the deploy commands.)"""
import contextlib
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from cryptography import x509

import zofl.deploy
from zofl.deploy import local_deployment, local_verdict, make_certificates, make_supernode_keys, run_stamps
from zofl.deploy import main as deploy_main
from zofl.results import read_rounds

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.flower
def test_certificates_name_the_host_and_chain_to_the_ca(tmp_path):
    paths = make_certificates(tmp_path, ("127.0.0.1", "localhost", "superlink.example"))
    ca = x509.load_pem_x509_certificate(paths["ca_cert"].read_bytes())
    srv = x509.load_pem_x509_certificate(paths["cert"].read_bytes())
    assert srv.issuer == ca.subject
    san = srv.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert san.get_values_for_type(x509.DNSName) == ["localhost", "superlink.example"]
    srv.verify_directly_issued_by(ca)
    assert oct(paths["key"].stat().st_mode & 0o777) == "0o600"


class OpenFiles:
    """Samples, every 20 ms until stopped, the files the deployment's ServerApp processes (``flwr-serverapp`` with
    this FLWR_HOME) hold open, and the words of their command lines and environments: what the server was given."""

    def __init__(self, home: str):
        import threading

        self.home, self.paths, self.given, self.done = home, set(), set(), threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        from zofl.launch import processes_with_env

        while not self.done.wait(0.02):
            for pid in processes_with_env("FLWR_HOME", self.home):
                proc = Path(f"/proc/{pid}")
                try:
                    if b"flwr-serverapp" not in (proc / "cmdline").read_bytes():
                        continue
                    self.given.add((proc / "cmdline").read_bytes() + (proc / "environ").read_bytes())
                    for fd in (proc / "fd").iterdir():
                        self.paths.add(os.readlink(fd))
                except OSError:  # it ended meanwhile
                    continue

    def stop(self) -> None:
        self.done.set()
        self.thread.join(10)


@pytest.mark.flower
def test_zohfl_on_an_authenticated_tls_superlink_with_three_supernodes(tmp_path):
    """Issue 48's deployment: each SuperNode trains on a file of its own, in a folder of its own (40, 60 and 100
    digits-shaped examples, 10% held out), named in its node config; the ServerApp's process is given none of their
    paths and (sampled every 20 ms) never holds one open. ZO-HFL (the server's own data: its f1 and test set)
    and FedAvg with server-data = none both finish with the clients' federated evaluation on their held-out parts,
    and N_train (ZO-HFL's rho_i = N_i / N_train) from the sizes the nodes reported. A fourth SuperNode's file has
    30 features, not 64: it is refused alone, named with what was wrong, and both runs go on with the three others
    (partition 3 unheld: a failure in each round that samples it)."""
    from tests.test_local_data import site_file

    out = tmp_path / "results"
    sites = {i: tmp_path / f"site-{i}" for i in range(4)}
    files = {i: site_file(sites[i].mkdir() or sites[i] / "train.npz", n, i, width=30 if i == 3 else 64)
             for i, n in enumerate((40, 60, 100, 50))}
    fed_keys = {"num-clients": 4, "beta": 1.0, "tau": 2.0, "federated-eval": True, "output-dir": str(out)}
    with local_deployment(tmp_path / "deploy", num_supernodes=4, tls=True,
                          node_config={i: {"data-path": str(f)} for i, f in files.items()}) as dep:
        assert dep.auth  # TLS deployments authenticate SuperNodes by default
        watch = OpenFiles(dep.env["FLWR_HOME"])
        # one round: every message starts a ClientApp process on its SuperNode (10-20 s a round at load 8)
        res = dep.run({**fed_keys, "num-rounds": 1, "run-name": "tls"})
        alone = dep.run({**fed_keys, "num-rounds": 2, "strategy": "fedavg", "server-data": "none", "x0": "zeros",
                         "run-name": "no-server-data"})
        watch.stop()
        # a SuperNode whose key was never registered (it has the CA, and a well-formed key) is refused
        keys = make_supernode_keys(tmp_path / "intruder-keys", "intruder")
        intruder = dep.start_supernode(0, 4, keys["private"], "intruder.log")
        assert intruder.wait(120) != 0
        assert "Failed to activate SuperNode" in (tmp_path / "deploy" / "intruder.log").read_text()
        listed = dep.flwr("supernode", "ls", "--format", "json")
        # the SuperNodes came through the Fleet-only proxy; there the Control API (flwr ls) is refused
        assert dep.fleet_port and dep.fleet_port != dep.port
        home = Path(dep.env["FLWR_HOME"])
        with open(home / "config.toml", "a") as f:
            f.write(f'\n[superlink.public]\naddress = "127.0.0.1:{dep.fleet_port}"\n'
                    f'root-certificates = "{tmp_path / "deploy" / "certs" / "ca.crt"}"\n')
        public_ls, local_ls = dep.flwr("ls", "public"), dep.flwr("ls")
        log = (tmp_path / "deploy" / "superlink.log").read_text()
        procs = list(dep.procs)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    assert "https://127.0.0.1" in log  # the SuperLink serves TLS only
    assert listed.returncode == 0 and listed.stdout.count('"online"') == 4, listed.stdout[-2000:]
    assert local_ls.returncode == 0, local_ls.stdout[-2000:]
    assert public_ls.returncode != 0 and "403" in public_ls.stdout + public_ls.stderr, public_ls.stdout[-2000:]
    for key in (tmp_path / "deploy" / "keys").glob("supernode-*"):  # private keys: owner-only from the start
        assert oct(key.stat().st_mode & 0o777) == ("0o644" if key.suffix == ".pub" else "0o600")
    assert oct((tmp_path / "deploy" / "keys").stat().st_mode & 0o777) == "0o700"
    rec = read_rounds(out / "tls")
    assert [r["round"] for r in rec] == [0, 1]
    assert all(r["participants"] == 3 and r["failed_clients"] == [3] for r in rec[1:])
    summary = json.loads((out / "tls" / "summary.json").read_text())
    (refused,) = summary["refused_nodes"]  # the fourth site, alone, with what was wrong
    assert refused["claims"] == 3 and refused["held_by"] == -2
    assert "<data-path>: 30 features per example, but the task declares num_features=64" in refused["reason"]
    assert summary["unheld_partitions"] == [3]
    assert summary["final_test_acc"] == rec[-1]["test_acc"]
    held_out = 4 + 6 + 10  # test-fraction 0.1 of each site's 40, 60 and 100
    assert summary["reported_sizes"] == {"0": 36, "1": 54, "2": 90} and summary["n_train"] > 36 + 54 + 90
    assert (rec[-1]["fed_examples"], rec[-1]["fed_clients"], rec[-1]["fed_refused"]) == (held_out, 3, 0)
    assert alone.returncode == 0, (alone.stdout + alone.stderr)[-4000:]
    rec = read_rounds(out / "no-server-data")
    assert all(r["test_acc"] is None for r in rec) and all(r["fed_examples"] == held_out for r in rec[1:])
    summary = json.loads((out / "no-server-data" / "summary.json").read_text())
    assert summary["n_train"] == 36 + 54 + 90 and summary["final_fed_examples"] == held_out
    # what the server had: no path of a site's in its command lines, environments, open files or results
    assert watch.given and watch.paths, "the ServerApp's processes were never seen"
    site_words = [str(d).encode() for d in sites.values()]
    assert not [g for g in watch.given if any(w in g for w in site_words)]
    assert not [f for f in watch.paths if any(f.startswith(str(d)) for d in sites.values())]
    for f in out.rglob("*"):
        if f.is_file():
            assert not any(w in f.read_bytes() for w in site_words), f
    assert all(p.poll() is not None for p in procs)
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert not left, f"processes left behind: {left}"


@pytest.mark.flower
def test_insecure_deployment_drops_the_slow_device_at_the_deadline_and_a_killed_superlink_leaves_nothing(tmp_path):
    """The legacy engine: client 0's device is 10x slower than the others (speed-profile "slow", speeds
    0.1, 1, 1: zofl.faults.speed_factor), so its 10 local steps of 0.6 s take 60 s, the others' 6 s; the
    round deadline is 48 s, leaving the fast clients 42 s for a SuperNode's poll and the start of a
    ClientApp process on a loaded machine (a few seconds at load 8; 21 s were too few twice at load 12-19,
    docs/testing.md); the slow one misses it whatever the load (a sleep never ends early) and is done soon
    after (its SuperNode is needed by the next run).
    Then, in a second run, the SuperLink is
    killed: Flower starts the ServerApp (flwr-serverapp) in a session of its own, so it outlived a killed
    SuperLink (parent 1); local_deployment ends every process of its FLWR_HOME, whatever died first."""
    import os
    import signal
    import time

    from zofl.launch import flwr_run_command, processes_with_env

    out = tmp_path / "results"
    with local_deployment(tmp_path / "deploy", num_supernodes=3, tls=False) as dep:
        res = dep.run({"engine": "legacy", "num-rounds": 1, "num-clients": 3, "beta": 1.0, "local-steps": 5, "seed": 46,
                       "speed-profile": "slow", "slow-clients": "0", "speed-param": 0.1, "step-time-s": 0.6,
                       "round-deadline-s": 48.0, "output-dir": str(out), "run-name": "slow"})
        # `flwr run`'s two early failures, on the same SuperNodes (no Ray to start: they are the ServerApp's own
        # checks, the same code in the simulation): a bad run-config value, then more clients than SuperNodes
        bad = dep.run({"alpha": 0.0, "output-dir": str(tmp_path / "bad")}, timeout=600)
        few = dep.run({"num-clients": 10, "output-dir": str(tmp_path / "few")}, timeout=600)
        home = dep.env["FLWR_HOME"]
        submit = subprocess.Popen(flwr_run_command("deploy", {"num-rounds": 50, "num-clients": 3, "step-time-s": 0.2,
                                                              "output-dir": str(out), "run-name": "k"}),
                                  env=dep.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while not (out / "k" / "rounds.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert (out / "k" / "rounds.jsonl").exists(), "the run did not start"
        serverapps = [p for p in processes_with_env("FLWR_HOME", home)
                      if b"flwr-serverapp" in open(f"/proc/{p}/cmdline", "rb").read()]
        assert serverapps, "no flwr-serverapp process to leave behind"
        os.kill(dep.procs[0].pid, signal.SIGKILL)  # the SuperLink
        submit.wait(120)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    _fails_before_round_one(bad, "run-config key 'alpha' must be a number > 0, got 0.0", tmp_path / "bad")
    _fails_before_round_one(few, "The run cannot go on: run-config num-clients=10 but the federation has 3 SuperNodes",
                            None)
    assert 'num-supernodes=10' in few.stdout + few.stderr
    (r,) = read_rounds(out / "slow")[1:]
    assert (r["participants"], r["dropped"]) == (2, 1), r
    assert 6.0 < r["client_wall_max_s"] < 48.0
    assert not processes_with_env("FLWR_HOME", home), "processes of the deployment left behind"
    assert not (out / "k" / "summary.json").exists()


def _fails_before_round_one(res: subprocess.CompletedProcess, message: str, out: Path | None) -> None:
    """A run that `flwr run` shows failing with ``message`` before round 1, before Flower's traceback, and in what
    `zofl run` shows of a failed run's output (tests/test_cli.py); nothing written under ``out``."""
    from zofl.cli import _error_lines

    text = res.stdout + res.stderr
    assert message in text and "[ROUND 1]" not in text, text[-3000:]
    assert "Traceback" not in text[:text.index(message)]  # the one line comes before Flower's traceback
    assert any(message.split(": ", 1)[-1] in line for line in _error_lines(text.splitlines())), text[-3000:]
    assert out is None or not out.exists() or not any(out.iterdir())  # nothing written


@pytest.mark.flower
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_a_killed_deployment_command_leaves_nothing_behind(tmp_path, sig):
    """The process that started a deployment is killed: on SIGTERM its cleanup runs
    (``exit_on_terminate``); on SIGKILL nothing of ours runs, and the SuperLink and SuperNodes die
    with their parent (``die_with_parent``)."""
    import signal
    import sys
    import time

    from zofl.launch import processes_with_env

    script = ("import sys, time\nfrom zofl.deploy import local_deployment\n"
              "with local_deployment(sys.argv[1], num_supernodes=2, tls=False) as dep:\n"
              "    print(dep.env['FLWR_HOME'], flush=True)\n    time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "dep")], stdout=subprocess.PIPE, text=True)
    home = proc.stdout.readline().strip()
    assert home and len(processes_with_env("FLWR_HOME", home)) >= 3  # SuperLink, 2 SuperNodes (and helpers)
    proc.send_signal(getattr(signal, sig))
    proc.wait(60)
    end = time.monotonic() + 60
    while processes_with_env("FLWR_HOME", home) and time.monotonic() < end:
        time.sleep(0.5)
    assert processes_with_env("FLWR_HOME", home) == []


# -- `python -m zofl.deploy local`: its exit code is this run's outcome (issue 47) --------------------------------
def atomic(path: Path, data: dict) -> None:
    """Write a run file as the ServerApp does: a new file renamed over the old one (a new inode)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def finished(out: Path, failure: str | None = None) -> None:
    """What a run the ServerApp accepted and ended leaves: config.json, then summary.json."""
    out.mkdir(parents=True, exist_ok=True)
    atomic(out / "config.json", {"run-name": out.name})
    atomic(out / "summary.json", {"results_dir": str(out), "final_test_acc": 0.9, "failure": failure})


@pytest.mark.parametrize("earlier,this_run,code,message", [
    (None, "finished", 0, None),
    ("finished", "finished", 0, None),  # resume = true of a finished run: both files written again
    ("finished", "refused", 1, "the run failed before its ServerApp accepted"),  # the probe of issue 47
    ("failed", "refused", 1, "the run failed before its ServerApp accepted"),
    (None, "refused", 1, "the run failed before its ServerApp accepted"),
    ("finished", "accepted", 1, "the run failed: it wrote no summary.json"),  # config.json only: died mid-run
    (None, "failed", 1, "the run failed: client 2 crashed"),
])
def test_local_exits_by_this_runs_own_files_never_an_earlier_runs(tmp_path, earlier, this_run, code, message):
    """``local_verdict``: a run folder prepared as an earlier run left it (``earlier``), its stamps taken, then
    changed as this run's ServerApp would (``this_run``); ``flwr run`` exited 0 in every case."""
    out = tmp_path / "results" / "r"
    if earlier:
        finished(out, "client 1 crashed" if earlier == "failed" else None)
    before = run_stamps(out)
    if this_run in ("finished", "failed"):
        finished(out, "client 2 crashed" if this_run == "failed" else None)
    elif this_run == "accepted":
        atomic(out / "config.json", {"run-name": "r"})
    got, why = local_verdict(out, before, 0)
    assert got == code, why
    assert (why is None) if message is None else why.startswith(message), why
    if why is not None:
        assert str(out) in why or "crashed" in why
        assert "\n" not in why


def fake_deployment(writes):
    """A stand-in for ``local_deployment``: no process; its ``run`` does what ``writes`` does to the run folder
    (what the ServerApp would) and ``flwr run`` exits 0, as it does for a run the SuperLink refused."""
    class Dep:
        def run(self, run_config, capture=True):
            writes(Path(run_config["output-dir"]) / run_config["run-name"])
            return subprocess.CompletedProcess(["flwr", "run"], 0, "", "")

    @contextlib.contextmanager
    def deployment(workdir, num_supernodes, tls=True):
        yield Dep()

    return deployment


@pytest.mark.parametrize("second", ["refused", "finished"])
def test_local_run_twice_with_one_run_name_fails_when_the_second_is_refused(tmp_path, monkeypatch, capsys, second):
    """Issue 47's probe through the command: the same run-name twice; the ServerApp refuses the second run (its
    folder holds results), Flower exits 0, and ``local`` read the first run's summary.json and exited 0."""
    monkeypatch.setattr(zofl.deploy, "local_deployment", fake_deployment(finished))
    argv = ["local", str(tmp_path / "dep"), "--supernodes", "2", "--run-config", 'num-rounds=1 run-name="twice"']
    assert deploy_main(argv) == 0
    capsys.readouterr()
    monkeypatch.setattr(zofl.deploy, "local_deployment",
                        fake_deployment(finished if second == "finished" else lambda out: None))
    code = deploy_main(argv)
    err = capsys.readouterr().err.strip()
    out = tmp_path / "dep" / "results" / "twice"
    if second == "finished":
        assert (code, err) == (0, "")
    else:
        assert code == 1
        assert err == (f"python -m zofl.deploy local: the run failed before its ServerApp accepted {out}; "
                       f"Flower's output above says why"), err


def test_the_deploy_help_points_to_the_section_where_it_is(capsys):
    """Issue 47: ``--help`` sent the reader to a README section that had moved to docs/deploy.md."""
    with pytest.raises(SystemExit):
        deploy_main(["--help"])
    text = capsys.readouterr().out
    for doc in (text, local_deployment.__doc__):
        assert "README" not in doc, doc
    (section,) = re.findall(r'docs/deploy\.md,?\s+"([^"]+)"', text)
    headings = re.findall(r"^#+ (.+)$", (REPO / "docs" / "deploy.md").read_text(), flags=re.M)
    assert section in headings, (section, headings)
