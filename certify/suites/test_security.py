"""security: the gateway is the only door, it opens only for its run, and no secret leaks.

The allow-list (every SGLang route and admin route from the reference, ``/server_info`` included, and path
tricks on the allowed ones answer 404 ``inference_route_unavailable`` with our error body; on the fake
engine none of them reaches the engine), run tokens (missing, malformed or wrong → 401
``inference_token_invalid``; run A's token is useless on run B's binding; a deleted run's token is refused
with its code), headers (the caller's ``Authorization``, ``x-api-key``, cookies and proxy headers never
reach the engine; the engine key is injected by the gateway), and a secrets scan run at session end, after
every other check (no engine key, admin key or run token in any file under HITCH_ROOT except the 0600 files
of ``private`` folders, nor in any log: :mod:`certify.secrets_scan`), and
an engine that serves with the network cut (``security.network.engine_offline``, spec §8.2/§11.2).
"""

from __future__ import annotations

import http.client
import json
import secrets
from typing import Any
from urllib.parse import urlsplit

import httpx

from catalog.evidence import EVIDENCE_DIR
from certify.kit.offline_engine import run_offline
from certify.kit.probes import session_lock, session_service
from certify.kit.requests import gw_post
from certify.registry import at_session_end, check
from certify.secrets_scan import ScanResult, scan_files, session_secrets
from certify.session import CertifyEnv, RunHandle, SessionEnd

ROUTE_CODE = "inference_route_unavailable"
# a Responses API route the server does not offer (stored responses, compaction) says so with its own code
UNSUPPORTED_CODE = "inference_route_unsupported"
TOKEN_CODE = "inference_token_invalid"

# Reference sglang-http-api.md §1.1-1.3 (health/info, inference, admin), as paths on the engine.
ENGINE_ROUTES = [
    "/health", "/health_generate", "/model_info", "/get_model_info", "/server_info", "/get_server_info",
    "/get_weight_version", "/weight_version", "/get_load", "/v1/loads", "/", "/ping", "/metrics",
    "/generate", "/v1/completions", "/v1/responses/resp_certify", "/v1/responses/resp_certify/cancel",
    "/v1/embeddings", "/v1/classify", "/v1/score", "/v1/rerank", "/v1/tokenize", "/tokenize", "/v1/detokenize",
    "/detokenize", "/encode", "/classify", "/v1/messages", "/v1/messages/count_tokens", "/api/chat",
    "/api/generate", "/api/tags", "/api/show", "/v1/audio/transcriptions", "/v1/realtime", "/invocations",
    "/vertex_generate", "/parse_function_call", "/separate_reasoning", "/open_session", "/close_session",
    "/load_lora_adapter_from_tensors", "/set_trace_level",
    "/set_internal_state", "/dumper/dump", "/flush_cache", "/add_external_corpus", "/remove_external_corpus",
    "/list_external_corpora", "/clear_hicache_storage_backend", "/hicache/storage-backend/clear",
    "/hicache/storage-backend", "/start_profile", "/stop_profile", "/freeze_gc",
    "/start_expert_distribution_record", "/stop_expert_distribution_record", "/dump_expert_distribution_record",
    "/update_weights_from_disk", "/init_weights_send_group_for_remote_instance", "/send_weights_to_remote_instance",
    "/get_remote_instance_transfer_engine_info", "/remote_instance_transfer_engine_info",
    "/init_weights_update_group", "/destroy_weights_update_group", "/update_weights_from_tensor",
    "/update_weights_from_distributed", "/update_weights_from_ipc", "/update_weight_version",
    "/get_weights_by_name", "/release_memory_occupation", "/resume_memory_occupation", "/weights_checker",
    "/slow_down", "/load_lora_adapter", "/unload_lora_adapter", "/configure_logging", "/abort_request",
    "/pause_generation", "/continue_generation", "/scale_elastic_ep", "/is_scaling_elastic_ep",
]  # fmt: skip


def _origin(run: RunHandle) -> tuple[str, int, str]:
    """(host, port, the run's path prefix ``/runs/<binding>``)."""
    parts = urlsplit(run.base_url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port, parts.path.removesuffix("/v1")


class RawClient:
    """HTTP/1.1 with the request target sent verbatim (no normalisation of dots, escapes or slashes)."""

    def __init__(self, run: RunHandle) -> None:
        self.host, self.port, self.prefix = _origin(run)
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)

    def request(self, method: str, target: str, headers: dict[str, str], body: bytes | None = None) -> tuple[int, bytes]:
        for attempt in (0, 1):
            try:
                self.conn.request(method, target, body=body, headers=headers)
                resp = self.conn.getresponse()
                return resp.status, resp.read()
            except (http.client.RemoteDisconnected, ConnectionError, http.client.CannotSendRequest):
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.conn.close()


def _error_code(status: int, body: bytes, expect_status: int, code: str) -> str | None:
    """None when (status, body) is our error envelope with ``code``; otherwise what was wrong."""
    if status != expect_status:
        return f"HTTP {status}: {body[:200]!r}"
    try:
        err = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return f"not our error body: {body[:200]!r}"
    if err.get("code") != code or not isinstance(err.get("message"), str) or "type" not in err:
        return f"error body {err!r}"
    return None


def _marker() -> str:
    return "certify-security-" + secrets.token_hex(8)


def _reached(env: CertifyEnv, marker: str) -> list[str]:
    """Requests the fake engine saw carrying our User-Agent marker (the gateway forwards User-Agent)."""
    assert env.fake is not None
    hits: list[str] = []
    for req in env.fake.received():
        if any(k.lower() == "user-agent" and v == marker for k, v in req["headers"]):
            hits.append(f"{req['method']} {req['path']}")
    return hits


def _chat_body(run: RunHandle) -> dict[str, Any]:
    return {"model": run.wire_model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}


# -- the allow-list ------------------------------------------------------------------------------------------


@check(
    "security.allowlist.engine_routes",
    description="every SGLang route and admin route answers 404 with our code",
    summary="{probes} probes of {routes} engine and admin routes answered 404 with our code; none reached the engine",
)
def test_engine_routes_404(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    marker = _marker()
    client = RawClient(run)
    headers = {**run.headers(), "User-Agent": marker, "Content-Type": "application/json"}
    body = json.dumps({"model": run.wire_model, "text": "hi", "rid": "x", "abort_all": True}).encode()
    wrong: list[str] = []
    probes = 0
    try:
        for route in [*ENGINE_ROUTES, f"/v1/models/{run.wire_model}"]:
            for target in (client.prefix + route, client.prefix + "/v1" + route, route):
                for method in ("GET", "POST"):
                    status, got = client.request(method, target, headers, body if method == "POST" else None)
                    probes += 1
                    code = UNSUPPORTED_CODE if target.startswith(client.prefix + "/v1/responses/") else ROUTE_CODE
                    problem = _error_code(status, got, 404, code)
                    if problem:
                        wrong.append(f"{method} {target}: {problem}")
    finally:
        client.close()
    certify_record.detail("probes", probes)
    certify_record.detail("routes", len(ENGINE_ROUTES) + 1)
    assert not wrong, wrong[:10]
    if certify_env.fake is not None:
        reached = _reached(certify_env, marker)
        certify_record.detail("reached_engine", reached)
        assert not reached, f"refused routes reached the engine: {reached[:10]}"


@check(
    "security.allowlist.path_tricks",
    description="methods, queries, escapes, dot segments on allowed routes → 404",
    summary="{tricks} method, query, escape and dot-segment tricks on allowed routes answered 404",
)
def test_path_tricks_404(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    marker = _marker()
    client = RawClient(run)
    p = client.prefix
    body = json.dumps(_chat_body(run)).encode()
    headers = {**run.headers(), "User-Agent": marker, "Content-Type": "application/json"}
    tricks = [
        ("GET", f"{p}/v1/chat/completions"), ("PUT", f"{p}/v1/chat/completions"), ("DELETE", f"{p}/v1/responses"),
        ("PATCH", f"{p}/v1/responses"), ("POST", f"{p}/v1/models"), ("DELETE", f"{p}/v1/models"),
        ("POST", f"{p}/v1/chat/completions?stream=true"), ("POST", f"{p}/v1/chat/completions?x=1"),
        ("GET", f"{p}/v1/models?x=1"), ("POST", f"{p}/v1/chat/completions/"), ("POST", f"{p}/v1/chat/completions#frag"),
        ("POST", f"{p}/v1/%63hat/completions"), ("POST", f"{p}/v1/chat%2Fcompletions"),
        ("POST", f"{p}/v1/../v1/chat/completions"), ("POST", f"{p}/v1/./chat/completions"),
        ("POST", f"{p}//v1/chat/completions"), ("POST", f"{p}/v1//chat/completions"), ("POST", f"{p}/V1/chat/completions"),
        ("POST", f"{p}/v1/chat/completions/../../server_info"), ("GET", f"{p}/v1/../server_info"),
        ("GET", f"{p}/v1/%2e%2e/server_info"), ("POST", f"{p}/../generate"), ("GET", f"{p}/v1/models/../../server_info"),
        ("POST", "/v1/chat/completions"), ("POST", "/v1/responses"), ("GET", "/v1/models"),
        ("POST", "/runs//v1/chat/completions"),
        ("POST", f"/runs/../runs/{run.binding_id}/v1/chat/completions"), ("GET", "/runs"),
    ]  # fmt: skip
    wrong: list[str] = []
    try:
        for method, target in tricks:
            status, got = client.request(method, target, headers, body if method in ("POST", "PUT", "PATCH") else None)
            problem = _error_code(status, got, 404, ROUTE_CODE)
            if problem:
                wrong.append(f"{method} {target}: {problem}")
        # The same request on its allowed route does work (so the 404s above are the allow-list's doing).
        status, got = client.request("POST", f"{p}/v1/chat/completions", headers, body)
    finally:
        client.close()
    certify_record.detail("tricks", len(tricks))
    assert not wrong, wrong[:10]
    assert status == 200, f"the allowed route failed: {status} {got[:300]!r}"
    if certify_env.fake is not None:
        reached = _reached(certify_env, marker)
        assert reached == ["POST /v1/chat/completions"], f"expected only the allowed request to reach the engine: {reached}"


# -- tokens --------------------------------------------------------------------------------------------------


@check(
    "security.auth.missing_token",
    description="no or malformed credentials → 401 inference_token_invalid",
    summary=lambda d: (
        f"{len(d['variants'])} ways of sending no or malformed credentials were refused 401 inference_token_invalid"
    ),
)
def test_missing_token(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    url = run.base_url + "/chat/completions"
    variants: dict[str, dict[str, str]] = {
        "none": {},
        "empty bearer": {"Authorization": "Bearer"},
        "bare token": {"Authorization": run.token},
        "basic scheme": {"Authorization": "Basic " + run.token},
        "x-api-key only": {"x-api-key": run.token},
        "cookie only": {"Cookie": f"token={run.token}; Authorization=Bearer {run.token}"},
        "proxy-authorization only": {"Proxy-Authorization": f"Bearer {run.token}"},
    }
    wrong: list[str] = []
    for name, headers in variants.items():
        for path, method in ((url, "POST"), (run.base_url + "/models", "GET")):
            r = httpx.request(method, path, json=_chat_body(run) if method == "POST" else None, headers=headers, timeout=30)
            problem = _error_code(r.status_code, r.content, 401, TOKEN_CODE)
            if problem:
                wrong.append(f"{name} {method} {path.rsplit('/', 1)[-1]}: {problem}")
    # The token in a query string is not a credential either (and the query makes the route unknown).
    r = httpx.post(url + f"?api_key={run.token}", json=_chat_body(run), timeout=30)
    if r.status_code not in (401, 404):
        wrong.append(f"query token: HTTP {r.status_code}")
    certify_record.detail("variants", sorted(variants))
    assert not wrong, wrong


@check(
    "security.auth.wrong_token",
    description="an unknown token → 401 inference_token_invalid",
    summary="{forged_tokens} forged tokens were refused 401 inference_token_invalid",
)
def test_wrong_token(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    forged = [
        "hitch-run-" + secrets.token_urlsafe(32),
        run.token[:-1] + ("A" if run.token[-1] != "A" else "B"),
        run.token + "x",
        run.token[:-4],
        run.token.upper(),
        "x" * 600,
    ]
    wrong: list[str] = []
    for i, token in enumerate(forged):
        r = httpx.post(
            run.base_url + "/chat/completions", json=_chat_body(run), headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
        problem = _error_code(r.status_code, r.content, 401, TOKEN_CODE)
        if problem:
            wrong.append(f"forged #{i}: {problem}")
    # The right token on a binding that does not exist: the same 401 (no hint that the token is real).
    unknown = run.base_url.replace(f"/runs/{run.binding_id}/", f"/runs/{run.binding_id}0/")
    r = httpx.post(unknown + "/chat/completions", json=_chat_body(run), headers=run.headers(), timeout=30)
    problem = _error_code(r.status_code, r.content, 401, TOKEN_CODE)
    if problem:
        wrong.append(f"unknown binding: {problem}")
    ok = gw_post(run, "/chat/completions", _chat_body(run))
    certify_record.detail("forged_tokens", len(forged))
    assert not wrong, wrong
    assert ok.status_code == 200, ok.text[:300]


@check(
    "security.auth.cross_run",
    description="run A's token is refused on run B's binding and vice versa",
    summary="each of two runs' tokens was refused on the other's binding",
)
def test_cross_run(certify_env: CertifyEnv, certify_record: Any) -> None:
    a = certify_env.run
    b = certify_env.new_run()
    try:
        assert b.binding_id != a.binding_id and b.token != a.token
        wrong: list[str] = []
        for owner, other in ((a, b), (b, a)):
            for path, method in (("/chat/completions", "POST"), ("/responses", "POST"), ("/models", "GET")):
                body = _chat_body(other) if path == "/chat/completions" else {"model": other.wire_model, "input": "Hi"}
                r = httpx.request(
                    method,
                    other.base_url + path,
                    json=body if method == "POST" else None,
                    headers=owner.headers(),
                    timeout=30,
                )
                problem = _error_code(r.status_code, r.content, 401, TOKEN_CODE)
                if problem:
                    wrong.append(f"{owner.run_id} on {other.run_id} {path}: {problem}")
        assert not wrong, wrong
        for run in (a, b):  # each token still works on its own binding
            r = gw_post(run, "/chat/completions", _chat_body(run))
            assert r.status_code == 200, r.text[:300]
        certify_record.detail("runs", [a.run_id, b.run_id])
    finally:
        certify_env.delete_run(b)


@check(
    "security.auth.deleted_run",
    description="a deleted run's token is refused with a stable code; others still work",
    summary=lambda d: f"a deleted run's token was refused {d['refusals'][0][0]} {d['refusals'][0][1]}; other runs still work",
)
def test_deleted_run(certify_env: CertifyEnv, certify_record: Any) -> None:
    b = certify_env.new_run()
    r = gw_post(b, "/chat/completions", _chat_body(b))
    assert r.status_code == 200, r.text[:300]
    deleted = certify_env.delete_run(b)
    codes = {401: TOKEN_CODE, 403: "inference_binding_revoked"}
    seen: list[tuple[int, str]] = []
    for path, method in (("/chat/completions", "POST"), ("/responses", "POST"), ("/models", "GET")):
        body = _chat_body(b) if path == "/chat/completions" else {"model": b.wire_model, "input": "Hi"}
        r = httpx.request(method, b.base_url + path, json=body if method == "POST" else None, headers=b.headers(), timeout=30)
        assert r.status_code in (401, 403), f"{path}: a deleted run's token got HTTP {r.status_code}"
        code = r.json()["error"]["code"]
        allowed = {codes[r.status_code], "inference_run_sealed"} if r.status_code == 403 else {TOKEN_CODE}
        assert code in allowed, f"{path}: HTTP {r.status_code} with code {code}"
        seen.append((r.status_code, code))
    ok = gw_post(certify_env.run, "/chat/completions", _chat_body(certify_env.run))
    assert ok.status_code == 200, "the session's own run stopped working after another run was deleted"
    certify_record.detail("delete_reply", {k: v for k, v in deleted.items() if "token" not in k})
    certify_record.detail("refusals", sorted(set(seen)))


# -- headers -------------------------------------------------------------------------------------------------


@check(
    "security.headers.stripped",
    engines=("fake",),
    description="caller credentials and proxy headers never reach the engine",
    summary=lambda d: "the engine saw only " + ", ".join(d["engine_saw_headers"]) + ": no caller credentials or proxy headers",
)
def test_headers_stripped(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    marker = _marker()
    caller = {
        "Authorization": f"Bearer {run.token}",
        "User-Agent": marker,
        "x-api-key": "caller-x-api-key-" + marker,
        "api-key": "caller-api-key-" + marker,
        "Cookie": "session=caller-cookie-" + marker,
        "Proxy-Authorization": "Basic caller-proxy-" + marker,
        "Forwarded": "for=203.0.113.7;proto=https",
        "X-Forwarded-For": "203.0.113.7",
        "X-Forwarded-Host": "evil.example",
        "X-Real-IP": "203.0.113.7",
        "OpenAI-Organization": "org-caller",
        "OpenAI-Project": "proj-caller",
        "X-Amz-Security-Token": "caller-aws-" + marker,
    }
    r = httpx.post(run.base_url + "/chat/completions", json=_chat_body(run), headers=caller, timeout=60)
    assert r.status_code == 200, r.text[:300]
    assert certify_env.fake is not None
    mine = [q for q in certify_env.fake.received() if any(k.lower() == "user-agent" and v == marker for k, v in q["headers"])]
    assert len(mine) == 1, f"{len(mine)} engine requests carry the marker"
    seen = mine[0]["headers"]
    names = sorted({k.lower() for k, _ in seen})
    certify_record.detail("engine_saw_headers", names)
    auth = [v for k, v in seen if k.lower() == "authorization"]
    assert auth == [f"Bearer {certify_env.engine_key}"], "the engine did not get exactly the injected engine key"
    blocked = {k.lower() for k in caller} - {"authorization", "user-agent"}
    leaked = sorted(blocked & set(names))
    assert not leaked, f"caller headers reached the engine: {leaked}"
    values = " ".join(v for _, v in seen)
    assert run.token not in values, "the run token reached the engine"
    assert "203.0.113.7" not in values and "caller-" not in values, "a caller proxy/credential value reached the engine"


@check(
    "security.headers.engine_key",
    description="the engine demands its key, and the gateway injects it",
    summary=(
        "the engine refuses a request without its key ({direct_without_key}) or with a run token "
        "({direct_with_run_token}); through the gateway {via_gateway}"
    ),
)
def test_engine_key_injected(certify_env: CertifyEnv, certify_record: Any) -> None:
    run = certify_env.run
    body = _chat_body(run)
    direct = httpx.post(certify_env.engine_url + "/v1/chat/completions", json=body, timeout=60)
    wrong_key = httpx.post(
        certify_env.engine_url + "/v1/chat/completions", json=body, headers=run.headers(), timeout=60
    )  # the run token is not the engine key
    via_gateway = gw_post(run, "/chat/completions", body)
    certify_record.detail("direct_without_key", direct.status_code)
    certify_record.detail("direct_with_run_token", wrong_key.status_code)
    certify_record.detail("via_gateway", via_gateway.status_code)
    assert direct.status_code == 401, f"the engine serves requests without its key: HTTP {direct.status_code}"
    assert wrong_key.status_code == 401, f"the engine accepts a run token: HTTP {wrong_key.status_code}"
    assert via_gateway.status_code == 200, via_gateway.text[:300]
    assert certify_env.engine_key not in via_gateway.text


# -- secrets scan: at session end, after every other check (certify.secrets_scan) --------------------------


def _secrets_scan(end: SessionEnd, *, logs: bool) -> tuple[dict[str, str], ScanResult]:
    secrets_known = session_secrets(end.ledger, end.root, end.facts.get("service_id"))
    evidence_dir = end.options.report_dir / EVIDENCE_DIR
    return secrets_known, scan_files(end.root, evidence_dir, secrets_known, logs=logs, leave_out=(end.ledger,))


@check(
    "security.secrets.files",
    description="no engine key or run token in non-log files under HITCH_ROOT but 0600 private ones",
    summary=lambda d: (
        f"no engine key or run token in {d['files_scanned']} non-log files under HITCH_ROOT "
        f"({len(d['secrets_looked_for'])} secrets looked for)"
    ),
)
@at_session_end
def secrets_in_files(end: SessionEnd, certify_record: Any) -> None:
    secrets_known, found = _secrets_scan(end, logs=False)
    certify_record.detail("files_scanned", len(found.scanned))
    certify_record.detail("secrets_looked_for", sorted(secrets_known))
    certify_record.detail("skipped", found.skipped[:20])
    # the needles are right: the private files that should hold them do
    assert found.private_hits > 0, "no 0600 private file holds any of the secrets: the scan looks for the wrong bytes"
    assert not found.hits, f"secrets found outside the 0600 private files: {found.hits[:10]}"


@check(
    "security.secrets.logs",
    description="no engine key or run token in the daemon, engine or gateway logs",
    summary=lambda d: f"no engine key or run token in {len(d['logs'])} daemon, engine, gateway and trial logs",
)
@at_session_end
def secrets_in_logs(end: SessionEnd, certify_record: Any) -> None:
    assert (end.root.daemon_dir / "daemon.log").exists(), "no daemon log under the root"
    _, found = _secrets_scan(end, logs=True)
    certify_record.detail("logs", found.scanned[:50])
    certify_record.detail("logs_scanned", len(found.scanned))
    assert not found.hits, f"secrets found in logs: {found.hits[:10]}"


def _container_networks(container_id: str) -> dict[str, bool]:
    import docker

    client = docker.from_env()
    try:
        attached = client.containers.get(container_id).attrs["NetworkSettings"]["Networks"]
        return {name: bool(client.networks.get(name).attrs.get("Internal")) for name in attached}
    finally:
        client.close()


@check(
    "security.network.engine_offline",
    description="with no route off the machine the lock's engine starts, passes readiness and answers a request: "
    "process launcher, a network namespace holding only loopback (every TCP/DNS attempt out fails); oci, the "
    "session's container on internal networks only",
    summary=(
        "with no route off the machine the engine started, passed readiness and answered ({offline[completion_tokens]} tokens)"
    ),
)
def test_engine_answers_with_the_network_cut(certify_env: CertifyEnv, certify_record: Any) -> None:
    record = session_service(certify_env)
    process = record.process if record is not None else None
    if process is not None and process.launcher == "oci":
        assert process.container_id, "the oci service record names no container"
        networks = _container_networks(process.container_id)
        certify_record.detail("networks_internal", networks)
        assert networks and all(networks.values()), networks  # no egress, no DNS: docker's internal networks
        resp = gw_post(certify_env.run, "/chat/completions", {"model": certify_env.run.wire_model,
                       "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8})  # fmt: skip
        assert resp.status_code == 200, resp.text
        return
    facts = run_offline(certify_env.root, session_lock(certify_env).to_json_dict(), certify_env.engine)
    certify_record.evidence("offline-engine.log", str(facts.pop("engine_log", "")).encode())
    certify_record.detail("offline", facts)
    assert "error" not in facts, facts
    outbound = facts["outbound"]
    assert outbound["interfaces"] == ["lo"], outbound["interfaces"]
    assert all(route.get("dev") == "lo" for route in outbound["routes"]), outbound["routes"]
    assert outbound["tcp"] and not [a for a, result in outbound["tcp"].items() if result == "connected"], outbound["tcp"]
    assert outbound["dns"] != "resolved"
    assert facts["ready_steps"][-1] == "flush_cache", facts["ready_steps"]
    assert facts["status"] == 200 and (facts["completion_tokens"] or 0) >= 1, facts
    assert facts["engine_env_offline"] == {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
