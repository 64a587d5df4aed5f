"""The one error type of the harness and the one table of error codes.

Every failure the product reports carries a stable ``code`` from :data:`ERROR_TABLE`.
The table decides the category, the CLI exit code (input errors exit 2), whether a
retry can help, and the HTTP status the gateway answers with. JSON and human CLI
output are both rendered from the same :class:`HitchError` object.

Codes from spec §12.2 plus the ones the harness needs on top (marked "harness").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ENGINE_FAILURE_CODES", "ERROR_TABLE", "ErrorSpec", "HitchError", "spec_for"]


@dataclass(frozen=True)
class ErrorSpec:
    """How one error code behaves everywhere it surfaces."""

    category: str
    exit_code: int
    retryable: bool
    http_status: int
    hint: str


# Exit codes by category; input-like errors exit 2 as the spec demands.
_EXIT = {
    "input": 2,
    "request": 2,
    "context": 2,
    "integrity": 3,
    "capability": 4,
    "compatibility": 4,
    "deployment": 4,
    "admission": 5,
    "scheduling": 5,
    "infrastructure": 6,
    "routing": 7,
    "evidence": 8,
    "lifecycle": 9,
    "internal": 1,
}


def _e(category: str, retryable: bool, http_status: int, hint: str) -> ErrorSpec:
    return ErrorSpec(category, _EXIT[category], retryable, http_status, hint)


ERROR_TABLE: dict[str, ErrorSpec] = {
    # spec §12.2 — input / preparation
    "local_model_not_found": _e("input", False, 404, "import it with `hitch models add DIR --name ALIAS`"),
    "inference_lock_mismatch": _e("input", False, 409, "re-run `hitch local prepare` for this model"),
    # spec §12.2 — integrity
    "local_model_integrity_failed": _e("integrity", False, 500, "re-import the checkpoint; nothing was loaded"),
    "inference_runtime_integrity_failed": _e("integrity", False, 500, "reinstall the runtime; no other version is used"),
    # spec §12.2 — capability
    "inference_runtime_unavailable": _e("capability", False, 503, "install it with `hitch runtime install ID`"),
    "inference_device_unsupported": _e("capability", False, 400, "pick a device the doctor reports as supported"),
    "inference_quantization_uncertified": _e(
        "capability", False, 400, "import an unquantized checkpoint: no quantization method is certified"
    ),
    "inference_backend_uncertified": _e(
        "capability", False, 400, "pass --allow-uncertified to run it anyway (recorded in the lock, never certified)"
    ),
    # spec §12.2 — compatibility
    "inference_harness_unsupported": _e("compatibility", False, 400, "use a harness with a certified profile"),
    "inference_protocol_unsupported": _e("compatibility", False, 400, "use a protocol the lock enables"),
    # spec §12.2 — request
    "inference_parameter_conflict": _e("request", False, 400, "drop the parameter or match the lock's value"),
    "inference_modality_unsupported": _e("request", False, 400, "send text input only"),
    "inference_request_too_large": _e("request", False, 413, "send a smaller body; it cannot fit the lock's context"),
    "inference_header_duplicated": _e(
        "request", False, 400, "send Authorization, Content-Length, Host and Content-Type at most once each"
    ),
    "inference_request_timeout": _e(
        "request", True, 408, "send the request's head and body without stalling; the gateway closed the connection"
    ),
    # spec §12.2 — admission / scheduling / startup
    "inference_capacity_exceeded": _e("admission", False, 503, "free resources or lower the profile's needs"),
    "inference_queue_timeout": _e("scheduling", True, 503, "retry later or raise the queue timeout"),
    "inference_start_timeout": _e("scheduling", True, 504, "check the engine log; raise startup_timeout_ms"),
    "inference_port_conflict": _e("scheduling", True, 503, "another server holds the engine port; a new port is tried"),
    "inference_queue_full": _e("scheduling", True, 429, "retry after the Retry-After delay; the gateway bounds its queue"),
    "inference_connection_limit": _e(
        "scheduling", True, 503, "the gateway holds its most open connections; close idle ones, retry after Retry-After"
    ),
    "inference_deadline_exceeded": _e(
        "scheduling", False, 504, "the run's deadline (--deadline-s, the trial budget) is spent; start a run with a larger one"
    ),
    # spec §12.2 — infrastructure
    "inference_oom": _e("infrastructure", True, 502, "give the engine more memory or shrink the token pool"),
    "inference_process_exited": _e("infrastructure", True, 502, "check the engine log"),
    "inference_upstream_failed": _e("infrastructure", False, 502, "the engine failed after accepting the request; see evidence"),
    "inference_engine_unhealthy": _e("infrastructure", True, 502, "it failed /health or a readiness probe; see engine.log"),
    "inference_stream_idle_timeout": _e(
        "infrastructure", False, 504, "the engine sent nothing for the lock's stream_idle_timeout_ms; see the evidence row"
    ),
    "inference_abort_unconfirmed": _e(
        "infrastructure", True, 503, "the engine kept an abandoned request's slot; the service restarts as a new epoch"
    ),
    # spec §12.2 — context
    "inference_context_exceeded": _e("context", False, 400, "shorten the input; history is never truncated"),
    # spec §12.2 — routing
    "inference_binding_revoked": _e("routing", False, 403, "register a new run"),
    "inference_route_unavailable": _e("routing", False, 404, "only /v1/responses, /v1/chat/completions, /v1/models exist"),
    "inference_binding_mismatch": _e(
        "routing", False, 400, "call the base URL, API and wire model of the binding the daemon issued for this run"
    ),
    "inference_route_unsupported": _e(
        "routing",
        False,
        404,
        "a Responses route this server does not offer (compaction, stored responses): use POST /v1/responses",
    ),
    # spec §12.2 — evidence
    "inference_capture_incomplete": _e("evidence", False, 500, "the capture is partial; rerun with capture on"),
    # spec §12.2 — deployment
    "local_inference_topology_unsupported": _e("deployment", False, 400, "run the engine on this host"),
    # spec §12.2 — lifecycle
    "inference_recovery_ambiguous": _e("lifecycle", False, 409, "inspect the leftover by hand; nothing was killed"),
    "inference_in_use": _e("lifecycle", False, 409, "wait for the leases to end or pass --force"),
    # harness — an operator stopped the service (or the daemon) under a live run; the run ends cancelled
    "inference_service_stopped": _e(
        "lifecycle", False, 503, "an operator stopped the service (hitch local stop / daemon stop); start a new run"
    ),
    # harness — one service per inference id: another engine/launcher choice of this lock is held by someone
    "inference_service_held": _e(
        "lifecycle", False, 409, "ask for the engine/launcher it runs with, or stop its holders first (the message names them)"
    ),
    # harness — runs (every terminal status but completed carries a code)
    "run_cancelled": _e("lifecycle", False, 409, "the run was cancelled (hitch run cancel, Ctrl-C); submit a new run id"),
    "run_interrupted": _e("lifecycle", True, 409, "the daemon ended while the run was live; submit a new run id"),
    "run_not_found": _e("input", False, 404, "`hitch run list` shows the runs of this root"),
    "run_in_progress": _e("lifecycle", True, 409, "the run id is live; wait for it or `hitch run cancel ID`"),
    "evaluation_not_found": _e("input", False, 404, "see evals/ under the root for the known evaluation ids"),
    "eval_verifier_credentials_missing": _e(
        "input", False, 400, "export the variables the tasks' verifiers need (named in details), or use local verifiers"
    ),
    "evaluation_not_regradable": _e(
        "input", False, 409, 'regrade tasks whose verifier reads declared artifacts ([verifier] environment_mode = "separate")'
    ),
    "run_evidence_changed": _e(
        "integrity", False, 409, "a file of the run's sealed evidence set changed or is gone; `hitch run verify ID` names it"
    ),
    "run_not_rerunnable": _e("input", False, 409, "rerun a finished run that kept its harness input (hitch run ... --prompt)"),
    "comparison_with_itself": _e(
        "input", False, 400, "compare two different runs, evaluations or entries (a reproduction is a second measurement)"
    ),
    "runs_not_comparable": _e(
        "compatibility", False, 409, "compare runs of the same model, inference id, hardware and cache condition"
    ),
    "bundle_contains_secret": _e(
        "integrity", False, 409, "a file to bundle holds a key or token of this root; nothing was written (report it)"
    ),
    "bundle_invalid": _e("integrity", False, 400, "the bundle's bytes do not match its manifest; get it again from its source"),
    "daemon_upgrade_required": _e(
        "compatibility", False, 409, "the root's daemon runs other code: `hitch daemon stop`, then run the command again"
    ),
    "run_conflict": _e(
        "input", False, 409, "the run id names another request; resubmit that request for its record, or use a new run id"
    ),
    # harness — input
    "usage_error": _e("input", False, 400, "see --help"),
    "harness_unavailable": _e("capability", False, 503, "install the pinned harness with `make codex`"),
    "harness_args_conflict": _e("input", False, 400, "drop agent arguments that change the provider, endpoint, model or config"),
    "harness_run_failed": _e("infrastructure", False, 502, "see the harness's events in the run's evidence"),
    "local_model_invalid": _e("input", False, 400, "fix the checkpoint directory and import again"),
    "local_model_alias_invalid": _e("input", False, 400, "aliases are [a-z0-9][a-z0-9._-]{0,63}"),
    "local_model_alias_taken": _e(
        "input", False, 409, "pass --force to move the alias, or choose another --name; `hitch models list` shows them"
    ),
    "local_model_source_changed": _e("input", True, 409, "the source changed during import; import again"),
    "inference_lock_invalid": _e("input", False, 400, "fix the lock fields; unknown fields are refused"),
    "generation_profile_invalid": _e(
        "input",
        False,
        400,
        "a generation profile file is one JSON object of temperature, top_p, top_k, min_p, "
        "repetition_penalty and seed (any left out keeps greedy's value); unknown keys are refused",
    ),
    "inference_runtime_unpinned": _e("capability", False, 400, "use a runtime whose digest is pinned"),
    "inference_argv_rejected": _e(
        "compatibility", False, 400, "the runtime's SGLang reads the lock's command line otherwise: fix the lock or argv.py"
    ),
    "inference_runtime_not_found": _e("input", False, 404, "see `hitch runtime list`"),
    "runtime_catalog_invalid": _e("input", False, 400, "fix catalog/runtimes.toml or the runtime's catalog folder"),
    "runtime_lock_unresolvable": _e(
        "integrity",
        False,
        409,
        "a pinned wheel is yanked, gone or re-hashed: re-resolve (scripts/resolve_runtime_requirements.py)",
    ),
    "inference_token_invalid": _e("routing", False, 401, "use the run token issued for this run"),
    "inference_run_sealed": _e("routing", False, 403, "the run is sealed; register a new run"),
    "catalog_signature_invalid": _e("integrity", False, 400, "the entry does not verify against catalog/keys"),
    "catalog_entry_invalid": _e("input", False, 400, "fix the predicate/statement/subjects; nothing was signed"),
    "catalog_evidence_invalid": _e("integrity", False, 400, "an evidence file the entry names is missing or altered"),
    "catalog_key_invalid": _e("input", False, 400, "use an unencrypted Ed25519 PEM key, 0600 (see `hitch catalog keygen`)"),
    "fixture_source_mismatch": _e(
        "integrity", False, 500, "the fixture's wheel or the GGUF in it does not match its pinned sha256; nothing was written"
    ),
    "model_fixture_catalog_invalid": _e("input", False, 400, "fix catalog/model_fixtures.toml"),
    "report_input_invalid": _e("input", False, 400, "check the entries, results or load paths given to `hitch report build`"),
    # harness — infrastructure
    "storage_write_failed": _e("infrastructure", True, 507, "free disk space and retry; nothing was published"),
    "fixture_fetch_failed": _e(
        "infrastructure", True, 502, "the package index did not deliver the pinned wheel; retry or pass --wheel"
    ),
    "runtime_index_unavailable": _e("infrastructure", True, 503, "the package index did not answer; check the network, retry"),
    "docker_unavailable": _e("capability", True, 503, "start the Docker engine"),
    "daemon_unavailable": _e("capability", True, 503, "start it with `hitch daemon start` (see inference/daemon/daemon.log)"),
    "internal_error": _e("internal", False, 500, "this is a bug; report it with the JSON output"),
}

# The codes of an engine that failed under a request or a run (it exited, was killed for memory, failed its health
# checks): an infrastructure failure, never the harness's result; what an evaluation retries.
ENGINE_FAILURE_CODES: frozenset[str] = frozenset({"inference_process_exited", "inference_oom", "inference_engine_unhealthy"})


def spec_for(code: str) -> ErrorSpec:
    """The table row for ``code``; an unknown code is a programming error."""
    try:
        return ERROR_TABLE[code]
    except KeyError:
        raise KeyError(f"error code {code!r} is not in harness.errors.ERROR_TABLE") from None


class HitchError(Exception):
    """A failure with a stable code from :data:`ERROR_TABLE`.

    ``details`` must never hold secrets: it is printed, logged and stored as evidence.
    """

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        self.spec = spec_for(code)
        self.code = code
        self.message = message
        self.details: dict[str, Any] = dict(details or {})
        super().__init__(f"{code}: {message}")

    @property
    def exit_code(self) -> int:
        return self.spec.exit_code

    def to_dict(self) -> dict[str, Any]:
        """The JSON form; the human form is rendered from the same fields."""
        return {
            "code": self.code,
            "category": self.spec.category,
            "message": self.message,
            "retryable": self.spec.retryable,
            "hint": self.spec.hint,
            "details": self.details,
        }

    def human(self) -> str:
        """The message, each detail as readable lines (lists as items, dicts as ``key: value``), the hint."""
        lines = [f"error[{self.code}]: {self.message}"]
        for key, value in sorted(self.details.items()):
            lines.extend(_detail_lines(str(key), value, "  "))
        lines.append(f"  hint: {self.spec.hint}")
        return "\n".join(lines)


def _inline(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_inline(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_inline(v) for v in value)
    return "-" if value is None else str(value)


def _detail_lines(key: str, value: Any, indent: str) -> list[str]:
    """One detail for a person: a scalar or a list of scalars on one line; a dict or a list holding dicts or lists
    one entry a line below its key."""
    if isinstance(value, dict) and value:
        out = [f"{indent}{key}:"]
        for k, v in value.items():
            out.extend(_detail_lines(str(k), v, indent + "  "))
        return out
    if isinstance(value, (list, tuple)) and any(isinstance(v, (dict, list, tuple)) for v in value):
        return [f"{indent}{key}:"] + [f"{indent}  - {_inline(v)}" for v in value]
    return [f"{indent}{key}: {_inline(value)}"]
