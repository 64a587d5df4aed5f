"""LocalModelGateway: the run-scoped, fail-closed, streaming door to a local engine (spec §10.2).

Modules: ``bindings`` (runs, tokens, upstream targets), ``routes`` (allow-list), ``auth`` (token and engine
headers), ``policy`` (lock parameters and budgets), ``sglang_view`` (the messages and tools SGLang hands the
chat template), ``context_check`` (tokenizer + chat template), ``template_bound`` (proven prompt sizes),
``admission`` (the gateway's own fair queue), ``deadlines`` (run deadline, per-request timeouts),
``transport`` (the engine hop), ``engine_http`` (its HTTP client), ``slot_probe`` and ``aborts`` (an abandoned
request's engine slot shown free, or the epoch faulted), ``sse`` (incremental parser), ``capture``,
``evidence``, ``metrics``, ``writer``, ``server`` (the app), ``standalone`` (run one from a spec file).
"""

from gateway.bindings import BindingRegistry, UpstreamTarget
from gateway.server import Gateway, GatewayConfig

__all__ = ["BindingRegistry", "Gateway", "GatewayConfig", "UpstreamTarget"]
