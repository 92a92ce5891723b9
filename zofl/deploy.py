"""Deployment: a SuperLink and SuperNodes as separate processes, with TLS certificates and SuperNode
keys made here.

    python -m zofl.deploy certs DIR [--force]  # DIR/ca.crt, DIR/server.pem, DIR/server.key (DIR/ca.key)
    python -m zofl.deploy keys DIR NAME [--force]   # a SuperNode's key pair: DIR/NAME (0600), DIR/NAME.pub
    python -m zofl.deploy local DIR --supernodes 3 [--insecure] [--run-config 'num-rounds=3 ...']
    python -m zofl.deploy fleet-proxy --listen 0.0.0.0:9092 --superlink 127.0.0.1:9093 --certs DIR [--max-body-mb 16]

``certs`` writes a certificate authority and a server certificate signed by it, valid for
``--host`` names/addresses (default 127.0.0.1 and localhost). ``keys`` writes a SuperNode's
authentication key pair (register NAME.pub with ``flwr supernode register``). ``local`` starts a
SuperLink with TLS and SuperNode authentication, and N registered SuperNodes on this machine (each
with ``--node-config 'partition-id=i num-partitions=N'``, so each loads its own partition), runs
the App on them with ``flwr run``, stops every process, and exits 1 if the run failed: judged by the
files this run wrote (``local_verdict``), never by an earlier run's summary in the same run folder.
``fleet-proxy`` serves only the SuperLink's Fleet API (SuperNodes) on a public address, so the
Control API (``flwr run``, ``ls``, ``stop``) stays on the SuperLink's own 127.0.0.1 (``zofl.fleet_proxy``); it
refuses request bodies over ``--max-body-mb`` and checks its certificates before it listens. docs/deploy.md,
"Deploy clients on separate machines", gives the same commands for several machines. The test
(tests/test_deploy.py) uses ``local_deployment`` with TLS and authentication.

A folder DIR that does not exist is made owner-only (0700); an existing one is used as it is, never
chmod-ed, and refused (exit 2) if it is group/world-writable or not the user's (``private_dir``).
NAME is a plain file name in DIR (``KEY_NAME_RULE``), never a path. A key or certificate file that
exists is never replaced without ``--force``, and no file is written through a link: each is created
new (O_CREAT|O_EXCL|O_NOFOLLOW), with --force after what was there is removed by name.
Bad input (a folder, a name, a flag, missing certificates, an existing key) is one line on stderr and
exit code 2.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import ipaddress
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from .config import parse_config
from .core.protocol import NUM_PARTITIONS, PARTITION_ID
from .fleet_proxy import DEFAULT_MAX_BODY_MB, certs_problem, serve
from .launch import (
    PROJECT_DIR,
    _bin,
    die_with_parent,
    exit_on_terminate,
    flwr_env,
    flwr_run_command,
    free_port,
    kill_descendants_by_env,
    run_config_arg,
    stop_process,
    wait_for_port,
)
from .results import default_run_name, file_version, run_outcome


class DeployError(ValueError):
    """Bad input to a deploy command (one line, naming the folder or flag); the CLI exits 2 with it."""


KEY_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")
KEY_NAME_RULE = ("a plain file name of letters, digits, '.', '_' and '-', not starting with '.' or '-', at most 64 "
                 "characters (no folder: the key pair goes into DIR)")


def check_key_name(name: str) -> str:
    """``keys``' NAME, if it is a plain file name (``KEY_NAME_RULE``), else DeployError. A path (``../../x``,
    ``/etc/x``) wrote the key pair outside DIR; '.', '..', '' or a hidden name are no key's name, and one
    starting with '-' reads as an option to the commands it is later given to (``flower-supernode``)."""
    if not isinstance(name, str) or KEY_NAME.fullmatch(name) is None:
        shown = repr(name) if len(str(name)) <= 80 else f"{name[:80]!r}... ({len(name)} characters)"
        raise DeployError(f"NAME {shown}: must be {KEY_NAME_RULE}")
    return name


def make_way(paths: Iterable[Path], force: bool, instead: str = "another DIR") -> None:
    """Before new key or certificate files are written at ``paths``: without ``force`` one that exists (a
    file, or a link, even a dangling one) is refused, before any is written (no half-new pair); with
    ``force`` each is removed by name first: a link is removed, never followed, its target left alone.
    ``instead``: what else the user may choose, for the message."""
    paths = list(paths)
    for path in paths:
        if os.path.isdir(path) and not os.path.islink(path):
            raise DeployError(f"{path} is a folder; keys and certificates are files: remove it or use another DIR")
        if os.path.lexists(path) and not force:
            raise DeployError(f"{path} exists; keys and certificates are never replaced silently: remove it, "
                              f"choose {instead}, or pass --force to replace it")
    for path in paths:
        if force and os.path.lexists(path):
            path.unlink()


def write_new(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Create ``path`` and write ``data`` into it: O_CREAT|O_EXCL|O_NOFOLLOW, so a file or a link that is
    there (one that appeared after ``make_way``) is never written through or replaced; ``mode`` from the
    first byte."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    except FileExistsError:
        raise DeployError(f"{path} appeared while it was being made (a file or a link); nothing was written to "
                          f"it: remove it and run again") from None
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def write_private(path: Path, data: bytes) -> None:
    """Write a private key readable by its owner only, from the first byte (mode 0600 at creation), to a
    file that did not exist (``write_new``)."""
    write_new(path, data, 0o600)


def private_dir(path: Path) -> Path:
    """A folder for keys or state. A new one is made owner-only (0700). An existing one is never
    changed (``keys /tmp`` once made /tmp 0700, locking every other user out); it is used only if it
    is this user's and not group/world-writable, since there anyone could swap or read the key files,
    else DeployError: the caller names a folder of its own (or a new one)."""
    if not path.exists():
        path.mkdir(parents=True, mode=0o700)
        path.chmod(0o700)  # mkdir's mode is masked by the umask; this is the folder we just made
        return path
    if not path.is_dir():
        raise DeployError(f"{path} is not a folder; give a new or private folder for keys and certificates")
    st = path.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise DeployError(f"{path} is {'group/world-writable' if st.st_mode & 0o022 else 'not owned by you'} "
                          f"(mode {oct(st.st_mode & 0o7777)}); it is left as it is: give a new folder "
                          f"(it is made 0700) or one of your own that only you can write to")
    return path


def make_supernode_keys(out: str | os.PathLike, name: str, force: bool = False) -> dict[str, Path]:
    """A SuperNode's authentication key pair (EC P-384, OpenSSH format, as Flower 1.41 reads it):
    ``name`` (private, 0600: ``flower-supernode --auth-supernode-private-key``) and ``name.pub``
    (``flwr supernode register``). ``name`` is a plain file name (``check_key_name``); an existing key is
    replaced only with ``force`` (a SuperNode registered with it could no longer authenticate)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    check_key_name(name)
    out = private_dir(Path(out))
    paths = {"private": out / name, "public": out / f"{name}.pub"}
    make_way(paths.values(), force, instead="another NAME or DIR")
    key = ec.generate_private_key(ec.SECP384R1())
    write_private(paths["private"], key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                                      serialization.NoEncryption()))
    write_new(paths["public"], key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                             serialization.PublicFormat.OpenSSH) + b"\n")
    return paths


def make_certificates(out: str | os.PathLike, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
                      days: int = 365, force: bool = False) -> dict[str, Path]:
    """A CA (ca.crt, ca.key) and a server certificate (server.pem, server.key) for ``hosts``; existing
    files are replaced only with ``force``, and none is written through a link (``make_way``, ``write_new``)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    out = private_dir(Path(out))
    paths = {"ca_cert": out / "ca.crt", "ca_key": out / "ca.key", "cert": out / "server.pem",
             "key": out / "server.key"}
    make_way(paths.values(), force)
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

    write_new(paths["ca_cert"], ca.public_bytes(serialization.Encoding.PEM))
    write_new(paths["cert"], srv.public_bytes(serialization.Encoding.PEM))
    for k, obj in (("ca_key", ca_key), ("key", srv_key)):
        write_private(paths[k], pem_key(obj))
    return paths


@dataclass
class Deployment:
    """A running SuperLink with SuperNodes; ``run`` submits the App with ``flwr run``."""

    work: Path
    env: dict[str, str]
    port: int  # the SuperLink's one HTTP port (Fleet, Control and ServerAppIo APIs, Flower 1.41)
    fleet_port: int = 0  # where SuperNodes connect: the Fleet-only proxy (zofl.fleet_proxy), else = port
    procs: list[subprocess.Popen] = field(default_factory=list)
    node_flags: list[str] = field(default_factory=list)
    auth: bool = False
    _start: Any = None  # starts a process whose output goes to a log file (set by local_deployment)

    def run(self, run_config: Mapping[str, Any], app_dir: str | os.PathLike = PROJECT_DIR,
            timeout: float = 3600.0, capture: bool = True) -> subprocess.CompletedProcess:
        """``flwr run`` on this SuperLink, to the end of the run (``capture=False``: its output streams
        to this process's as it comes)."""
        cmd = flwr_run_command("deploy", run_config, app_dir)
        return subprocess.run(cmd, env=self.env, capture_output=capture, text=True, timeout=timeout)

    def flwr(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
        """A ``flwr`` CLI command against this SuperLink (e.g. ``supernode ls``)."""
        return subprocess.run([_bin("flwr"), *args], env=self.env, capture_output=True, text=True, timeout=timeout)

    def register(self, public_key: Path) -> None:
        """``flwr supernode register``: the SuperLink accepts the SuperNode holding the private key."""
        res = self.flwr("supernode", "register", str(public_key))
        if res.returncode != 0:
            raise RuntimeError(f"flwr supernode register {public_key} failed: {(res.stdout + res.stderr)[-2000:]}")

    def start_supernode(self, partition_id: int, num_partitions: int, private_key: Path | None = None,
                        log_name: str | None = None, extra: Mapping[str, Any] | None = None) -> subprocess.Popen:
        """A SuperNode holding one partition (with ``private_key``: authenticated with it; ``extra``: more of its
        node config, e.g. ``data-path`` naming data of its own, zofl.tasks.local)."""
        node_config = run_config_arg({PARTITION_ID: partition_id, NUM_PARTITIONS: num_partitions, **(extra or {})})
        auth = ["--auth-supernode-private-key", str(private_key)] if private_key else []
        return self._start([_bin("flower-supernode"), *self.node_flags, *auth, "--superlink",
                            f"127.0.0.1:{self.fleet_port or self.port}",
                            "--port", str(free_port()), "--node-config", node_config],
                           log_name or f"supernode-{partition_id}.log")

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]


@contextlib.contextmanager
def local_deployment(workdir: str | os.PathLike, num_supernodes: int, tls: bool = True, auth: bool | None = None,
                     fleet_proxy: bool | None = None, startup_timeout: float = 60.0,
                     node_config: Mapping[int, Mapping[str, Any]] | None = None) -> Iterator[Deployment]:
    """A SuperLink and ``num_supernodes`` SuperNodes as separate processes on 127.0.0.1.

    With ``tls`` the SuperLink serves certificates made by ``make_certificates`` and the SuperNodes
    and the ``flwr`` CLI trust their CA. With ``auth`` (default: = tls; Flower requires TLS for
    it) the SuperLink accepts only registered SuperNodes (``--enable-supernode-auth``): each
    SuperNode gets a key pair (``make_supernode_keys``), its public key is registered with
    ``flwr supernode register`` and it starts with its private key. With ``fleet_proxy`` (default:
    = tls) the SuperNodes reach the SuperLink through ``zofl.fleet_proxy`` on a port of its own, as
    docs/deploy.md's recipe does on a public address, so the Control API is served only to this
    machine. ``node_config``: more node config of SuperNode i (e.g. its own ``data-path``). Certificates and keys
    are made fresh each time (``force``: a folder used before keeps
    working; no link in it is followed). Key and state folders are
    owner-only. Every process is stopped when the block ends, also on SIGTERM or SIGHUP; if this
    process is SIGKILLed, the SuperLink and SuperNodes die with it (Linux: ``die_with_parent``)."""
    auth = tls if auth is None else auth
    if auth and not tls:
        raise ValueError("SuperNode authentication needs TLS (Flower refuses it on an insecure connection)")
    work = private_dir(Path(workdir))
    home = private_dir(work / "flwr-home")
    port = free_port()
    if tls:
        certs = make_certificates(work / "certs", force=True)
        security = f'root-certificates = "{certs["ca_cert"]}"'
        link_flags = ["--ssl-ca-certfile", str(certs["ca_cert"]), "--ssl-certfile", str(certs["cert"]),
                      "--ssl-keyfile", str(certs["key"])]
        node_flags = ["--root-certificates", str(certs["ca_cert"])]
    else:
        security, link_flags, node_flags = "insecure = true", ["--insecure"], ["--insecure"]
    if auth:
        link_flags.append("--enable-supernode-auth")
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "deploy"\n\n[superlink.deploy]\naddress = "127.0.0.1:{port}"\n{security}\n')
    env = flwr_env(home)
    fleet_proxy = tls if fleet_proxy is None else fleet_proxy
    dep = Deployment(work, env, port, fleet_port=free_port() if fleet_proxy else 0, node_flags=node_flags, auth=auth)
    with contextlib.ExitStack() as stack:
        stack.enter_context(exit_on_terminate())  # SIGTERM / SIGHUP still stop every process below

        def start(cmd: list[str], log_name: str) -> subprocess.Popen:
            log = stack.enter_context(open(work / log_name, "w"))
            proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, preexec_fn=die_with_parent)
            dep.procs.append(proc)
            return proc

        dep._start = start
        try:
            link = start([_bin("flower-superlink"), *link_flags, "--disable-runtime-dependency-installation",
                          "--host", "127.0.0.1", "--port", str(port), "--database", str(work / "state.db")],
                         "superlink.log")
            wait_for_port(port, startup_timeout, link)
            if fleet_proxy:
                front = start([sys.executable, "-m", "zofl.deploy", "fleet-proxy", "--listen",
                               f"127.0.0.1:{dep.fleet_port}", "--superlink", f"127.0.0.1:{port}",
                               *(["--certs", str(work / "certs")] if tls else [])], "fleet-proxy.log")
                wait_for_port(dep.fleet_port, startup_timeout, front)
            for i in range(num_supernodes):
                key = None
                if auth:
                    keys = make_supernode_keys(work / "keys", f"supernode-{i}", force=True)
                    dep.register(keys["public"])
                    key = keys["private"]
                dep.start_supernode(i, num_supernodes, key, extra=(node_config or {}).get(i))
            yield dep
        finally:
            for proc in reversed(dep.procs):  # SuperNodes first, then the SuperLink
                stop_process(proc)
            # what they started in sessions of its own (Flower's flwr-serverapp and ClientApp processes)
            # inherited FLWR_HOME = this private home: none outlives the block, whatever died first
            kill_descendants_by_env("FLWR_HOME", str(home))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m zofl.deploy", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("certs", help="write ca.crt, server.pem, server.key")
    c.add_argument("dir")
    c.add_argument("--host", action="append", help="name or IP address the SuperLink is reached at (repeat)")
    c.add_argument("--force", action="store_true", help="replace certificates already in DIR (else refused)")
    k = sub.add_parser("keys", help="write a SuperNode's key pair DIR/NAME (private, 0600) and DIR/NAME.pub")
    k.add_argument("dir")
    k.add_argument("name", help=KEY_NAME_RULE)
    k.add_argument("--force", action="store_true",
                   help="replace a key pair already in DIR (else refused: a SuperNode registered with it would be "
                        "locked out)")
    fp = sub.add_parser("fleet-proxy", help="serve only the Fleet API (SuperNodes) of a SuperLink on an address")
    fp.add_argument("--listen", default="0.0.0.0:9092", help="HOST:PORT the SuperNodes connect to")
    fp.add_argument("--superlink", default="127.0.0.1:9093", help="HOST:PORT of the SuperLink (keep it local)")
    fp.add_argument("--certs", help="the folder of `certs` (ca.crt, server.pem, server.key); omit for plain HTTP")
    fp.add_argument("--max-body-mb", type=float, default=DEFAULT_MAX_BODY_MB,
                    help="largest request body accepted, in MiB (default %(default)s: three times Flower's "
                         "5 MiB array chunk, the largest body a SuperNode sends; zofl.fleet_proxy says why)")
    loc = sub.add_parser("local", help="SuperLink + N SuperNodes on this machine, one run, then stop")
    loc.add_argument("dir", help="certificates, keys, the SuperLink's state and (unless the run-config sets "
                                 "output-dir) the results, in DIR/results/<run-name>/")
    loc.add_argument("--supernodes", type=int, default=3)
    loc.add_argument("--insecure", action="store_true", help="no TLS (and so no SuperNode authentication)")
    loc.add_argument("--run-config", default="", help="TOML key=value pairs, as for flwr run")
    args = ap.parse_args(argv)
    try:
        return command(args)
    except DeployError as e:
        print(f"python -m zofl.deploy {args.cmd}: {e}", file=sys.stderr)
        return 2


def host_port(flag: str, value: str) -> tuple[str, int]:
    """HOST:PORT of ``flag`` (HOST may be empty: all addresses), or DeployError."""
    host, _, port = value.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise DeployError(f"{flag} {value!r}: expected HOST:PORT with a port in 1..65535")
    return host, int(port)


def fleet_proxy_command(args: argparse.Namespace) -> int:
    """``fleet-proxy``: every flag and the certificates checked before anything listens."""
    host, port = host_port("--listen", args.listen)
    host_port("--superlink", args.superlink)
    if not args.max_body_mb > 0:
        raise DeployError(f"--max-body-mb {args.max_body_mb}: must be a positive number of MiB")
    if args.certs is not None and (problem := certs_problem(args.certs)):
        raise DeployError(problem)
    serve(host or "0.0.0.0", port, args.superlink, args.certs, max_body=int(args.max_body_mb * 2**20))
    return 0


def command(args: argparse.Namespace) -> int:
    """Run one subcommand; DeployError for bad input."""
    if args.cmd == "certs":
        paths = make_certificates(args.dir, tuple(args.host or ("127.0.0.1", "localhost")), force=args.force)
        print("\n".join(f"{k}: {v}" for k, v in paths.items()))
        return 0
    if args.cmd == "fleet-proxy":
        return fleet_proxy_command(args)
    if args.cmd == "keys":
        paths = make_supernode_keys(args.dir, args.name, force=args.force)
        print("\n".join(f"{k}: {v}" for k, v in paths.items()))
        return 0
    import tomllib
    run_config = tomllib.loads(args.run_config.replace(" ", "\n")) if args.run_config else {}
    run_config.setdefault("num-clients", args.supernodes)
    run_config.setdefault("output-dir", str(Path(args.dir).expanduser().resolve() / "results"))

    cfg = parse_config(run_config)  # a bad key: an error now, before any process starts
    run_config.setdefault("run-name", default_run_name(cfg.strategy, cfg.dataset))  # to find its summary
    out = Path(cfg.output_dir).expanduser() / run_config["run-name"]
    print(f"python -m zofl.deploy local: results in {out}", flush=True)
    before = run_stamps(out)
    with local_deployment(args.dir, args.supernodes, tls=not args.insecure) as dep:
        res = dep.run(run_config, capture=False)
    code, why = local_verdict(out, before, res.returncode)
    if why:
        print(f"python -m zofl.deploy local: {why}", file=sys.stderr)
    return code


def run_stamps(out: Path) -> dict[str, Any]:
    """Which versions of the run folder's config.json and summary.json are there before a run starts
    (``zofl.results.file_version``), for ``local_verdict`` to tell this run's files from an earlier run's."""
    return {name: file_version(out / name) for name in ("config.json", "summary.json")}


def local_verdict(out: Path, before: dict[str, Any], returncode: int) -> tuple[int, str | None]:
    """``local``'s exit code and, when the run failed, why (one line). ``flwr run`` exits 0 for a run that
    failed in the SuperLink, also for one its ServerApp refused (a run-name whose folder holds results), so
    the run folder decides, by the files this run wrote only (``zofl.results.run_outcome``, as ``zofl run`` does):
    an earlier run's summary.json in the same folder says nothing about this one."""
    summary, accepted = run_outcome(out, before)
    if not accepted:
        return 1, f"the run failed before its ServerApp accepted {out}; Flower's output above says why"
    if summary is None:
        return 1, f"the run failed: it wrote no summary.json in {out}; Flower's output above says why"
    if summary.get("failure"):
        return 1, f"the run failed: {summary['failure']}"
    return returncode, None


if __name__ == "__main__":
    sys.exit(main())
