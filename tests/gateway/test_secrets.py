"""Secrets scan: after real gateway traffic (all capture modes, refusals, revocation), no engine key or run
token is in any file under the test root except the 0600 token files, nor in the gateway's logs."""

from __future__ import annotations

import logging
from pathlib import Path

import httpx
import pytest

from gateway.server import GatewayConfig
from tests.gateway.support import Engine, GatewayThread, evidence_rows, make_lock, secret_hits, target_for, token_of

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("capture", ["off", "metadata", "full"])
def test_no_secret_outside_the_private_token_files(engine: Engine, tmp_path: Path, capture: str) -> None:
    log_file = tmp_path / "gateway.log"
    handler = logging.FileHandler(log_file)
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        with GatewayThread(GatewayConfig(state_dir=tmp_path / "gw", capture=capture)) as gt:  # type: ignore[arg-type]
            target = target_for(engine, make_lock())
            a = gt.register("run-a", target)
            b = gt.register("run-b", target)
            tokens = [token_of(a), token_of(b)]
            h = {"Authorization": f"Bearer {tokens[0]}", "x-api-key": tokens[1], "Cookie": f"t={tokens[1]}"}
            chat = {"model": "tiny-wire", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
            assert httpx.post(a.base_url + "/chat/completions", json=chat, headers=h).status_code == 200
            assert httpx.post(a.base_url + "/chat/completions", json={**chat, "stream": True}, headers=h).status_code == 200
            resp = {"model": "tiny-wire", "input": "hello", "max_output_tokens": 4}
            assert httpx.post(a.base_url + "/responses", json=resp, headers=h).status_code == 200
            assert httpx.post(a.base_url + "/responses", json={**resp, "temperature": 1.5}, headers=h).status_code == 400
            assert httpx.get(a.base_url.rsplit("/v1", 1)[0] + "/server_info", headers=h).status_code == 404
            assert httpx.post(b.base_url + "/responses", json=resp, headers=h).status_code == 401
            gt.call(lambda: gt.gw.revoke(b.binding_id))
            metrics = httpx.get(str(gt.gw.metrics_url)).text
            assert "hitch_gateway_requests_total" in metrics
            for secret in [*tokens, engine.key]:
                assert secret not in metrics
            gt.settle_evidence()
            rows = evidence_rows(gt, a.binding_id)
            forwarded = [r for r in rows if r["status"] != "rejected"]  # a refused request is captured nowhere
            assert len(forwarded) == 3 and all((r.get("request_sha256") is not None) == (capture != "off") for r in forwarded)
            if capture == "full":
                assert list((tmp_path / "gw" / "capture").rglob("segment-*.bin"))
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        handler.close()
    assert secret_hits(tmp_path, [*tokens, engine.key]) == []
    for path in (tmp_path / "gw").rglob("*"):
        if path.is_file():
            assert path.stat().st_mode & 0o077 == 0, path
    assert engine.key not in engine.log.read_text(errors="replace")
