"""The Fleet-only proxy under hostile requests (issue 30), and the deploy commands' input checks.

A real proxy (``python -m zofl.deploy fleet-proxy``, uvicorn, TLS with certificates of
``zofl.deploy certs``) stands in front of a recording upstream: a TLS HTTP server on a real port that
records the method, path, body and headers of every request it receives. Requests are written byte
for byte on a TLS socket, so nothing on the client side normalises their paths. Every hostile request
must be refused and never reach the upstream; every Fleet route must still go through with its body
intact. The proxy runs with a 1 MiB body limit (4 MiB for the memory test) so the over-limit bodies
stay cheap. No Flower process is started (tests/test_deploy.py runs real SuperNodes through the proxy).
"""
from __future__ import annotations

import http.client
import os
import socket
import ssl
import stat
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from zofl.deploy import main as deploy_main
from zofl.deploy import make_certificates
from zofl.fleet_proxy import DEFAULT_MAX_BODY_MB, FLEET_ROUTES
from zofl.launch import free_port

REPO = Path(__file__).resolve().parents[1]
MiB = 2**20
LIMIT_MB = 1
TIMEOUT = 30.0  # generous: a loaded machine (load 8 on 2 cores) must not fail these


# hop-by-hop headers (RFC 9110 7.6.1) the stand-in SuperLink adds to its reply when asked; x-upstream-hop is
# one because its Connection header names it. x-upstream-end is end-to-end: it must reach the client.
REPLY_HOP_BY_HOP = (("Connection", "keep-alive, X-Upstream-Hop"), ("X-Upstream-Hop", "secret"),
                    ("Keep-Alive", "timeout=5"), ("Proxy-Authenticate", "Basic realm=upstream"),
                    ("Proxy-Connection", "keep-alive"), ("Trailer", "X-Checksum"), ("Upgrade", "h2c"),
                    ("X-Upstream-End", "kept"))


class Recorder(BaseHTTPRequestHandler):
    """The stand-in SuperLink: records each request, answers 200 'upstream PATH'."""

    protocol_version = "HTTP/1.1"

    def handle_any(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        self.server.seen.append((self.command, self.path, body, {k.lower(): v for k, v in self.headers.items()}))
        reply = b"upstream " + self.path.encode("latin-1")
        self.send_response(200)
        self.send_header("content-type", "application/protobuf")
        self.send_header("content-length", str(len(reply)))
        if self.headers.get("x-test-reply-hop-by-hop"):  # a reply with hop-by-hop headers, for the proxy to drop
            for name, value in REPLY_HOP_BY_HOP:
                self.send_header(name, value)
        self.end_headers()
        self.wfile.write(reply)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = handle_any

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certificates(tmp_path_factory.mktemp("certs") / "certs")


@pytest.fixture(scope="module")
def upstream(certs):
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    server.daemon_threads = True
    server.seen = []
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certs["cert"], certs["key"])
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def start_proxy(certs, upstream_port: int, max_body_mb: float) -> tuple[subprocess.Popen, int]:
    """The real proxy command on a free port, once it answers TLS handshakes."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "zofl.deploy", "fleet-proxy", "--listen", f"127.0.0.1:{port}",
                             "--superlink", f"127.0.0.1:{upstream_port}", "--certs", str(certs["cert"].parent),
                             "--max-body-mb", str(max_body_mb)], cwd=REPO, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the proxy exited: {proc.stderr.read()}"
        try:
            connect(port, certs).close()
            return proc, port
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError("the proxy did not listen within 60 s")


@pytest.fixture(scope="module")
def proxy(certs, upstream):
    proc, port = start_proxy(certs, upstream.server_address[1], LIMIT_MB)
    yield port
    proc.terminate()
    proc.wait(30)


def connect(port: int, certs) -> ssl.SSLSocket:
    ctx = ssl.create_default_context(cafile=str(certs["ca_cert"]))
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    return ctx.wrap_socket(sock, server_hostname="127.0.0.1")


def raw_request(path: bytes, body: bytes = b"", method: bytes = b"POST", headers: tuple[bytes, ...] = ()) -> bytes:
    """A request exactly as written here (no client normalises the path)."""
    lines = [method + b" " + path + b" HTTP/1.1", b"Host: 127.0.0.1", b"Content-Type: application/protobuf",
             b"Content-Length: %d" % len(body), b"Connection: close", *headers]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def exchange(port: int, certs, data: bytes) -> tuple[int, bytes]:
    """Send ``data`` on a new TLS connection; (status, body) of the reply."""
    with connect(port, certs) as sock:
        sock.sendall(data)
        return read_reply(sock)


def read_reply(sock) -> tuple[int, bytes]:
    reply = http.client.HTTPResponse(sock)
    reply.begin()
    return reply.status, reply.read()


def control_bodies() -> dict[str, bytes]:
    """Real protobuf bodies of the Control API and of a stranger's node registration."""
    from flwr.proto.control_pb2 import ListRunsRequest, StartRunRequest
    from flwr.proto.fleet_pb2 import RegisterNodeFleetRequest

    return {"list-runs": ListRunsRequest().SerializeToString(),
            "start-run": StartRunRequest().SerializeToString(),
            "register-node": RegisterNodeFleetRequest(public_key=b"a stranger's key").SerializeToString()}


HOSTILE = [  # (raw path, method); all must be refused and never reach the upstream
    (b"/v1/control/list-runs", b"POST"),
    (b"/v1/fleet/%2e%2e/control/list-runs", b"POST"),  # the probe of issue 30: answered 200
    (b"/v1/fleet/%2E%2E/control/list-runs", b"POST"),
    (b"/v1/fleet/%2e%2e/control/start-run", b"POST"),
    (b"/v1/fleet/..%2fcontrol/list-runs", b"POST"),
    (b"/v1/fleet/%2e%2e%2fcontrol%2flist-runs", b"POST"),
    (b"/v1/fleet/../control/list-runs", b"POST"),
    (b"/v1/fleet/./../control/list-runs", b"POST"),
    (b"/v1/fleet/..\\control\\list-runs", b"POST"),
    (b"/v1/fleet%2fregister-node", b"POST"),
    (b"/v1/fleet/%72egister-node", b"POST"),  # decodes to a route, but is not one byte for byte
    (b"//v1/fleet/register-node", b"POST"),
    (b"/v1//fleet/register-node", b"POST"),
    (b"/v1/fleet//register-node", b"POST"),
    (b"/V1/FLEET/register-node", b"POST"),
    (b"/v1/fleet/Register-Node", b"POST"),
    (b"/v1/fleet/register-node/", b"POST"),
    (b"/v1/fleet/register-node;x=1", b"POST"),
    (b"/v1/fleet/register-node?x=1", b"POST"),
    (b"/v1/fleet/register-node?/../../control/list-runs", b"POST"),
    (b"/v1/fleet/register-node%00", b"POST"),
    (b"/v1/fleet/", b"POST"),
    (b"/v1/runtime/acquire-task", b"POST"),
    (b"/health", b"GET"),
    (b"/docs", b"GET"),
    (b"http://127.0.0.1/v1/fleet/../control/list-runs", b"POST"),
    (b"/v1/fleet/pull-messages", b"GET"),  # a route with a method it does not accept
    (b"/v1/fleet/pull-messages", b"PUT"),
]


@pytest.mark.parametrize("path,method", HOSTILE, ids=[f"{m.decode()} {p.decode('latin-1')}" for p, m in HOSTILE])
def test_a_hostile_request_is_refused_and_never_reaches_the_superlink(proxy, certs, upstream, path, method):
    body = control_bodies()["register-node" if b"register" in path else "list-runs"]
    before = len(upstream.seen)
    status, _ = exchange(proxy, certs, raw_request(path, body, method))
    assert status in (400, 403, 404, 405), (path, status)
    assert upstream.seen[before:] == []


def test_a_smuggled_second_request_does_not_reach_the_control_api(proxy, certs, upstream):
    """Content-Length and Transfer-Encoding together, a Control API request hidden in the body."""
    inner = raw_request(b"/v1/control/list-runs", control_bodies()["list-runs"])
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(inner), inner)
    data = (b"POST /v1/fleet/get-run HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" + chunked)
    before = len(upstream.seen)
    with connect(proxy, certs) as sock:
        sock.sendall(data)
        assert read_reply(sock)[0] == 400  # uvicorn refuses the ambiguous framing itself
        assert reply_status_or_none(sock) is None  # and no second reply: the connection is closed
    assert upstream.seen[before:] == []
    assert all(path in FLEET_ROUTES for _, path, _, _ in upstream.seen), upstream.seen


@pytest.mark.parametrize("route", sorted(FLEET_ROUTES))
def test_every_fleet_route_goes_through_with_its_body_and_signature_headers(proxy, certs, upstream, route):
    body = os.urandom(3000) + route.encode()
    auth = (b"flwr-public-key: cHVibGlj", b"flwr-signature: c2lnbmF0dXJl", b"flwr-timestamp: 2026-01-01T00:00:00")
    status, reply = exchange(proxy, certs, raw_request(route.encode(), body, headers=auth))
    assert (status, reply) == (200, b"upstream " + route.encode())
    method, path, seen_body, headers = upstream.seen[-1]
    assert (method, path, seen_body) == ("POST", route, body)
    assert headers["flwr-signature"] == "c2lnbmF0dXJl" and headers["flwr-public-key"] == "cHVibGlj"
    assert headers["content-type"] == "application/protobuf"


# hop-by-hop headers of a request (RFC 9110 7.6.1) and the headers its Connection headers name: none may reach
# the SuperLink
HOP_BY_HOP_REQUEST = (b"Connection: X-Hop-A, x-hop-b", b"Connection: X-Hop-C ,Upgrade", b"X-Hop-A: 1", b"X-Hop-B: 2",
                      b"X-Hop-C: 3", b"Proxy-Authorization: Basic dXNlcjpzZWNyZXQ=", b"Keep-Alive: timeout=300",
                      b"Proxy-Connection: keep-alive", b"TE: trailers", b"Trailer: X-Checksum", b"Upgrade: h2c")
HOP_NAMES = {"x-hop-a", "x-hop-b", "x-hop-c", "proxy-authorization", "keep-alive", "proxy-connection",
             "te", "trailer", "transfer-encoding", "upgrade", "proxy-authenticate", "x-checksum", "x-sneaked-in"}


def test_hop_by_hop_request_headers_and_those_connection_names_never_reach_the_superlink(proxy, certs, upstream):
    """The proxy passed Proxy-Authorization and every header named in Connection on to the SuperLink; a proxy
    consumes them (RFC 9110 7.6.1). End-to-end headers (the signature) still go through."""
    body = os.urandom(500)
    headers = (*HOP_BY_HOP_REQUEST, b"flwr-signature: c2lnbmF0dXJl", b"X-End: kept")
    assert exchange(proxy, certs, raw_request(b"/v1/fleet/get-run", body, headers=headers)) == \
        (200, b"upstream /v1/fleet/get-run")
    _, path, seen_body, seen = upstream.seen[-1]
    assert (path, seen_body) == ("/v1/fleet/get-run", body)
    assert not HOP_NAMES & set(seen), sorted(HOP_NAMES & set(seen))
    assert seen.get("connection", "keep-alive") == "keep-alive", seen  # the proxy's own hop (httpx), not the client's
    assert seen["flwr-signature"] == "c2lnbmF0dXJl" and seen["x-end"] == "kept"


def test_chunked_trailers_never_reach_the_superlink(proxy, certs, upstream):
    """uvicorn adds a chunked body's trailer fields to the request's headers once the body is read; a
    proxy that took the headers after the body forwarded them as if the client had sent them as headers."""
    body = os.urandom(3000)
    data = (b"POST /v1/fleet/push-object HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Type: application/protobuf\r\nTrailer: X-Checksum, X-Sneaked-In\r\nConnection: close\r\n\r\n"
            + b"%x\r\n%s\r\n" % (len(body), body)
            + b"0\r\nX-Checksum: abc\r\nX-Sneaked-In: 1\r\nflwr-signature: forged\r\n\r\n")
    assert exchange(proxy, certs, data)[0] == 200
    _, path, seen_body, seen = upstream.seen[-1]
    assert (path, seen_body) == ("/v1/fleet/push-object", body)
    assert not HOP_NAMES & set(seen) and "flwr-signature" not in seen, sorted(seen.items())
    assert seen.get("connection", "keep-alive") == "keep-alive", seen


def test_hop_by_hop_reply_headers_of_the_superlink_never_reach_the_client(proxy, certs, upstream):
    with connect(proxy, certs) as sock:
        sock.sendall(raw_request(b"/v1/fleet/get-run", b"x", headers=(b"X-Test-Reply-Hop-By-Hop: 1",)))
        reply = http.client.HTTPResponse(sock)
        reply.begin()
        assert (reply.status, reply.read()) == (200, b"upstream /v1/fleet/get-run")
        got = {k.lower(): v for k, v in reply.getheaders()}
    assert upstream.seen[-1][3]["x-test-reply-hop-by-hop"] == "1"
    assert got["x-upstream-end"] == "kept"
    assert not {"x-upstream-hop", "keep-alive", "proxy-authenticate", "proxy-connection", "trailer", "upgrade"} & \
        set(got), got
    assert got.get("connection", "close") == "close", got  # uvicorn's own, never the SuperLink's


def test_a_body_just_under_the_limit_goes_through_intact_declared_or_chunked(proxy, certs, upstream):
    body = os.urandom(LIMIT_MB * MiB - 1024)
    assert exchange(proxy, certs, raw_request(b"/v1/fleet/push-object", body))[0] == 200
    assert upstream.seen[-1][1:3] == ("/v1/fleet/push-object", body)
    head = (b"POST /v1/fleet/push-object HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Type: application/protobuf\r\nConnection: close\r\n\r\n")
    parts = [body[i:i + 100_000] for i in range(0, len(body), 100_000)]
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
    assert exchange(proxy, certs, head + chunked)[0] == 200
    assert upstream.seen[-1][1:3] == ("/v1/fleet/push-object", body)


def test_a_declared_body_over_the_limit_is_refused_before_it_is_sent(proxy, certs, upstream):
    before = len(upstream.seen)
    head = (b"POST /v1/fleet/push-messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/protobuf\r\n"
            b"Content-Length: %d\r\n\r\n" % (400 * MiB))
    with connect(proxy, certs) as sock:
        sock.sendall(head)  # no body: the proxy must answer without waiting for it
        assert read_reply(sock)[0] == 413
    assert upstream.seen[before:] == []


def send_chunked(sock, total: int, piece: int = 64 * 1024) -> int:
    """Send ``total`` bytes as chunks of ``piece`` (no final chunk); the bytes sent before the proxy
    closed the connection."""
    sock.sendall(b"POST /v1/fleet/push-messages HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
                 b"Content-Type: application/protobuf\r\n\r\n")
    data, sent = b"\0" * piece, 0
    try:
        while sent < total:
            n = min(piece, total - sent)
            sock.sendall(b"%x\r\n%s\r\n" % (n, data[:n]))
            sent += n
    except OSError:  # the proxy answered 413 and closed
        pass
    return sent


def test_a_chunked_body_over_the_limit_is_cut_off(proxy, certs, upstream):
    before = len(upstream.seen)
    with connect(proxy, certs) as sock:
        send_chunked(sock, LIMIT_MB * MiB + 1)  # one byte over: the proxy reads all of it, then refuses
        assert read_reply(sock)[0] == 413
    assert upstream.seen[before:] == []


def peak_rss(pid: int) -> int:
    """The process's peak resident memory (VmHWM), bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_the_proxys_memory_stays_bounded_under_a_huge_chunked_body(certs, upstream):
    """The old proxy buffered a 400 MB body whole (1.27 GB peak); now at most the limit is held."""
    limit_mb = 4
    proc, port = start_proxy(certs, upstream.server_address[1], limit_mb)
    try:
        before = len(upstream.seen)
        assert exchange(port, certs, raw_request(b"/v1/fleet/get-run", b"warm-up"))[0] == 200
        base = peak_rss(proc.pid)
        with connect(port, certs) as sock:
            send_chunked(sock, 64 * MiB)  # the rest after the refusal is read and dropped by uvicorn, not held
            status = reply_status_or_none(sock)
        growth = peak_rss(proc.pid) - base
        assert status in (413, None), status  # None: the connection was reset under the refused bytes
        assert growth < 2 * limit_mb * MiB, f"peak RSS grew by {growth / MiB:.1f} MiB"
        assert [p for _, p, _, _ in upstream.seen[before:]] == ["/v1/fleet/get-run"]
    finally:
        proc.terminate()
        proc.wait(30)


def reply_status_or_none(sock) -> int | None:
    """The reply's status, or None if the connection was reset before it could be read."""
    try:
        return read_reply(sock)[0]
    except (OSError, http.client.HTTPException):
        return None


def test_the_route_table_is_flowers_fleet_router():
    """FLEET_ROUTES is written out (an allow-list); a Flower upgrade that changes the Fleet API must
    change it too, or SuperNodes would be refused a route, or a new one let through unreviewed."""
    from flwr.superlink.routers.fleet.router import router

    assert {r.path: frozenset(r.methods) for r in router.routes} == FLEET_ROUTES


def test_the_default_limit_holds_flowers_largest_request_for_a_large_model():
    """The largest body a SuperNode sends for a reply is one array chunk (5 MiB), whatever the model:
    measured with Flower's own serialisation for a 24 MB array and for a 1,000-array model."""
    from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
    from flwr.app.message.message import remove_content_from_message
    from flwr.common.serde import message_to_proto
    from flwr.proto.fleet_pb2 import PushMessagesRequest
    from flwr.proto.message_pb2 import PushObjectRequest
    from flwr.proto.node_pb2 import Node
    from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects, get_object_tree
    from flwr.supercore.task_identity import TaskIdentity

    def largest_body(arrays: dict[str, np.ndarray]) -> int:
        content = RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in arrays.items()}),
                              "metrics": MetricRecord({"num-examples": 10**9, "loss": 0.5})})
        msg = Message(content, dst_node_id=2**63 - 1, message_type="train")
        node, big = Node(node_id=2**63 - 1), 2**63 - 1
        objects = max(PushObjectRequest(node=node, run_id=big, object_id=oid, object_content=obj.deflate(),
                                        session_id="s" * 64).ByteSize()
                      for oid, obj in get_all_nested_objects(msg).items())
        push = PushMessagesRequest(node=node, messages_list=[message_to_proto(remove_content_from_message(msg))],
                                   message_object_trees=[get_object_tree(msg)], clientapp_runtime_list=[1.0])
        return max(objects, push.ByteSize())

    saved = TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id
    TaskIdentity.run_id = TaskIdentity.node_id = 2**63 - 1
    TaskIdentity.task_id = 1
    try:
        one_big = largest_body({"w": np.random.default_rng(0).random(6_000_000, dtype=np.float32)})
        many = largest_body({f"layer{i}": np.zeros(100) for i in range(1000)})
    finally:
        TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved
    assert 5 * MiB < one_big < 5 * MiB + 4096
    assert many < MiB
    assert max(one_big, many) < DEFAULT_MAX_BODY_MB * MiB / 2


@pytest.mark.parametrize("missing", ["folder", "ca.crt", "server.key"])
def test_fleet_proxy_without_certificates_is_a_one_line_error_before_it_listens(tmp_path, missing):
    certs = tmp_path / "certs"
    if missing != "folder":
        make_certificates(certs)
        (certs / missing).unlink()
    port = free_port()
    res = subprocess.run([sys.executable, "-m", "zofl.deploy", "fleet-proxy", "--listen", f"127.0.0.1:{port}",
                          "--certs", str(certs)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "--certs" in res.stderr and (missing if missing != "folder" else "no such folder") in res.stderr
    assert "zofl.deploy certs" in res.stderr


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("cmd", ["keys", "certs"])
def test_keys_and_certs_refuse_a_shared_folder_and_leave_it_as_it_was(tmp_path, capsys, cmd):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp
    assert deploy_main([cmd, str(shared), *(["node"] if cmd == "keys" else [])]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "world-writable" in err and str(shared) in err
    assert mode(shared) == 0o1777 and list(shared.iterdir()) == []


def test_keys_never_chmod_a_folder_they_did_not_create(tmp_path, capsys):
    own = tmp_path / "own"
    own.mkdir()
    own.chmod(0o755)
    assert deploy_main(["keys", str(own), "node"]) == 0
    assert mode(own) == 0o755 and mode(own / "node") == 0o600
    assert deploy_main(["keys", str(tmp_path / "new" / "keys"), "node"]) == 0
    assert mode(tmp_path / "new" / "keys") == 0o700 and mode(tmp_path / "new" / "keys" / "node") == 0o600


# -- keys and certificates: a plain NAME, nothing replaced silently, no link followed (issue 47) --------------------
KEY_FILES = ("node", "node.pub")
CERT_NAMES = ("ca.crt", "ca.key", "server.pem", "server.key")


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and not p.is_symlink()}


@pytest.mark.parametrize("name", ["../../x", "ABSOLUTE", "a/b", "sub/", ".", "..", "", "-x", "--force", ".hidden",
                                  "x" * 65, "a b", "x\n", "k\u00e9y", "a\\b", "a:b", "*"])
def test_keys_refuse_a_name_that_is_not_a_plain_file_name(tmp_path, capsys, name):
    """NAME was trusted: ``../../x`` or an absolute path wrote the key pair outside DIR."""
    keys = tmp_path / "a" / "keys"
    name = str(tmp_path / "abs-key") if name == "ABSOLUTE" else name
    assert deploy_main(["keys", str(keys), "--", name]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("python -m zofl.deploy keys: NAME ") and "must be a plain file name" in err, err
    assert "at most 64 characters" in err and "not starting with '.' or '-'" in err, err
    assert not keys.exists()  # refused before anything is made
    assert sorted(p.name for p in tmp_path.rglob("*")) == [] and not (tmp_path.parent / "x").exists()


def test_keys_accept_the_plain_names_they_always_did(tmp_path):
    for name in ("supernode-0", "node_1", "n.2", "x" * 64, "0"):
        assert deploy_main(["keys", str(tmp_path / "keys"), name]) == 0
        assert mode(tmp_path / "keys" / name) == 0o600 and (tmp_path / "keys" / f"{name}.pub").is_file()


@pytest.mark.parametrize("existing", ["both", "node", "node.pub"])
def test_keys_never_replace_a_key_without_force(tmp_path, capsys, existing):
    """Running ``keys`` twice silently replaced the private key (the SuperNode registered with the old one
    could not authenticate again); an existing private key or .pub is now refused, before either is written."""
    keys = tmp_path / "keys"
    assert deploy_main(["keys", str(keys), "node"]) == 0
    if existing != "both":
        (keys / next(n for n in KEY_FILES if n != existing)).unlink()
    before = snapshot(keys)
    capsys.readouterr()
    assert deploy_main(["keys", str(keys), "node"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--force" in err, err
    assert str(keys / ("node" if existing != "node.pub" else "node.pub")) + " exists" in err, err
    assert snapshot(keys) == before  # the half that was missing is not written either
    assert deploy_main(["keys", str(keys), "node", "--force"]) == 0
    after = snapshot(keys)
    assert sorted(after) == sorted(KEY_FILES) and all(after[n] != before.get(n) for n in KEY_FILES)
    assert mode(keys / "node") == 0o600


@pytest.mark.parametrize("cmd,planted", [("keys", "node"), ("keys", "node.pub"), ("certs", "ca.crt"),
                                         ("certs", "server.key"), ("certs", "server.pem")])
@pytest.mark.parametrize("target", ["a file", "no file"])
def test_keys_and_certs_never_write_through_a_planted_link(tmp_path, capsys, cmd, planted, target):
    """A symbolic link planted at DIR/NAME.pub (or a certificate's name) was followed and its target
    overwritten: now it is refused, and with --force the link itself is replaced, its target left alone."""
    folder = tmp_path / "keys"
    folder.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    if target == "a file":
        victim.write_text("precious")
    (folder / planted).symlink_to(victim)
    argv = [cmd, str(folder), *(["node"] if cmd == "keys" else [])]
    assert deploy_main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"{folder / planted} exists" in err, err
    assert (folder / planted).is_symlink() and snapshot(folder) == {}
    assert deploy_main([*argv, "--force"]) == 0
    assert not (folder / planted).is_symlink() and (folder / planted).is_file()
    assert victim.read_text() == "precious" if target == "a file" else not victim.exists()
    assert sorted(snapshot(folder)) == sorted(KEY_FILES if cmd == "keys" else CERT_NAMES)


def test_certs_never_replace_certificates_without_force(tmp_path, capsys):
    certs = tmp_path / "certs"
    assert deploy_main(["certs", str(certs)]) == 0
    before = snapshot(certs)
    (certs / "ca.key").unlink()
    capsys.readouterr()
    assert deploy_main(["certs", str(certs)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"{certs / 'ca.crt'} exists" in err and "--force" in err, err
    assert snapshot(certs) == {k: v for k, v in before.items() if k != "ca.key"}
    assert deploy_main(["certs", str(certs), "--force"]) == 0
    after = snapshot(certs)
    assert sorted(after) == sorted(CERT_NAMES) and all(after[n] != before[n] for n in CERT_NAMES)
    assert mode(certs / "ca.key") == mode(certs / "server.key") == 0o600


def test_every_key_and_certificate_file_is_created_new_without_following_links(tmp_path, monkeypatch):
    """Every file of ``keys`` and ``certs`` is opened O_CREAT|O_EXCL|O_NOFOLLOW (a private one 0600 from its
    first byte), also with force: what is there is removed by name first, never opened."""
    from zofl.deploy import make_supernode_keys

    opened, real_open = [], os.open

    def spy(path, flags, mode=0o777, *args, **kw):
        opened.append((Path(path).name, flags, mode))
        return real_open(path, flags, mode, *args, **kw)

    monkeypatch.setattr(os, "open", spy)
    for force in (False, True):
        make_supernode_keys(tmp_path / "keys", "node", force=force)
        make_certificates(tmp_path / "certs", force=force)
    mine = [(n, f, m) for n, f, m in opened if n in KEY_FILES + CERT_NAMES]
    assert sorted(n for n, _, _ in mine) == sorted((KEY_FILES + CERT_NAMES) * 2)
    must = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    assert all(f & must == must for _, f, _ in mine), mine
    assert all(m == 0o600 for n, _, m in mine if n in ("node", "ca.key", "server.key")), mine
