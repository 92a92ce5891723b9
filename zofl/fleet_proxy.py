"""A Fleet-only front for a SuperLink: the public address serves SuperNodes and nothing else.

In Flower 1.41 one SuperLink port serves three HTTP APIs: the Fleet API (SuperNodes, paths
``/v1/fleet/...``), the Control API (``flwr run``, ``flwr ls``, ``flwr stop``, ``flwr supernode
register``: ``/v1/control/...``) and the ServerApp runtime API; account login for the Control API is
Flower Enterprise only, and ``--control-api-address`` is deprecated. So a SuperLink bound to a public
address lets anyone who holds ``ca.crt`` (every client machine does) submit runs, i.e. code, to every
SuperNode. The remedy here: bind the SuperLink to 127.0.0.1 and put this proxy on the public
address. It terminates TLS with the SuperLink's certificate, forwards requests whose path starts
with ``/v1/fleet/`` to the SuperLink (TLS, verified against the CA), and answers everything else
with 403. SuperNode authentication still works through it: a SuperNode signs its requests itself
(headers passed on unchanged), and the SuperLink checks the signatures.

    python -m zofl.deploy fleet-proxy --listen 0.0.0.0:9092 --superlink 127.0.0.1:9093 --certs certs

Starlette, httpx and uvicorn are Flower's own dependencies.
"""
from __future__ import annotations

import contextlib
import ssl
from pathlib import Path

FLEET_PREFIX = "/v1/fleet/"
# hop-by-hop headers, and those httpx undoes (it decodes the body and sets the length again)
DROP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "content-encoding"}


def fleet_only_app(upstream: str, ca_cert: str | Path | None):
    """The ASGI app: ``/v1/fleet/...`` forwarded to ``upstream`` (https://host:port), the rest refused."""
    import httpx
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(ca_cert)) if ca_cert else True
    client = httpx.AsyncClient(base_url=upstream, verify=verify, timeout=None)

    async def forward(request: Request) -> Response:
        if not request.url.path.startswith(FLEET_PREFIX):
            return Response("zofl fleet proxy: only the Fleet API (SuperNodes) is served on this address\n",
                            status_code=403, media_type="text/plain")
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in DROP]
        upstream_reply = await client.request(request.method, request.url.path, params=request.query_params,
                                              content=await request.body(), headers=headers)
        return Response(upstream_reply.content, status_code=upstream_reply.status_code,
                        headers={k: v for k, v in upstream_reply.headers.items() if k.lower() not in DROP})

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        await client.aclose()

    methods = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    return Starlette(routes=[Route("/{path:path}", forward, methods=methods)], lifespan=lifespan)


def serve(listen_host: str, listen_port: int, superlink: str, certs: str | Path | None) -> None:
    """Serve until stopped (SIGINT / SIGTERM). ``certs``: the folder of ``zofl.deploy certs``
    (ca.crt, server.pem, server.key); None for a plain-HTTP SuperLink (a trusted network only)."""
    import uvicorn

    tls = {}
    if certs is not None:
        d = Path(certs)
        tls = {"ssl_certfile": str(d / "server.pem"), "ssl_keyfile": str(d / "server.key")}
    scheme = "https" if certs is not None else "http"
    app = fleet_only_app(f"{scheme}://{superlink}", Path(certs) / "ca.crt" if certs is not None else None)
    uvicorn.run(app, host=listen_host, port=listen_port, log_level="warning", **tls)
