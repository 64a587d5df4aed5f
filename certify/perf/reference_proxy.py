"""The bare reference proxy: the measured Python floor the benchmark compares the gateway with.

Owns ``python -m certify.perf.reference_proxy``: an aiohttp server + aiohttp client on uvloop that does the
minimum any authenticating pass-through must do (reference/gateway-overhead-floor.md): parse the JSON body
once, check a bearer token in constant time, swap ``Authorization`` for the engine key, forward the
original bytes over a keep-alive pool, and relay the answer chunk by chunk, scanning SSE for the first
content event. No policy, no admission, no evidence. Never use it to serve runs.

Arguments: ``--upstream URL --engine-key-file F --token-file F --ready-file F [--port 0]``; the ready file
receives ``{"base_url": ...}`` once listening.
"""

from __future__ import annotations

import argparse
import hmac
import json
from pathlib import Path

import aiohttp
import uvloop
from aiohttp import web

from harness.paths import atomic_write_json
from harness.signals import stop_requested

__all__ = ["main"]


def build_app(upstream: str, engine_key: str, token: bytes) -> tuple[web.Application, list[aiohttp.ClientSession]]:
    sessions: list[aiohttp.ClientSession] = []
    auth = {"Authorization": "Bearer " + engine_key, "Content-Type": "application/json"}

    async def handler(request: web.Request) -> web.StreamResponse:
        given = request.headers.get("Authorization", "")[7:].encode()
        if not hmac.compare_digest(given, token):
            return web.json_response({"error": "unauthorized"}, status=401)
        raw = await request.read()
        body = json.loads(raw)
        stream = bool(body.get("stream"))
        upstream_resp = await sessions[0].post(upstream + request.path, data=raw, headers=auth)
        try:
            if not stream:
                data = await upstream_resp.read()
                return web.Response(body=data, status=upstream_resp.status, content_type="application/json")
            resp = web.StreamResponse(status=upstream_resp.status, headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            seen_content = False
            async for chunk in upstream_resp.content.iter_any():
                await resp.write(chunk)
                if not seen_content and b'"content":"' in chunk:
                    seen_content = True
            await resp.write_eof()
            return resp
        finally:
            upstream_resp.release()

    async def on_startup(_: web.Application) -> None:
        sessions.append(aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), auto_decompress=False))

    async def on_cleanup(_: web.Application) -> None:
        for s in sessions:
            await s.close()

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    app.router.add_post("/v1/responses", handler)
    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app, sessions


async def _serve(args: argparse.Namespace) -> None:
    engine_key = Path(args.engine_key_file).read_text(encoding="utf-8").strip()
    token = Path(args.token_file).read_text(encoding="utf-8").strip().encode()
    app, _ = build_app(args.upstream.rstrip("/"), engine_key, token)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", args.port)
    await site.start()
    port = next(a[1] for a in runner.addresses if isinstance(a, tuple))
    atomic_write_json(Path(args.ready_file), {"base_url": f"http://127.0.0.1:{port}"})
    stop = stop_requested()
    await stop.wait()
    await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m certify.perf.reference_proxy")
    p.add_argument("--upstream", required=True)
    p.add_argument("--engine-key-file", required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--ready-file", required=True)
    p.add_argument("--port", type=int, default=0)
    uvloop.run(_serve(p.parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
