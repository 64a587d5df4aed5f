"""Protocol parity: the same assertions against the fake and real SGLang 0.5.23, then fake vs real directly.

Per-engine tests are parametrized over ``engine`` in {fake, sglang}; the comparison tests send every probe
to both and fail on any difference not excused by ``fixtures/fake_sglang/parity_allowed.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fixtures.engine_process import EngineProcess
from fixtures.fake_sglang import parity_checks
from fixtures.fake_sglang.parity_allowed import METRIC_FAMILIES_MAY_BE_ABSENT
from fixtures.fake_sglang.parity_diff import Observation, unexcused
from fixtures.fake_sglang.parity_engines import fake_command, launch_engine
from tests.parity.conftest import ADMIN_KEY, API_KEY, ENGINES, SGLANG
from tests.parity.probes import ALL_PROBES, AUTH_PROBES, MALFORMED_PROBES, ProbeCache

UNAUTHORIZED = {"error": "Unauthorized"}
FLAT_ERROR_KEYS = ["object", "message", "type", "param", "code"]
NESTED_ERROR_KEYS = ["message", "type", "param", "code"]

# Reference §2 with both --api-key and --admin-api-key: normal routes need the API key, admin routes the
# admin key (the API key is rejected there), /health* and /metrics need none.
AUTH_EXPECTED: dict[str, dict[str, int]] = {
    "normal": {"none": 401, "wrong": 401, "api": 200, "admin": 401, "nobearer": 401, "lowerbearer": 200},
    "exempt": {"none": 200, "wrong": 200, "api": 200, "admin": 200, "nobearer": 200, "lowerbearer": 200},
    "admin": {"none": 401, "wrong": 401, "api": 401, "admin": 200, "nobearer": 401, "lowerbearer": 401},
}
AUTH_LEVEL = {
    "models": "normal",
    "server_info": "normal",
    "model_info": "normal",
    "health": "exempt",
    "metrics": "exempt",
    "flush_cache": "admin",
    "pause": "admin",
}
STATUS_EXPECTED = {
    "root": 200,
    "health": 200,
    "health_generate": 200,
    "models": 200,
    "models.retrieve": 200,
    "models.retrieve_unknown": 404,
    "model_info": 200,
    "server_info": 200,
    "unknown_route": 404,
    "method_not_allowed": 405,
    "chat": 200,
    "chat.stream": 200,
    "chat.stream_usage": 200,
    "chat.greedy_top_k_zero": 200,
    "responses": 200,
    "responses.stream": 200,
    "responses.int_temperature": 200,
    "completions": 200,
    "generate": 200,
    "generate.stream": 200,
    "error.chat.top_k": 400,
    "error.chat.top_k.stream": 400,
    "error.responses.top_k": 400,
    "error.generate.top_k": 400,
    "generate.top_k_zero": 400,
    "error.chat.context_input": 400,
    "error.chat.context_budget": 400,
    "error.chat.max_tokens_over_context": 400,
    "error.chat.empty_messages": 400,
    "error.chat.invalid_json": 400,
    "error.chat.wrong_content_type": 400,
    "error.responses.unknown_model": 404,
    "error.responses.invalid_json": 400,
    "error.responses.context_input": 400,
    "metrics": 200,
    "flush_cache.deferred_idle": 200,
}


def _json(obs: Observation) -> object:
    assert obs.kind == "json", (obs.status, obs.content_type, obs.body)
    return obs.body


# ---------------------------------------------------------------- per engine


@pytest.mark.parametrize("probe", sorted(STATUS_EXPECTED))
def test_status_codes(answers: ProbeCache, probe: str) -> None:
    obs = answers.get(probe)
    assert obs.status == STATUS_EXPECTED[probe], (obs.status, obs.body)


@pytest.mark.parametrize("probe", [p.name for p in AUTH_PROBES])
def test_auth_matrix(answers: ProbeCache, probe: str) -> None:
    _, route, key = probe.split(".")
    obs = answers.get(probe)
    expected = AUTH_EXPECTED[AUTH_LEVEL[route]][key]
    assert obs.status == expected, (probe, obs.status, obs.body)
    if expected == 401:
        assert obs.body == UNAUTHORIZED and obs.content_type == "application/json"


def test_health_is_empty_200(answers: ProbeCache) -> None:
    for probe in ("health", "health_generate"):
        obs = answers.get(probe)
        assert (obs.status, obs.kind, obs.body) == (200, "empty", None)


def test_models_shape(answers: ProbeCache) -> None:
    body = _json(answers.get("models"))
    assert isinstance(body, dict) and list(body) == ["object", "data"] and body["object"] == "list"
    card = body["data"][0]
    assert list(card) == ["id", "object", "created", "owned_by", "root", "parent", "max_model_len"]
    assert (card["id"], card["root"], card["owned_by"], card["max_model_len"]) == ("tiny", "tiny", "sglang", 2048)
    unknown = _json(answers.get("models.retrieve_unknown"))
    assert unknown == {
        "error": {
            "message": "The model 'nope' does not exist",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
    }


def test_server_info_reflects_launch_flags(answers: ProbeCache, parity_checkpoint: object) -> None:
    info = _json(answers.get("server_info"))
    assert isinstance(info, dict)
    expected = {
        "model_path": str(parity_checkpoint),
        "served_model_name": "tiny",
        "host": "127.0.0.1",
        "port": answers.engine.port,
        "device": "cpu",
        "dtype": "bfloat16",
        "attention_backend": "torch_native",
        "sampling_backend": "pytorch",
        "context_length": 2048,
        "max_total_tokens": 4096,
        "max_running_requests": 2,
        "max_queued_requests": 2,
        "mem_fraction_static": 0.05,
        "enable_metrics": True,
        "api_key": answers.engine.api_key,  # echoed in plaintext: the gateway must never expose this route
        "admin_api_key": answers.engine.admin_key,
        "max_total_num_tokens": 4096,
        "status": "ready",
        "version": "0.5.23",
    }
    assert {k: info.get(k) for k in expected} == expected


def test_chat_protocol(engine: EngineProcess) -> None:
    parity_checks.check_chat_nonstream(engine.base, engine.api_key, "tiny")
    parity_checks.check_chat_stream(engine.base, engine.api_key, "tiny", include_usage=True)
    chunks = parity_checks.check_chat_stream(engine.base, engine.api_key, "tiny", include_usage=False)
    assert all(c["choices"] for c in chunks)


def test_loads_answer(engine: EngineProcess) -> None:
    """``/v1/loads`` as the gateway's abort check and readiness read it: each rank stamped with its snapshot time."""
    parity_checks.check_loads_idle(engine.base, engine.api_key)


def test_stream_segmentation(engine: EngineProcess) -> None:
    """One HTTP chunk per SSE event, one socket write each (uvicorn + h11 in real SGLang): a proxy in front
    wakes once per event on either engine, so per-chunk figures measured on the fake hold for the real one."""
    parity_checks.check_stream_segmentation(engine.base, engine.api_key, "tiny", max_tokens=16)


def test_responses_protocol(engine: EngineProcess) -> None:
    parity_checks.check_responses_nonstream(engine.base, engine.api_key, "tiny")
    events = parity_checks.check_responses_stream(engine.base, engine.api_key, "tiny")
    final = events[-1][1]["response"]
    assert list(final["usage"]) == [
        "input_tokens",
        "input_tokens_details",
        "output_tokens",
        "output_tokens_details",
        "total_tokens",
    ]


def test_chat_error_shapes(answers: ProbeCache) -> None:
    for probe in [n for n in STATUS_EXPECTED if n.startswith("error.chat.")]:
        body = _json(answers.get(probe))
        assert isinstance(body, dict) and list(body) == FLAT_ERROR_KEYS, (probe, body)
        assert body["object"] == "error" and body["code"] == answers.get(probe).status, (probe, body)
    top_k = _json(answers.get("error.chat.top_k"))
    assert isinstance(top_k, dict) and top_k["message"] == "top_k must be -1 (disable) or at least 1, got -5."
    ctx = _json(answers.get("error.chat.context_input"))
    assert isinstance(ctx, dict) and re.fullmatch(
        r"The input \(\d+ tokens\) is longer than the model's context length \(2048 tokens\)\.", ctx["message"]
    )


def test_responses_error_shapes(answers: ProbeCache) -> None:
    for probe in [n for n in STATUS_EXPECTED if n.startswith("error.responses.")]:
        body = _json(answers.get(probe))
        assert isinstance(body, dict) and list(body) == ["error"], (probe, body)
        assert list(body["error"]) == NESTED_ERROR_KEYS, (probe, body)
    unknown = _json(answers.get("error.responses.unknown_model"))
    assert unknown == {
        "error": {"message": "The model 'nope' does not exist", "type": "invalid_request_error", "param": "model", "code": 404}
    }


def test_usage_field_names(answers: ProbeCache) -> None:
    chat = _json(answers.get("chat"))
    assert isinstance(chat, dict) and list(chat["usage"]) == parity_checks.USAGE_KEYS
    resp = _json(answers.get("responses"))
    assert isinstance(resp, dict)
    assert list(resp["usage"]) == [
        "input_tokens",
        "input_tokens_details",
        "output_tokens",
        "output_tokens_details",
        "total_tokens",
    ]


@pytest.mark.parametrize("probe", [p.name for p in MALFORMED_PROBES])
def test_malformed_fields_are_refused(answers: ProbeCache, probe: str) -> None:
    obs = answers.get(probe)
    if probe == "malformed.chat.response_format":  # ChatCompletionRequest.set_json_schema crashes on it
        assert (obs.status, obs.body) == (500, "Internal Server Error"), (obs.status, obs.body)
        return
    body = _json(obs)
    assert obs.status == 400, (probe, obs.status, body)
    assert isinstance(body, dict)
    err = body["error"] if probe.startswith("malformed.responses.") else body
    assert list(err) == (NESTED_ERROR_KEYS if probe.startswith("malformed.responses.") else FLAT_ERROR_KEYS), err


def test_malformed_fields_leave_no_traceback_in_the_fake(fake_answers: ProbeCache) -> None:
    for probe in MALFORMED_PROBES:
        fake_answers.get(probe.name)
    assert "Traceback" not in fake_answers.engine.log.read_text(errors="replace")


# ---------------------------------------------------------------- fake vs real


_SOURCE_LOCATION = re.compile(r"\n\n  File \"[^\"]*\", line \d+, in \w+\n    [A-Z]+ \S+")


@pytest.mark.parametrize("probe", [pytest.param(p.name, marks=SGLANG) for p in MALFORMED_PROBES])
def test_malformed_messages_match(fake_answers: ProbeCache, sglang_answers: ProbeCache, probe: str) -> None:
    """Real SGLang's validation text with its install-specific source location cut out equals the fake's."""
    fake, real = fake_answers.get(probe), sglang_answers.get(probe)
    assert fake.status == real.status, (fake.body, real.body)
    if real.kind != "json":
        assert fake.body == real.body
        return
    f, r = (o.body.get("error", o.body) for o in (fake, real))
    assert f["message"] == _SOURCE_LOCATION.sub("", r["message"]), (f["message"], r["message"])


def metric_families(text: str) -> dict[str, str]:
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.MULTILINE))


@pytest.mark.parametrize("probe", [pytest.param(name, marks=SGLANG) for name in sorted(ALL_PROBES)])
def test_fake_matches_real(fake_answers: ProbeCache, sglang_answers: ProbeCache, probe: str) -> None:
    differences = unexcused(probe, fake_answers.get(probe), sglang_answers.get(probe))
    assert not differences, f"{probe}: the fake differs from real SGLang 0.5.23:\n" + "\n".join(map(str, differences))


@pytest.mark.needs_sglang
def test_metric_families_exist_in_real(fake_answers: ProbeCache, sglang_answers: ProbeCache) -> None:
    fake, real = (metric_families(str(a.get("metrics").body)) for a in (fake_answers, sglang_answers))
    assert fake, "the fake exposes no metric families"
    wrong = {
        name: (kind, real.get(name))
        for name, kind in fake.items()
        if real.get(name) != kind and not (name not in real and name in METRIC_FAMILIES_MAY_BE_ABSENT)
    }
    assert not wrong, f"fake metric families missing in real SGLang or of another type: {wrong}"


# ---------------------------------------------------------------- a flush while a request runs


@pytest.fixture(params=ENGINES)
def busy_engine(request: pytest.FixtureRequest, parity_checkpoint: Path, tmp_path: Path) -> Iterator[EngineProcess]:
    """An engine whose /generate streams take a while: real SGLang (its own pace), or a fake that spends
    20 ms per token (the shared parity fake answers at once, faster than a flush could arrive)."""
    if request.param == "sglang":
        yield request.getfixturevalue("sglang_engine")
        return
    engine = launch_engine(fake_command(), parity_checkpoint, tmp_path, API_KEY, ADMIN_KEY, extra=["--fake-itl-ms", "20"])
    try:
        yield engine
    finally:
        engine.stop()


def test_a_flush_while_a_request_runs_is_refused_and_a_deferred_one_waits(busy_engine: EngineProcess) -> None:
    """SGLang 0.5.23 refuses /flush_cache while a request runs ("Flush cache failed."), lets ``?timeout=T``
    wait for idle and says when T ran out first, and flushes once the request is gone (readiness relies on all
    three; the fake must answer each the same, byte for byte)."""
    engine = busy_engine
    long = {"text": "hello", "stream": True, "sampling_params": {"max_new_tokens": 1500, "temperature": 0.0, "ignore_eos": True}}
    admin = engine.headers(engine.admin_key)
    with httpx.Client(base_url=engine.base, timeout=120) as client:
        with client.stream("POST", "/generate", json=long, headers=engine.headers()) as resp:
            assert resp.status_code == 200
            lines = resp.iter_lines()  # kept: a generator dropped here would close the stream (an abort)
            while not next(lines).startswith("data:"):
                pass  # the first event arrived: the request runs
            now = client.post("/flush_cache", headers=admin)
            deferred = client.post("/flush_cache", params={"timeout": "0.5"}, headers=admin)
        # the client went away: the engine aborts the request, and a deferred flush goes through once it is gone
        after = client.post("/flush_cache", params={"timeout": "60"}, headers=admin)
    assert (now.status_code, now.text) == (400, "Flush cache failed.\n")
    assert (deferred.status_code, deferred.text) == (400, "Timed out waiting for idle state.")
    assert after.status_code == 200 and after.text.startswith("Cache flushed.\n"), after.text
