"""A Fleet-only front for a SuperLink: the public address serves SuperNodes and nothing else.

In Flower 1.42 one SuperLink port serves three HTTP APIs: the Fleet API (SuperNodes, paths
``/v1/fleet/...``), the Control API (``flwr run``, ``flwr ls``, ``flwr stop``, ``flwr supernode
register``: ``/v1/control/...``) and the ServerApp runtime API; account login for the Control API is
Flower Enterprise only, and ``--control-api-address`` is deprecated. So a SuperLink bound to a public
address lets anyone who holds ``ca.crt`` (every client machine does) submit runs, i.e. code, to every
SuperNode. The remedy here: bind the SuperLink to 127.0.0.1 and put this proxy on the public
address. It terminates TLS with the SuperLink's certificate and forwards a request to the SuperLink
(TLS, verified against the CA) only if it is one of Flower's Fleet routes (``FLEET_ROUTES``) with the
route's method; everything else is answered 403 (405 for a wrong method) and never reaches the
SuperLink. SuperNode authentication still works through it: a SuperNode signs its requests itself
(headers passed on unchanged), and the SuperLink checks the signatures. Hop-by-hop headers
(``end_to_end``: Connection, Proxy-Authorization, TE, ... and every header a Connection header names)
are dropped in both directions, as a proxy must, and a chunked body's trailer fields are never
forwarded (nor taken for headers).

The route check is exact, on the raw bytes of the request line's path as well as on the decoded
path: a prefix check on the decoded path let ``/v1/fleet/%2e%2e/control/list-runs`` through (httpx
removed the dot segments when it forwarded it, so the SuperLink served its Control API). Any
percent-escape, dot segment, doubled slash, other case, backslash, ``;`` parameter or query string
makes a path that is not byte for byte a route, so it is refused; and the upstream request is built
from the route table's own string, never from the client's path.

Request bodies are read as a stream and refused with 413 beyond ``max_body`` bytes (a declared
Content-Length over it: at once, unread), so a client cannot make the proxy buffer more than that per
request. Replies of the SuperLink are not limited: it is local and trusted, and its largest reply
(a FAB, at most 10 MB in Flower; an object chunk, 5 MiB) is bounded by Flower itself.

    python -m zofl.deploy fleet-proxy --listen 0.0.0.0:9092 --superlink 127.0.0.1:9093 --certs certs

httpx and uvicorn are Flower's own dependencies.
"""
from __future__ import annotations

import contextlib
import ssl
from pathlib import Path

# Flower 1.42's Fleet REST routes (flwr/superlink/routers/fleet/router.py: one @router.post each, under
# prefix /v1/fleet), the only requests a SuperNode sends (flwr/supernode/fleet_http_client.py).
# tests/test_fleet_proxy.py compares this table with the installed Flower's router.
FLEET_ROUTES: dict[str, frozenset[str]] = {
    f"/v1/fleet/{name}": frozenset({"POST"})
    for name in ("register-node", "activate-node", "deactivate-node", "unregister-node", "send-node-heartbeat",
                 "pull-messages", "push-messages", "get-run", "get-fab", "push-object", "pull-object",
                 "confirm-message-received")
}

# The default body limit. Flower 1.42 sends a SuperNode's reply as one push-messages request (the
# message's metadata and object tree: ids only, about 140 bytes per array, no array data) and then one
# push-object request per object, and it splits every array into chunks of at most
# FLWR_PRIVATE_MAX_ARRAY_CHUNK_SIZE = 5 MiB. So the largest legitimate request body is about 5 MiB +
# 300 bytes whatever the model's size, measured with Flower's own serialisation: 5,243,059 bytes for a
# 24 MB or a 64 MB array; 246,065 for the App's largest built-in model (softmax on CIFAR-10's 3,072
# features, 30,720 float64 parameters); 137,355 for the push-messages of a 1,000-array model
# (tests/test_fleet_proxy.py measures it again). 16 MiB is three times the chunk, with room for the
# object tree of ~100,000 arrays. Raise it (--max-body-mb) if the SuperNodes set a larger
# FLWR_PRIVATE_MAX_ARRAY_CHUNK_SIZE or the App sends ConfigRecords or MetricRecords of megabytes (they
# travel whole, as one object each).
DEFAULT_MAX_BODY_MB = 16.0
CERT_FILES = ("ca.crt", "server.pem", "server.key")

# hop-by-hop headers (RFC 9110 7.6.1; Proxy-Connection: the old non-standard one): they concern one connection,
# so a proxy consumes them and never passes them on, in either direction; so is every header a Connection header
# names (``end_to_end``). Proxy-Authorization would hand the client's proxy credentials to the SuperLink.
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"proxy-authenticate",
                        b"proxy-authorization", b"te", b"trailer", b"transfer-encoding", b"upgrade"})
# and those the next hop sets again itself (httpx and uvicorn frame the body, httpx decodes it and names the host)
REFRAMED = frozenset({b"host", b"content-length", b"content-encoding", b"expect"})


class BodyTooLarge(Exception):
    """The request body is over the limit (declared or read)."""


class ClientGone(Exception):
    """The client disconnected before its body was read."""


def route_of(scope) -> tuple[int, str]:
    """(0, the canonical route) for an allowed request, else (HTTP status, reason).

    The raw path (bytes as sent, no decoding) and the decoded path must both be exactly a route of
    ``FLEET_ROUTES``, with no query string, so nothing an HTTP stack might normalise later can differ
    from what was checked."""
    raw = scope.get("raw_path")
    if not isinstance(raw, bytes):
        return 403, "no raw path"
    route = raw.decode("latin-1")
    if route not in FLEET_ROUTES or scope.get("path") != route or scope.get("query_string"):
        return 403, "only the Fleet API (SuperNodes) is served on this address"
    if scope.get("method") not in FLEET_ROUTES[route]:
        return 405, f"{route} accepts {', '.join(sorted(FLEET_ROUTES[route]))} only"
    return 0, route


def end_to_end(headers) -> list[tuple[bytes, bytes]]:
    """The headers a proxy passes on (RFC 9110 7.6.1): all but the hop-by-hop ones (``HOP_BY_HOP``), those
    named in a Connection header (``Connection: close, X-Secret`` makes X-Secret hop-by-hop) and those the next
    hop sets again itself (``REFRAMED``). Names compare case-insensitively; every Connection header counts."""
    named = {token.strip().lower() for name, value in headers if name.lower() == b"connection"
             for token in value.split(b",")}
    drop = HOP_BY_HOP | REFRAMED | named
    return [(name, value) for name, value in headers if name.lower() not in drop]


def ambiguous_framing(headers) -> bool:
    """Both Content-Length and Transfer-Encoding: two parsers may end the body at different bytes and read a
    request hidden in it as a second one (smuggling). RFC 9112 6.3 lets a server refuse it and requires it to
    close the connection; ``answer`` does both, whichever of uvicorn's parsers read the request."""
    names = {name.lower() for name, _ in headers}
    return b"content-length" in names and b"transfer-encoding" in names


def declared_length(headers) -> int | None:
    """The Content-Length the client declared (None: chunked or absent; the stream is then counted)."""
    values = [v for k, v in headers if k.lower() == b"content-length"]
    if not values:
        return None
    try:
        return int(values[0])
    except ValueError:  # uvicorn refuses these before the app; never trust it anyway
        return None


async def read_body(receive, max_body: int) -> bytes:
    """The request body, read chunk by chunk; BodyTooLarge as soon as it passes ``max_body`` bytes, so
    no more than ``max_body`` (+ one network chunk) is ever held."""
    parts, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_body:
            raise BodyTooLarge
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)


async def answer(send, status: int, text: str) -> None:
    """A plain-text reply that closes the connection (the rest of a refused body is never read)."""
    body = f"zofl fleet proxy: {text}\n".encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def fleet_only_app(upstream: str, ca_cert: str | Path | None, max_body: int = int(DEFAULT_MAX_BODY_MB * 2**20)):
    """The ASGI app: Flower's Fleet routes forwarded to ``upstream`` (https://host:port), the rest
    refused; request bodies over ``max_body`` bytes refused with 413; hop-by-hop headers dropped both ways.
    Serve it with uvicorn's h11 parser, as ``serve`` does (httptools passes trailers off as headers)."""
    import httpx

    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(ca_cert)) if ca_cert else True
    client = httpx.AsyncClient(base_url=upstream, verify=verify, timeout=None)

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            return await lifespan(receive, send)
        if scope["type"] != "http":
            return None  # websockets: refused by not accepting
        status, route = route_of(scope)
        if status:
            return await answer(send, status, route)
        if ambiguous_framing(scope["headers"]):
            return await answer(send, 400, "Content-Length and Transfer-Encoding together: the body's end is "
                                           "ambiguous (RFC 9112 6.3), a request smuggling attempt")
        length = declared_length(scope["headers"])
        if length is not None and length > max_body:
            return await answer(send, 413, f"request body of {length} bytes is over the limit of {max_body}")
        # the header section only: a chunked body's trailer fields are never forwarded (``serve``: h11 drops
        # them; httptools would append them to scope["headers"] as headers) and the body goes on with a length
        headers = end_to_end(list(scope["headers"]))
        try:
            body = await read_body(receive, max_body)
        except BodyTooLarge:
            return await answer(send, 413, f"request body over the limit of {max_body} bytes")
        except ClientGone:
            return None
        try:
            reply = await client.request(scope["method"], route, content=body, headers=headers)
        except httpx.HTTPError as e:
            return await answer(send, 502, f"the SuperLink did not answer ({type(e).__name__})")
        out = end_to_end(reply.headers.raw)
        out.append((b"content-length", str(len(reply.content)).encode()))
        await send({"type": "http.response.start", "status": reply.status_code, "headers": out})
        await send({"type": "http.response.body", "body": reply.content})

    async def lifespan(receive, send):
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                with contextlib.suppress(Exception):
                    await client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    return app


def certs_problem(certs: str | Path) -> str | None:
    """Why the certificate folder cannot serve TLS (a missing or unreadable file, a key that does not
    fit the certificate), or None; checked before anything listens, so a mistake is one line, not a
    traceback."""
    d = Path(certs)
    if not d.is_dir():
        return f"--certs {d}: no such folder; make one with `python -m zofl.deploy certs {d}`"
    for name in CERT_FILES:
        if not (d / name).is_file():
            return (f"--certs {d}: {name} is missing (needs {', '.join(CERT_FILES)}); "
                    f"make them with `python -m zofl.deploy certs {d}`")
    try:
        ssl.create_default_context(cafile=str(d / "ca.crt"))
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(str(d / "server.pem"), str(d / "server.key"))
    except (OSError, ssl.SSLError) as e:
        return f"--certs {d}: ca.crt, server.pem or server.key is unreadable or they do not match ({e})"
    return None


def serve(listen_host: str, listen_port: int, superlink: str, certs: str | Path | None,
          max_body: int = int(DEFAULT_MAX_BODY_MB * 2**20)) -> None:
    """Serve until stopped (SIGINT / SIGTERM). ``certs``: the folder of ``zofl.deploy certs``
    (ca.crt, server.pem, server.key; check it with ``certs_problem`` first); None for a plain-HTTP
    SuperLink (a trusted network only)."""
    import uvicorn

    tls = {}
    if certs is not None:
        d = Path(certs)
        tls = {"ssl_certfile": str(d / "server.pem"), "ssl_keyfile": str(d / "server.key")}
    scheme = "https" if certs is not None else "http"
    app = fleet_only_app(f"{scheme}://{superlink}", Path(certs) / "ca.crt" if certs is not None else None, max_body)
    # h11, not httptools: uvicorn's httptools parser appends a chunked body's trailer fields to the request's
    # headers (scope["headers"], already before the app runs when they arrive together), where they could not be
    # told from headers and would be forwarded, e.g. a second flwr-signature; h11 keeps trailers apart and
    # uvicorn drops them
    uvicorn.run(app, host=listen_host, port=listen_port, log_level="warning", lifespan="on", http="h11", **tls)
