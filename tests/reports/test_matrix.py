"""The support matrix counts only entries that verify; every other entry is listed apart with its reason."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.errors import HitchError
from reports.builder import build_matrix
from tests.reports import sample_data as sd


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(entries dir, trusted keys dir, untrusted private key) with two good entries already signed."""
    private, public = sd.signing_key(tmp_path)
    other, _ = sd.signing_key(tmp_path, "untrusted")
    entries = tmp_path / "entries"
    sd.sign_entry(entries, private, sd.predicate())
    sd.sign_entry(entries, private, sd.predicate(profile="throughput", level="provisional", engine="sglang"))
    return entries, public, other


def test_tampered_and_untrusted_entries_are_rejected_with_reasons(signed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    entries, keys, untrusted = signed
    private, second_keys = sd.signing_key(tmp_path, "trusted2")
    # signed by a trusted key (from the second keys dir), then the level edited: the signature no longer covers it
    tampered = sd.tamper_level(sd.sign_entry(entries, private, sd.predicate(profile="latency")))
    stranger = sd.sign_entry(entries, untrusted, sd.predicate(profile="stranger", level="certified"))
    (entries / "garbage.dsse.json").write_text("{not json")

    page = build_matrix(entries, [keys, second_keys], tmp_path / "out")
    html = page.read_text()

    assert page == tmp_path / "out" / "matrix.html"
    assert html.count('class="matrix-row"') == 2
    assert ">baseline<" in html and ">throughput<" in html
    # the tampered entry claimed "certified"; neither it nor the stranger's entry reaches the matrix
    assert ">latency<" not in html and ">stranger<" not in html
    assert 'data-level="certified"' not in html
    assert html.count('class="rejected-entry"') == 3
    for path, reason in ((tampered, "bad signature"), (stranger, "signed by no trusted key")):
        start = html.index(f"<code>{path.name}</code>")
        item = html[start : html.index("</li>", start)]
        assert "catalog_signature_invalid" in item and reason in item
    assert "garbage.dsse.json</code>: <strong>unreadable</strong>" in html


def test_newest_entry_per_combination_wins_and_older_ones_are_counted(signed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    entries, keys, _ = signed
    private = tmp_path / "trusted" / "key.pem"
    sd.sign_entry(entries, private, sd.predicate(level="failed", finished_at="2026-12-01T09:00:00Z", project_commit="f" * 40))
    html = build_matrix(entries, keys, tmp_path / "out").read_text()
    start = html.index('<tr class="matrix-row" data-level="failed">')
    row = html[start : html.index("</tr>", start)]
    assert ">baseline<" in row and "2026-12-01T09:00:00Z" in row and "f" * 12 in row
    assert '<td class="num">2</td>' in row
    assert 'data-level="contract"' not in html


@dataclass(frozen=True)
class _Verified:
    keyid: str
    statement: dict[str, Any]
    predicate: Mapping[str, Any]


def test_verify_function_is_injectable(tmp_path: Path) -> None:
    entries = tmp_path / "entries"
    entries.mkdir()
    (entries / "a.dsse.json").write_text(json.dumps({"predicate": sd.predicate()}))
    (entries / "b.dsse.json").write_text(json.dumps({"predicate": sd.predicate(profile="other"), "bad": True}))
    (entries / "c.dsse.json").write_text(json.dumps({"predicate": {"level": "certified"}}))
    seen: list[Path] = []

    def verify(envelope: dict[str, Any], keys_dir: Any) -> _Verified:
        seen.append(keys_dir)
        if envelope.get("bad"):
            raise HitchError("catalog_signature_invalid", "stub says no")
        return _Verified("stub-key", envelope, envelope["predicate"])

    html = build_matrix(entries, tmp_path / "keys", tmp_path / "out", verify=verify).read_text()
    assert seen == [tmp_path / "keys"] * 3
    assert html.count('class="matrix-row"') == 1 and "stub-key" in html
    assert "b.dsse.json</code>: <strong>catalog_signature_invalid</strong> — stub says no" in html
    assert "c.dsse.json</code>: <strong>predicate_incomplete</strong>" in html


def test_no_entries_gives_an_empty_matrix_and_a_missing_dir_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "entries").mkdir()
    html = build_matrix(tmp_path / "entries", tmp_path, tmp_path / "out").read_text()
    assert 'id="matrix-empty"' in html and 'id="rejected-none"' in html
    with pytest.raises(HitchError) as err:
        build_matrix(tmp_path / "missing", tmp_path, tmp_path / "out")
    assert err.value.code == "report_input_invalid"


def test_the_matrix_names_the_model(tmp_path: Path) -> None:
    private, keys = sd.signing_key(tmp_path)
    entries = tmp_path / "entries"
    model = {"name": "SmolLM2-135M-Instruct", "architecture": "LlamaForCausalLM", "parameters": 134515008,
             "license": "Apache-2.0", "source": "HuggingFaceTB/SmolLM2-135M-Instruct, Q4_1 GGUF"}  # fmt: skip
    sd.sign_entry(entries, private, sd.predicate(model=model))
    sd.sign_entry(entries, private, sd.predicate(profile="throughput"))  # an entry without model facts
    html = build_matrix(entries, keys, tmp_path / "out").read_text()
    rows = [html[s : html.index("</tr>", s)] for s in range(len(html)) if html.startswith('<tr class="matrix-row"', s)]
    named = next(r for r in rows if ">baseline<" in r)
    assert '<strong class="model-name">SmolLM2-135M-Instruct</strong>' in named
    assert "LlamaForCausalLM · 134.5M parameters · Apache-2.0" in named
    assert "HuggingFaceTB/SmolLM2-135M-Instruct, Q4_1 GGUF" in named and sd.digest("model")[:23] in named
    bare = next(r for r in rows if ">throughput<" in r)
    assert "model-name" not in bare and sd.digest("model")[:23] in bare
