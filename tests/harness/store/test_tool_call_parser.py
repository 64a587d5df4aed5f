"""The tool-call parser a model's locks name: read from its chat template at import, or given at `hitch models
add`; recorded in the manifest but never part of model_id; a name SGLang 0.5.23 lacks is refused up front."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.errors import HitchError
from harness.paths import HitchRoot
from harness.store import import_model, read_manifest
from harness.store.tool_call_format import tool_call_parser_for

# SmolLM2-135M-Instruct's template (the GGUF's tokenizer.chat_template): plain ChatML, no tool markup.
SMOLLM2 = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@pytest.mark.parametrize(
    ("template", "parser"),
    [
        (SMOLLM2, "hermes"),
        ("{{- '<|im_start|>system\\n# Tools\\n<tools>' }}{{ '<tool_call>' }}", "hermes"),
        ("<|start_header_id|>{{ m['role'] }}<|end_header_id|>", "llama3"),
        ("[AVAILABLE_TOOLS]{{ tools }}[/AVAILABLE_TOOLS][TOOL_CALLS]", "mistral"),
        ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}", None),
    ],
    ids=["smollm2-chatml", "hermes-markup", "llama3", "mistral", "unknown-family"],
)
def test_the_template_family_names_the_parser(template: str, parser: str | None) -> None:
    assert tool_call_parser_for(template) == parser


def _with_template(checkpoint: Path, template: str) -> Path:
    config_path = checkpoint / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "chat_template": template}, indent=2))
    return checkpoint


def test_import_reads_the_parser_from_the_template(hroot: HitchRoot, checkpoint: Path) -> None:
    result = import_model(hroot, _with_template(checkpoint, SMOLLM2), "smol")
    assert result.manifest.chat_template.tool_call_parser == "hermes"
    assert read_manifest(hroot, result.model_id).chat_template.tool_call_parser == "hermes"


def test_a_given_parser_wins_and_never_moves_model_id(hroot: HitchRoot, checkpoint: Path) -> None:
    derived = import_model(hroot, checkpoint, "plain")  # the builder's template shows no tool-call format
    assert derived.manifest.chat_template.tool_call_parser is None
    given = import_model(hroot, checkpoint, "plain", tool_call_parser="llama3")
    assert given.model_id == derived.model_id and given.already_present
    assert read_manifest(hroot, derived.model_id).chat_template.tool_call_parser == "llama3"
    off = import_model(hroot, checkpoint, "plain", tool_call_parser="none")
    assert off.model_id == derived.model_id
    assert read_manifest(hroot, derived.model_id).chat_template.tool_call_parser is None


def test_a_parser_sglang_lacks_is_refused_before_anything_is_published(
    hroot: HitchRoot, checkpoint: Path, nothing_published: Callable[[HitchRoot], None]
) -> None:
    with pytest.raises(HitchError) as err:
        import_model(hroot, checkpoint, "plain", tool_call_parser="hermes2")
    assert err.value.code == "usage_error" and "hermes" in err.value.details["choices"]
    nothing_published(hroot)
