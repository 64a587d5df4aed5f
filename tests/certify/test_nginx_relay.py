"""The overhead benchmark's native relay arm: Debian's nginx between the load and a real (fake-SGLang) engine.

Without nginx the test skips, unless ``HITCH_REQUIRE_NGINX`` is set (CI), where it fails."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import psutil
import pytest

from certify.components import missing
from certify.perf.nginx_relay import nginx_binary, started_nginx
from fixtures.fake_sglang.client import start_fake_engine

pytestmark = pytest.mark.integration


def _events(raw: bytes) -> list[object]:
    out: list[object] = []
    for event in raw.split(b"\n\n"):
        data = event.removeprefix(b"data: ")
        if data.startswith(b"{"):
            obj = json.loads(data)
            obj.pop("id", None), obj.pop("created", None)
            out.append(obj)
        else:
            out.append(data)
    return out


def test_nginx_relays_the_engines_stream_byte_for_byte_and_goes_away(tiny_model: Path, tmp_path: Path) -> None:
    if nginx_binary() is None:
        missing("nginx", "nginx is not installed (make nginx: Debian's nginx-light)")
    engine = start_fake_engine(tiny_model, tmp_path / "fake", served="bench-model")
    try:
        body = {"model": "bench-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True}
        headers = {"Authorization": f"Bearer {engine.key}"}
        direct = httpx.post(engine.base + "/v1/chat/completions", json=body, headers=headers, timeout=30)
        with started_nginx(engine.base, tmp_path / "nginx") as relay:
            assert psutil.Process(relay.pid).name() == "nginx"  # the process whose CPU the benchmark reads
            via = httpx.post(relay.base_url + "/v1/chat/completions", json=body, headers=headers, timeout=30)
            refused = httpx.post(relay.base_url + "/v1/chat/completions", json=body, timeout=30)  # the key passes through
            conf = (tmp_path / "nginx" / "nginx.conf").read_text()
        assert via.status_code == direct.status_code == 200
        assert via.headers["content-type"].startswith("text/event-stream")
        # the fake's answer is deterministic: the same events, their id and creation second aside
        assert _events(via.content) == _events(direct.content)
        assert via.content.endswith(b"data: [DONE]\n\n")
        assert refused.status_code == 401
        assert engine.key not in conf and "proxy_buffering off" in conf
        assert not psutil.pid_exists(relay.pid) or psutil.Process(relay.pid).status() == psutil.STATUS_ZOMBIE
    finally:
        engine.stop()


def test_a_missing_nginx_is_a_failure_where_ci_requires_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HITCH_REQUIRE_NGINX", "1")
    with pytest.raises(pytest.fail.Exception, match="HITCH_REQUIRE_NGINX"):
        missing("nginx", "nginx is not installed")
