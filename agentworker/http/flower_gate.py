"""Flower behind basic auth on every path: ``python -m agentworker.http.flower_gate``.

Flower checks its password on its pages and API, but answers ``/metrics`` and
``/healthcheck`` to anyone. The gate runs Flower on a loopback port of its own container
(``--address=127.0.0.1``) and serves the only reachable port itself: every request must
carry one of the ``FLOWER_BASIC_AUTH`` credentials (``user:password``, comma separated),
then it is forwarded. Flower still checks the same password behind it. When Flower exits,
the gate exits too, so the container's restart policy brings both back.

Options (environment): ``FLOWER_GATE_PORT`` (5555), ``FLOWER_GATE_UPSTREAM_PORT`` (5556).
Extra arguments are passed to ``celery -A agentworker flower``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

#: Largest request body forwarded to Flower (its API takes small JSON or forms).
MAX_BODY = 64 * 1024
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "upgrade", "host", "content-length"}


def allowed(header: str | None, credentials: list[str]) -> bool:
    """True when an ``Authorization: Basic`` header names one of ``credentials``."""
    scheme, _, value = (header or "").partition(" ")
    if scheme.lower() != "basic" or not credentials:
        return False
    try:
        given = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        return False
    # Every credential is compared, so timing does not tell which one nearly matched.
    matches = [hmac.compare_digest(given, c.encode()) for c in credentials]
    return any(matches)


def credentials_from(raw: str | None) -> list[str]:
    """``FLOWER_BASIC_AUTH``: ``user:password`` pairs, comma separated."""
    return [c for c in (raw or "").split(",") if ":" in c]


def create_gate(upstream: str, credentials: list[str]) -> Starlette:
    """The gate app: 401 without a listed credential, else the request forwarded."""
    challenge = {"WWW-Authenticate": 'Basic realm="flower"'}

    async def forward(request: Request) -> Response:
        if not allowed(request.headers.get("authorization"), credentials):
            return Response("authentication required\n", status_code=401, headers=challenge)
        announced = int(request.headers.get("content-length") or 0)
        if announced > MAX_BODY:
            return Response("body too large\n", status_code=413)
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY:
                return Response("body too large\n", status_code=413)
        url = upstream + request.url.path + (f"?{request.url.query}" if request.url.query else "")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        status, out_headers, content = await run_in_threadpool(
            _send, url, request.method, headers, body or None
        )
        return Response(content, status_code=status, headers=out_headers)

    methods = ["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"]
    return Starlette(routes=[Route("/{path:path}", forward, methods=methods)])


def _send(
    url: str, method: str, headers: dict[str, str], body: bytes | None
) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - loopback only
            return answer.status, _keep(answer.headers.items()), answer.read()
    except urllib.error.HTTPError as error:
        return error.code, _keep(error.headers.items()), error.read()
    except OSError:
        return 502, {}, b"flower does not answer\n"


def _keep(items: Any) -> dict[str, str]:
    return {k: v for k, v in items if k.lower() not in HOP_BY_HOP}


def _die_with_parent() -> None:
    """Flower gets SIGTERM when the gate dies, however it dies (Linux; else a no-op)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main(argv: list[str]) -> int:
    """Start Flower on loopback and serve the gate until either stops."""
    import uvicorn

    credentials = credentials_from(os.environ.get("FLOWER_BASIC_AUTH"))
    if not credentials:
        print("flower_gate: set FLOWER_BASIC_AUTH=user:password", file=sys.stderr)
        return 2
    port = int(os.environ.get("FLOWER_GATE_PORT", "5555"))
    upstream_port = int(os.environ.get("FLOWER_GATE_UPSTREAM_PORT", "5556"))
    flower = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "agentworker",
            "flower",
            "--address=127.0.0.1",
            f"--port={upstream_port}",
            *argv,
        ],
        preexec_fn=_die_with_parent,
    )
    app = create_gate(f"http://127.0.0.1:{upstream_port}", credentials)
    server = uvicorn.Server(uvicorn.Config(app, host="0.0.0.0", port=port, log_level="warning"))

    def watch() -> None:
        flower.wait()
        server.should_exit = True

    threading.Thread(target=watch, daemon=True).start()
    try:
        server.run()
    finally:
        if flower.poll() is None:
            flower.terminate()
            flower.wait(10)
    return flower.returncode or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
