"""The reference prompt sets as shipped data (``certify/reference_prompts.json``): pinned, and validated on load.

A set's identity is the digest of its rendered prompts (part of the reference cache key): the pins below are the
digests the sets had when their texts lived in the module, so a change to a prompt is a deliberate one (it
invalidates every cached reference run) and the accepted answers cannot drift unnoticed either.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from certify.reference_set import PROMPTS, PROMPTS_PATH, REFERENCE_SETS, load_prompts
from fixtures.reference import prompt_set_digest
from harness.ids import digest_json

PROMPT_SET_DIGESTS = {
    "parity": "sha256:22af03d6f5b65d3b4a312e252200d813cf3fba741f53618e832193fc8b573aee",
    "eval": "sha256:4427ca1542b5f1619cff899c618084e30d3385bc3c298913700e6a2e91f55905",
    "natural_stop": "sha256:c97f07c7919037933addf67b1cc498ea09a065c83cce6751baa9d3a8a008c6d0",
}
# every text of the file, the eval set's accepted answers included
PROMPTS_DIGEST = "sha256:f28724872a308c6341443ba8a74bc6856ce2bec432acd869c5a0d82c9b8f0c57"


def test_the_sets_keep_their_identity() -> None:
    assert {name: prompt_set_digest(s.prompts) for name, s in REFERENCE_SETS.items()} == PROMPT_SET_DIGESTS
    assert digest_json(PROMPTS.to_json_dict()) == PROMPTS_DIGEST


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (lambda d: d.update(extra_set=[]), "extra_set"),
        (lambda d: d["eval_set"][0].update(accepted=[]), "accepted"),
        (lambda d: d["eval_set"][1].update(question=d["eval_set"][0]["question"]), "eval_set repeats a prompt"),
        (lambda d: d["parity_prompts"].append(""), "parity_prompts"),
    ],
    ids=["unknown-field", "no-answer", "repeated-question", "empty-prompt"],
)
def test_a_malformed_prompt_file_is_refused_on_load(tmp_path: Path, change: Callable[[dict[str, Any]], None], error: str) -> None:
    data = json.loads(PROMPTS_PATH.read_text(encoding="utf-8"))
    change(data)
    bad = tmp_path / "reference_prompts.json"
    bad.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValidationError, match=error):
        load_prompts(bad)
