"""Deployment: a SuperLink and SuperNodes as separate processes, with TLS certificates made here.

    python -m zofl.deploy certs DIR            # DIR/ca.crt, DIR/server.pem, DIR/server.key
    python -m zofl.deploy local DIR --supernodes 3 [--insecure] [--run-config 'num-rounds=3 ...']

``certs`` writes a certificate authority and a server certificate signed by it, valid for
``--host`` names/addresses (default 127.0.0.1 and localhost). ``local`` starts a SuperLink and N
SuperNodes on this machine (each with ``--node-config 'partition-id=i num-partitions=N'``, so each
loads its own partition), runs the App on them with ``flwr run``, and stops every process; README
"Deploy clients on separate machines" gives the same commands for several machines. The test
(tests/test_deploy.py) uses ``local_deployment`` with TLS.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import ipaddress
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from .launch import PROJECT_DIR, _bin, flwr_env, flwr_run_command, free_port, stop_process, wait_for_port


def make_certificates(out: str | os.PathLike, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
                      days: int = 365) -> dict[str, Path]:
    """A CA (ca.crt, ca.key) and a server certificate (server.pem, server.key) for ``hosts``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)

    def key():
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def name(cn: str):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = key()
    ca = (x509.CertificateBuilder().subject_name(name("zofl test CA")).issuer_name(name("zofl test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    sans = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    srv_key = key()
    srv = (x509.CertificateBuilder().subject_name(name(hosts[0])).issuer_name(ca.subject)
           .public_key(srv_key.public_key()).serial_number(x509.random_serial_number())
           .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
           .add_extension(x509.SubjectAlternativeName(sans), critical=False)
           .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
           .sign(ca_key, hashes.SHA256()))

    def pem_key(k):
        return k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                               serialization.NoEncryption())

    paths = {"ca_cert": out / "ca.crt", "ca_key": out / "ca.key", "cert": out / "server.pem",
             "key": out / "server.key"}
    paths["ca_cert"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(srv.public_bytes(serialization.Encoding.PEM))
    for k, obj in (("ca_key", ca_key), ("key", srv_key)):
        paths[k].write_bytes(pem_key(obj))
        paths[k].chmod(0o600)
    return paths


@dataclass
class Deployment:
    """A running SuperLink with SuperNodes; ``run`` submits the App with ``flwr run``."""

    work: Path
    env: dict[str, str]
    port: int  # the SuperLink's one HTTP port (Fleet and Control APIs, Flower 1.41)
    procs: list[subprocess.Popen] = field(default_factory=list)

    def run(self, run_config: Mapping[str, Any], app_dir: str | os.PathLike = PROJECT_DIR,
            timeout: float = 3600.0) -> subprocess.CompletedProcess:
        cmd = flwr_run_command("deploy", run_config, app_dir)
        return subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]


@contextlib.contextmanager
def local_deployment(workdir: str | os.PathLike, num_supernodes: int, tls: bool = True,
                     startup_timeout: float = 60.0) -> Iterator[Deployment]:
    """A SuperLink and ``num_supernodes`` SuperNodes as separate processes on 127.0.0.1.

    With ``tls`` the SuperLink serves certificates made by ``make_certificates`` and the SuperNodes
    and the ``flwr`` CLI trust their CA. Every process is stopped when the block ends."""
    work = Path(workdir)
    home = work / "flwr-home"
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    if tls:
        certs = make_certificates(work / "certs")
        security = f'root-certificates = "{certs["ca_cert"]}"'
        link_flags = ["--ssl-ca-certfile", str(certs["ca_cert"]), "--ssl-certfile", str(certs["cert"]),
                      "--ssl-keyfile", str(certs["key"])]
        node_flags = ["--root-certificates", str(certs["ca_cert"])]
    else:
        security, link_flags, node_flags = "insecure = true", ["--insecure"], ["--insecure"]
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "deploy"\n\n[superlink.deploy]\naddress = "127.0.0.1:{port}"\n{security}\n')
    env = flwr_env(home)
    dep = Deployment(work, env, port)
    with contextlib.ExitStack() as stack:
        def start(cmd: list[str], log_name: str) -> subprocess.Popen:
            log = stack.enter_context(open(work / log_name, "w"))
            proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            dep.procs.append(proc)
            return proc

        try:
            link = start([_bin("flower-superlink"), *link_flags, "--disable-runtime-dependency-installation",
                          "--host", "127.0.0.1", "--port", str(port), "--database", str(work / "state.db")],
                         "superlink.log")
            wait_for_port(port, startup_timeout, link)
            for i in range(num_supernodes):
                node_config = f"partition-id={i} num-partitions={num_supernodes}"
                start([_bin("flower-supernode"), *node_flags, "--superlink", f"127.0.0.1:{port}",
                       "--port", str(free_port()), "--node-config", node_config], f"supernode-{i}.log")
            yield dep
        finally:
            for proc in reversed(dep.procs):  # SuperNodes first, then the SuperLink
                stop_process(proc)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m zofl.deploy", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("certs", help="write ca.crt, server.pem, server.key")
    c.add_argument("dir")
    c.add_argument("--host", action="append", help="name or IP address the SuperLink is reached at (repeat)")
    loc = sub.add_parser("local", help="SuperLink + N SuperNodes on this machine, one run, then stop")
    loc.add_argument("dir")
    loc.add_argument("--supernodes", type=int, default=3)
    loc.add_argument("--insecure", action="store_true")
    loc.add_argument("--run-config", default="", help="TOML key=value pairs, as for flwr run")
    args = ap.parse_args(argv)
    if args.cmd == "certs":
        paths = make_certificates(args.dir, tuple(args.host or ("127.0.0.1", "localhost")))
        print("\n".join(f"{k}: {v}" for k, v in paths.items()))
        return 0
    import tomllib
    run_config = tomllib.loads(args.run_config.replace(" ", "\n")) if args.run_config else {}
    run_config.setdefault("num-clients", args.supernodes)
    from .config import parse_config
    from .results import default_run_name

    cfg = parse_config(run_config)  # a bad key: an error now, before any process starts
    run_config.setdefault("run-name", default_run_name(cfg.strategy, cfg.dataset))  # to find its summary
    summary = Path(cfg.output_dir).expanduser() / run_config["run-name"] / "summary.json"
    with local_deployment(args.dir, args.supernodes, tls=not args.insecure) as dep:
        res = dep.run(run_config)
        print(res.stdout + res.stderr)
    # `flwr run` exits 0 for a run that failed in the SuperLink: the run's own summary says how it went
    failure = json.loads(summary.read_text()).get("failure") if summary.exists() else \
        f"no {summary} (see the output above)"
    if failure:
        print(f"python -m zofl.deploy local: the run failed: {failure}", file=sys.stderr)
        return 1
    return res.returncode


if __name__ == "__main__":
    sys.exit(main())
