"""The requests the parity suite sends to both engines (one ``Probe`` per exchange, by name).

Owns the probe catalogue: routes, the auth matrix, health, chat / Responses (plain and streamed), errors
(bad ``top_k``, context exceeded, unknown model, invalid JSON, wrong content type, empty messages),
``/v1/models``, ``/server_info`` and ``/metrics``. Each probe is sent once per engine and cached, so the
per-engine assertions and the fake-vs-real comparison look at the same answers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fixtures.engine_process import EngineProcess
from fixtures.fake_sglang.parity_diff import Observation, observe

KeyChoice = str  # "none" | "wrong" | "api" | "admin" | "nobearer" | "lowerbearer"
LONG_PROMPT = "lorem ipsum dolor sit amet " * 600  # far more than the 2048-token context


@dataclass(frozen=True)
class Probe:
    name: str
    method: str
    path: str
    key: KeyChoice = "api"
    body: Any = None
    raw: bytes | None = None
    content_type: str | None = None


def auth_header(engine: EngineProcess, key: KeyChoice) -> dict[str, str]:
    value = {
        "none": None,
        "wrong": "Bearer sk-wrong",
        "api": f"Bearer {engine.api_key}",
        "admin": f"Bearer {engine.admin_key}",
        "nobearer": engine.api_key,
        "lowerbearer": f"bearer {engine.api_key}",
    }[key]
    return {"Authorization": value} if value else {}


def run_probe(engine: EngineProcess, probe: Probe) -> Observation:
    headers = auth_header(engine, probe.key)
    if probe.content_type:
        headers["Content-Type"] = probe.content_type
    return observe(engine.base, probe.method, probe.path, headers, json_body=probe.body, content=probe.raw)


def _chat(extra: dict[str, Any] | None = None, content: str = "hello") -> dict[str, Any]:
    return {
        "model": "tiny",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 8,
        "temperature": 0.0,
        **(extra or {}),
    }


def _resp(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"model": "tiny", "input": "hello", "max_output_tokens": 8, "temperature": 0.0, **(extra or {})}


AUTH_ROUTES: list[tuple[str, str, str]] = [
    # (label, method, path): normal, exempt and admin routes
    ("models", "GET", "/v1/models"),
    ("server_info", "GET", "/server_info"),
    ("model_info", "GET", "/model_info"),
    ("health", "GET", "/health"),
    ("metrics", "GET", "/metrics"),
    ("flush_cache", "POST", "/flush_cache"),
    ("pause", "POST", "/pause_generation"),
]
AUTH_KEYS: list[KeyChoice] = ["none", "wrong", "api", "admin", "nobearer", "lowerbearer"]
AUTH_PROBES = [Probe(f"auth.{label}.{key}", method, path, key) for label, method, path in AUTH_ROUTES for key in AUTH_KEYS]
# /pause_generation with the admin key would pause the engine for the rest of the session: not sent.
AUTH_PROBES = [p for p in AUTH_PROBES if p.name != "auth.pause.admin"]

PROBES: list[Probe] = [
    Probe("root", "GET", "/"),
    Probe("health", "GET", "/health", "none"),
    Probe("health_generate", "GET", "/health_generate", "none"),
    Probe("models", "GET", "/v1/models"),
    Probe("models.retrieve", "GET", "/v1/models/tiny"),
    Probe("models.retrieve_unknown", "GET", "/v1/models/nope"),
    Probe("model_info", "GET", "/model_info"),
    Probe("server_info", "GET", "/server_info"),
    Probe("unknown_route", "GET", "/no/such/route"),
    Probe("method_not_allowed", "GET", "/v1/chat/completions"),
    Probe("chat", "POST", "/v1/chat/completions", body=_chat()),
    Probe(
        "chat.stream_usage",
        "POST",
        "/v1/chat/completions",
        body=_chat({"stream": True, "stream_options": {"include_usage": True}}),
    ),
    Probe("chat.stream", "POST", "/v1/chat/completions", body=_chat({"stream": True})),
    Probe("responses", "POST", "/v1/responses", body=_resp()),
    Probe("responses.stream", "POST", "/v1/responses", body=_resp({"stream": True})),
    Probe("responses.int_temperature", "POST", "/v1/responses", body=_resp({"temperature": 0, "top_p": 1})),
    Probe(
        "completions", "POST", "/v1/completions", body={"model": "tiny", "prompt": "hello", "max_tokens": 8, "temperature": 0.0}
    ),
    Probe("generate", "POST", "/generate", body={"text": "hello", "sampling_params": {"max_new_tokens": 8, "temperature": 0.0}}),
    Probe(
        "generate.stream",
        "POST",
        "/generate",
        body={"text": "hello", "stream": True, "sampling_params": {"max_new_tokens": 4, "temperature": 0.0}},
    ),
    # temperature 0 is greedy: SGLang sets top_k=1 before validating, so a bad top_k then passes.
    Probe("chat.greedy_top_k_zero", "POST", "/v1/chat/completions", body=_chat({"top_k": 0})),
    Probe("error.chat.top_k", "POST", "/v1/chat/completions", body=_chat({"top_k": -5, "temperature": 0.7})),
    Probe(
        "error.chat.top_k.stream", "POST", "/v1/chat/completions", body=_chat({"top_k": -5, "temperature": 0.7, "stream": True})
    ),
    Probe("error.responses.top_k", "POST", "/v1/responses", body=_resp({"top_k": -5, "temperature": 0.7})),
    Probe(
        "error.generate.top_k", "POST", "/generate", body={"text": "hi", "sampling_params": {"top_k": -5, "max_new_tokens": 4}}
    ),
    Probe("generate.top_k_zero", "POST", "/generate", body={"text": "hi", "sampling_params": {"top_k": 0, "max_new_tokens": 4}}),
    Probe("error.chat.context_input", "POST", "/v1/chat/completions", body=_chat(content=LONG_PROMPT)),
    Probe("error.chat.context_budget", "POST", "/v1/chat/completions", body=_chat({"max_tokens": 2040})),
    Probe("error.chat.max_tokens_over_context", "POST", "/v1/chat/completions", body=_chat({"max_tokens": 4000})),
    Probe("error.chat.empty_messages", "POST", "/v1/chat/completions", body={"model": "tiny", "messages": []}),
    Probe("error.chat.invalid_json", "POST", "/v1/chat/completions", raw=b'{"model": "tiny",', content_type="application/json"),
    Probe("error.chat.wrong_content_type", "POST", "/v1/chat/completions", raw=b"{}", content_type="text/plain"),
    Probe("error.responses.unknown_model", "POST", "/v1/responses", body={**_resp(), "model": "nope"}),
    Probe("error.responses.invalid_json", "POST", "/v1/responses", raw=b"{", content_type="application/json"),
    Probe("error.responses.context_input", "POST", "/v1/responses", body={**_resp(), "input": LONG_PROMPT}),
    Probe("metrics", "GET", "/metrics", "none"),
    # /flush_cache?timeout=T (SGLang 0.5.23): an idle engine flushes at once (T, a float >= 0, bounds the wait)
    Probe("flush_cache.deferred_idle", "POST", "/flush_cache?timeout=2", "admin"),
]

_TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}

# Malformed fields sent straight to the engine: real SGLang answers each with 400 (pydantic's error
# list, or serving_chat's own check) — or, for a non-object response_format, a bare 500 from a crashing
# validator — and the fake must answer the same, with no traceback in its log.
MALFORMED_PROBES = [
    Probe("malformed.chat.stream_options", "POST", "/v1/chat/completions", body=_chat({"stream_options": "yes"})),
    Probe(
        "malformed.chat.stream_options.include_usage", "POST", "/v1/chat/completions",
        body=_chat({"stream": True, "stream_options": {"include_usage": "maybe"}}),
    ),
    Probe("malformed.chat.stop", "POST", "/v1/chat/completions", body=_chat({"stop": 5})),
    Probe("malformed.chat.response_format", "POST", "/v1/chat/completions", body=_chat({"response_format": "json"})),
    Probe("malformed.chat.tools", "POST", "/v1/chat/completions", body=_chat({"tools": [{"type": "function", "function": "f"}]})),
    Probe("malformed.chat.tool_choice", "POST", "/v1/chat/completions", body=_chat({"tools": [_TOOL], "tool_choice": 7})),
    Probe(
        "malformed.chat.tool_choice.unknown", "POST", "/v1/chat/completions",
        body=_chat({"tools": [_TOOL], "tool_choice": {"type": "function", "function": {"name": "g"}}}),
    ),
    Probe("malformed.chat.tool_choice.required", "POST", "/v1/chat/completions", body=_chat({"tool_choice": "required"})),
    Probe("malformed.chat.logprobs", "POST", "/v1/chat/completions", body=_chat({"logprobs": "maybe"})),
    Probe("malformed.chat.logit_bias", "POST", "/v1/chat/completions", body=_chat({"logit_bias": {"1": "x"}})),
    Probe("malformed.responses.include", "POST", "/v1/responses", body=_resp({"include": "garbage"})),
    Probe("malformed.responses.include.item", "POST", "/v1/responses", body=_resp({"include": ["garbage"]})),
    Probe("malformed.responses.text", "POST", "/v1/responses", body=_resp({"text": "plain"})),
    Probe("malformed.responses.tool_choice", "POST", "/v1/responses", body=_resp({"tool_choice": 7})),
    Probe("malformed.responses.tools", "POST", "/v1/responses", body=_resp({"tools": [{"type": "function"}]})),
    Probe("malformed.responses.reasoning", "POST", "/v1/responses", body=_resp({"reasoning": "high"})),
    Probe("malformed.responses.stop", "POST", "/v1/responses", body=_resp({"stop": [1]})),
    Probe("malformed.flush_cache.timeout_negative", "POST", "/flush_cache?timeout=-1", "admin"),
    Probe("malformed.flush_cache.timeout_text", "POST", "/flush_cache?timeout=soon", "admin"),
]  # fmt: skip

ALL_PROBES: dict[str, Probe] = {p.name: p for p in [*PROBES, *AUTH_PROBES, *MALFORMED_PROBES]}


class ProbeCache:
    """Answers of one engine, each probe sent at most once."""

    def __init__(self, engine: EngineProcess, send: Callable[[EngineProcess, Probe], Observation] = run_probe) -> None:
        self.engine = engine
        self._send = send
        self._seen: dict[str, Observation] = {}

    def get(self, name: str) -> Observation:
        if name not in self._seen:
            self._seen[name] = self._send(self.engine, ALL_PROBES[name])
        return self._seen[name]
