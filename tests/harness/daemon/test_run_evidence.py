"""What run evidence keeps of the engine's /server_info: every fact but the secrets."""

from __future__ import annotations

import json
from pathlib import Path

from harness.engine.redaction import SERVER_INFO_OBSERVATIONS, observations, redact

_ARGS = Path(__file__).resolve().parents[3] / "fixtures" / "fake_sglang" / "server_args_0_5_23.json"


def test_redact_drops_secret_fields_and_secret_values_of_sglang_server_info() -> None:
    info = json.loads(_ARGS.read_text())
    info.update(api_key="hek-1234", admin_api_key="hak-5678", ssl_keyfile_password="pw")
    info["launch_command"] = "python -m sglang.launch_server --api-key hek-1234 --admin-api-key=hak-5678 --max-total-tokens 2048"
    info["nested"] = [{"note": "the key is hek-1234", "hf_token": "hf_x"}]
    out = redact(info, ("hek-1234", "hak-5678"))
    text = json.dumps(out)
    assert "hek-1234" not in text and "hak-5678" not in text and "hf_x" not in text and '"pw"' not in text
    assert not {"api_key", "admin_api_key", "ssl_keyfile_password", "watermark_key"} & set(out)
    # facts whose names merely mention tokens stay
    for kept in ("max_total_tokens", "max_prefill_tokens", "tokenizer_path", "context_length", "model_path"):
        assert kept in out, kept
    assert out["launch_command"].endswith("--api-key <redacted> --admin-api-key=<redacted> --max-total-tokens 2048")
    assert out["nested"] == [{"note": "the key is <redacted>"}]


def test_run_evidence_keeps_an_allow_list_of_observations_of_server_info() -> None:
    """Spec (preamble): run evidence keeps only allow-listed observations of /server_info — a field SGLang adds, or
    a secret under a name no redaction rule knows, is not kept; the kept values are redacted too."""
    info = json.loads(_ARGS.read_text())
    info.update(
        version="0.5.23", api_key="hek-1234", admin_api_key="hak-5678", launch_command="--api-key hek-1234",
        new_field_in_a_later_sglang="hek-1234", opaque="sk-not-named-as-secret", served_model_name="hek-1234",
    )  # fmt: skip
    out = observations(info, ("hek-1234", "hak-5678"))
    assert set(out) <= set(SERVER_INFO_OBSERVATIONS)
    assert {"version", "device", "dtype", "kv_cache_dtype", "attention_backend", "sampling_backend", "context_length",
            "max_running_requests", "model_path"} <= set(out)  # fmt: skip
    assert not {"launch_command", "new_field_in_a_later_sglang", "opaque", "api_key"} & set(out)
    assert "hek-1234" not in json.dumps(out) and out["served_model_name"] == "<redacted>"
