"""Allow-list, auth and header hygiene through a real gateway in front of the fake engine."""

from __future__ import annotations

import http.client
import json
from typing import Any

import httpx
import pytest

from tests.gateway.support import Engine, GatewayThread, evidence_rows, make_lock, target_for, token_of

pytestmark = pytest.mark.integration

# Reference §1.1-1.3 (routes of SGLang 0.5.x), the admin list, and path tricks.
ENGINE_ROUTES: list[tuple[str, str]] = [
    ("GET", "/health"), ("GET", "/health_generate"), ("GET", "/model_info"), ("GET", "/get_model_info"),
    ("GET", "/server_info"), ("GET", "/get_server_info"), ("GET", "/get_weight_version"), ("GET", "/weight_version"),
    ("GET", "/get_load"), ("GET", "/v1/loads"), ("GET", "/v1/models/tiny-wire"), ("GET", "/"), ("GET", "/ping"),
    ("GET", "/metrics"), ("POST", "/generate"), ("PUT", "/generate"), ("POST", "/v1/completions"),
    ("GET", "/v1/responses/resp_123"), ("POST", "/v1/responses/resp_123/cancel"), ("POST", "/v1/embeddings"),
    ("POST", "/v1/classify"), ("POST", "/v1/score"), ("POST", "/v1/rerank"), ("POST", "/v1/tokenize"), ("POST", "/tokenize"),
    ("POST", "/v1/detokenize"), ("POST", "/detokenize"), ("POST", "/encode"), ("POST", "/classify"), ("POST", "/v1/messages"),
    ("POST", "/v1/messages/count_tokens"), ("POST", "/api/chat"), ("POST", "/api/generate"), ("GET", "/api/tags"),
    ("POST", "/api/show"), ("POST", "/v1/audio/transcriptions"), ("GET", "/v1/realtime"), ("POST", "/invocations"),
    ("POST", "/vertex_generate"), ("POST", "/parse_function_call"), ("POST", "/separate_reasoning"), ("POST", "/open_session"),
    ("POST", "/close_session"), ("POST", "/load_lora_adapter_from_tensors"), ("POST", "/set_trace_level"),
    ("POST", "/set_internal_state"), ("POST", "/dumper/x"), ("GET", "/flush_cache"), ("POST", "/flush_cache"),
    ("POST", "/add_external_corpus"), ("POST", "/remove_external_corpus"), ("GET", "/list_external_corpora"),
    ("POST", "/clear_hicache_storage_backend"), ("POST", "/hicache/storage-backend/clear"), ("PUT", "/hicache/storage-backend"),
    ("POST", "/start_profile"), ("POST", "/stop_profile"), ("POST", "/freeze_gc"), ("POST", "/start_expert_distribution_record"),
    ("POST", "/stop_expert_distribution_record"), ("POST", "/dump_expert_distribution_record"),
    ("POST", "/update_weights_from_disk"),
    ("POST", "/init_weights_send_group_for_remote_instance"), ("POST", "/send_weights_to_remote_instance"),
    ("GET", "/get_remote_instance_transfer_engine_info"), ("GET", "/remote_instance_transfer_engine_info"),
    ("POST", "/init_weights_update_group"), ("POST", "/destroy_weights_update_group"), ("POST", "/update_weights_from_tensor"),
    ("POST", "/update_weights_from_distributed"), ("POST", "/update_weights_from_ipc"), ("POST", "/update_weight_version"),
    ("GET", "/get_weights_by_name"), ("POST", "/release_memory_occupation"), ("POST", "/resume_memory_occupation"),
    ("POST", "/weights_checker"), ("POST", "/slow_down"), ("POST", "/load_lora_adapter"), ("POST", "/unload_lora_adapter"),
    ("POST", "/configure_logging"), ("POST", "/abort_request"), ("POST", "/pause_generation"), ("POST", "/continue_generation"),
    ("POST", "/scale_elastic_ep"), ("GET", "/is_scaling_elastic_ep"),
    # allowed paths with the wrong method
    ("GET", "/v1/responses"), ("GET", "/v1/chat/completions"), ("POST", "/v1/models"), ("DELETE", "/v1/models"),
    ("OPTIONS", "/v1/responses"), ("HEAD", "/v1/models"),
]  # fmt: skip


def raw_request(
    gateway: GatewayThread, method: str, path: str, token: str | None, body: bytes | None = None
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", gateway.gw.port, timeout=10)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    conn.request(method, path, body=body, headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


def _error_code(body: bytes) -> str:
    return str(json.loads(body)["error"]["code"])


def test_every_non_allowed_route_is_404_and_never_reaches_the_engine(engine: Engine, gateway: GatewayThread) -> None:
    rec = gateway.register("run-a", target_for(engine, make_lock()))
    token = token_of(rec)
    prefix = f"/runs/{rec.binding_id}"
    paths: list[tuple[str, str]] = []
    for method, path in ENGINE_ROUTES:
        paths.append((method, path))  # at the gateway root
        paths.append((method, prefix + path))  # under the run's prefix
        paths.append((method, prefix + "/v1" + path))  # under the run's API prefix
    tricks = [
        ("GET", prefix + "/v1/../server_info"), ("GET", prefix + "/v1/%2e%2e/server_info"), ("POST", prefix + "/v1//responses"),
        ("POST", prefix + "/v1/responses?x=1"), ("POST", prefix + "/v1/chat/completions/"), ("POST", "/v1/responses"),
        ("POST", "/v1/chat/completions"), ("GET", "/v1/models"), ("POST", "/runs//v1/responses"),
        ("POST", "/runs/../v1/responses"),
    ]  # fmt: skip
    paths += tricks
    for method, path in paths:
        status, body = raw_request(gateway, method, path, token, b"{}" if method in ("POST", "PUT") else None)
        assert status == 404, (method, path, status, body)
        if method != "HEAD":
            # a Responses API route the server does not offer (stored responses) says so with its own code
            unsupported = path.startswith(prefix + "/v1/responses/")
            want = "inference_route_unsupported" if unsupported else "inference_route_unavailable"
            assert _error_code(body) == want, (method, path)
    assert engine.received() == []


def test_models_lists_only_the_wire_model_and_never_asks_the_engine(engine: Engine, gateway: GatewayThread) -> None:
    rec = gateway.register("run-a", target_for(engine, make_lock()))
    r = httpx.get(rec.base_url + "/models", headers={"Authorization": f"Bearer {token_of(rec)}"})
    assert r.status_code == 200
    assert [m["id"] for m in r.json()["data"]] == ["tiny-wire"]
    assert engine.received() == []
    rows = evidence_rows(gateway, rec.binding_id)
    assert [(row["route"], row["status"]) for row in rows] == [("/v1/models", "completed")]


def _chat(rec: Any, token: str, **extra: Any) -> httpx.Response:
    body = {"model": "tiny-wire", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **extra}
    return httpx.post(rec.base_url + "/chat/completions", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def test_headers_reaching_the_engine_are_only_the_allowed_ones(engine: Engine, gateway: GatewayThread) -> None:
    rec = gateway.register("run-a", target_for(engine, make_lock()))
    token = token_of(rec)
    hostile = {
        "Authorization": f"Bearer {token}",
        "x-api-key": "caller-key",
        "Cookie": "session=abc",
        "Forwarded": "for=1.2.3.4",
        "X-Forwarded-For": "1.2.3.4",
        "X-Forwarded-Host": "evil",
        "X-Real-IP": "1.2.3.4",
        "Proxy-Authorization": "Basic Zm9vOmJhcg==",
        "Proxy-Connection": "keep-alive",
        "TE": "trailers",
        "Upgrade": "h2c",
        "OpenAI-Organization": "org-x",
        "User-Agent": "agent/1.0",
        "Accept": "application/json",
    }
    body = {"model": "tiny-wire", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    r = httpx.post(rec.base_url + "/chat/completions", json=body, headers=hostile, timeout=30)
    assert r.status_code == 200, r.text
    [seen] = engine.received()
    assert seen["path"] == "/v1/chat/completions"
    names = {k.lower(): v for k, v in seen["headers"]}
    assert names["authorization"] == f"Bearer {engine.key}"
    assert set(names) <= {"host", "authorization", "content-type", "content-length", "accept", "user-agent"}
    assert names["user-agent"] == "agent/1.0"
    for v in names.values():
        assert token not in v and "caller-key" not in v


def test_run_a_token_is_useless_for_run_b(engine: Engine, gateway: GatewayThread) -> None:
    target = target_for(engine, make_lock())
    a = gateway.register("run-a", target)
    b = gateway.register("run-b", target)
    r = _chat(b, token_of(a))
    assert r.status_code == 401 and r.json()["error"]["code"] == "inference_token_invalid"
    unknown = b.base_url.replace(b.binding_id, b.binding_id + "x")
    r = httpx.post(unknown + "/chat/completions", json={}, headers={"Authorization": f"Bearer {token_of(b)}"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "inference_token_invalid"  # unknown run: same answer
    r = httpx.post(
        b.base_url.replace(b.binding_id, b.binding_id + "x") + "/chat/completions",
        json={},
        headers={"Authorization": f"Bearer {token_of(b)}"},
    )
    assert r.status_code == 401 and r.json()["error"]["code"] == "inference_token_invalid"  # unknown run: same answer
    for bad in ("", "Bearer", f"Basic {token_of(b)}", f"bearer {token_of(b)}x"):
        r = httpx.post(b.base_url + "/chat/completions", json={}, headers={"Authorization": bad} if bad else {})
        assert r.status_code == 401, bad
    r = httpx.post(b.base_url + "/chat/completions", json={}, headers={"x-api-key": token_of(b)})
    assert r.status_code == 401
    assert engine.received() == []
    assert _chat(b, token_of(b)).status_code == 200  # the scheme is case-insensitive; b's own token works
    assert len(engine.posts()) == 1


def test_revoked_sealed_and_stale_epoch_bindings_are_refused(engine: Engine, gateway: GatewayThread) -> None:
    target = target_for(engine, make_lock())
    a = gateway.register("run-a", target)
    b = gateway.register("run-b", target)
    c = gateway.register("run-c", target)
    tokens = {x.binding_id: token_of(x) for x in (a, b, c)}
    assert _chat(a, tokens[a.binding_id]).status_code == 200
    gateway.call(lambda: gateway.gw.revoke(a.binding_id))
    gateway.call(lambda: gateway.gw.seal(b.binding_id))
    r = _chat(a, tokens[a.binding_id])
    assert (r.status_code, r.json()["error"]["code"]) == (403, "inference_binding_revoked")
    r = _chat(b, tokens[b.binding_id])
    assert (r.status_code, r.json()["error"]["code"]) == (403, "inference_run_sealed")
    gateway.call(lambda: gateway.gw.registry.set_service_epoch("svc-test", 2))
    r = _chat(c, tokens[c.binding_id])
    assert (r.status_code, r.json()["error"]["code"]) == (403, "inference_binding_revoked")
    assert len(engine.posts()) == 1
    assert not any(p.exists() for p in (gateway.gw.config.private_dir / f"{x.binding_id}.token" for x in (a, b)))
