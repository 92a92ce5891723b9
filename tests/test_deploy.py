"""Deployment: a SuperLink and three SuperNodes as separate processes on 127.0.0.1, one run per kind of
deployment. With TLS (certificates made by the test) and SuperNode authentication (keys registered with
``flwr supernode register``; an unregistered SuperNode is refused): ZO-HFL (engine sync) submitted with
``flwr run``. Without TLS: the legacy engine dropping a slow device at the round deadline, then the
SuperLink killed in the middle of a second run. Every process is stopped. (Each engine's run through the
Ray simulation, with its numbers against the in-process Grid's: tests/test_flower_e2e.py.)"""
import json
import subprocess
from pathlib import Path

import pytest
from cryptography import x509

from zofl.deploy import local_deployment, make_certificates, make_supernode_keys
from zofl.results import read_rounds

pytestmark = pytest.mark.flower


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


def test_zohfl_on_an_authenticated_tls_superlink_with_three_supernodes(tmp_path):
    out = tmp_path / "results"
    with local_deployment(tmp_path / "deploy", num_supernodes=3, tls=True) as dep:
        assert dep.auth  # TLS deployments authenticate SuperNodes by default
        # one round: every message starts a ClientApp process on its SuperNode (10-20 s a round at load 8)
        res = dep.run({"num-rounds": 1, "num-clients": 3, "beta": 1.0, "tau": 2.0,
                       "output-dir": str(out), "run-name": "tls"})
        # a SuperNode whose key was never registered (it has the CA, and a well-formed key) is refused
        keys = make_supernode_keys(tmp_path / "intruder-keys", "intruder")
        intruder = dep.start_supernode(0, 3, keys["private"], "intruder.log")
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
    assert listed.returncode == 0 and listed.stdout.count('"online"') == 3, listed.stdout[-2000:]
    assert local_ls.returncode == 0, local_ls.stdout[-2000:]
    assert public_ls.returncode != 0 and "403" in public_ls.stdout + public_ls.stderr, public_ls.stdout[-2000:]
    for key in (tmp_path / "deploy" / "keys").glob("supernode-*"):  # private keys: owner-only from the start
        assert oct(key.stat().st_mode & 0o777) == ("0o644" if key.suffix == ".pub" else "0o600")
    assert oct((tmp_path / "deploy" / "keys").stat().st_mode & 0o777) == "0o700"
    rec = read_rounds(out / "tls")
    assert [r["round"] for r in rec] == [0, 1]
    assert all(r["participants"] == 3 and r["failures"] == 0 for r in rec[1:])
    assert json.loads((out / "tls" / "summary.json").read_text())["final_test_acc"] == rec[-1]["test_acc"]
    assert all(p.poll() is not None for p in procs)
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert not left, f"processes left behind: {left}"


def test_insecure_deployment_drops_the_slow_device_at_the_deadline_and_a_killed_superlink_leaves_nothing(tmp_path):
    """The legacy engine: client 0's device is 10x slower than the others (speed-profile "slow", speeds
    0.1, 1, 1: zofl.faults.speed_factor), so its 10 local steps of 0.3 s take 30 s, the others' 3 s; the
    round deadline is 24 s, leaving the fast clients 21 s for a SuperNode's poll and the start of a
    ClientApp process on a loaded machine (a few seconds at load 8); the slow one misses it whatever the
    load (a sleep never ends early) and is done soon after (its SuperNode is needed by the next run).
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
                       "speed-profile": "slow", "slow-clients": "0", "speed-param": 0.1, "step-time-s": 0.3,
                       "round-deadline-s": 24.0, "output-dir": str(out), "run-name": "slow"})
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
    (r,) = read_rounds(out / "slow")[1:]
    assert (r["participants"], r["dropped"]) == (2, 1), r
    assert 3.0 < r["client_wall_max_s"] < 24.0
    assert not processes_with_env("FLWR_HOME", home), "processes of the deployment left behind"
    assert not (out / "k" / "summary.json").exists()


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
