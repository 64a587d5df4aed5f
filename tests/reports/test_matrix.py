"""The support matrix counts only entries that verify; every other entry is listed apart with its reason."""

from __future__ import annotations

import json
import re
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
    row = _rows(html)[0]
    assert 'data-level="failed"' in row
    assert "baseline" in row and "2026-12-01T09:00:00Z" in row and "f" * 12 in row
    assert "<summary>2 entries</summary>" in row
    assert [r for r in _rows(html) if 'class="matrix-row" data-level="contract"' in r] == []


def _rows(html: str) -> list[str]:
    """Each matrix row's markup (up to the next row; a row's history table is nested in it)."""
    starts = [i for i in range(len(html)) if html.startswith('<tr class="matrix-row"', i)]
    ends = [*starts[1:], html.index("<h2>Rejected entries</h2>")]
    return [html[s:e] for s, e in zip(starts, ends, strict=True)]


def test_three_entries_of_one_combination_show_their_history_with_the_key_figures(tmp_path: Path) -> None:
    private, keys = sd.signing_key(tmp_path)
    entries = tmp_path / "entries"
    old = {**sd.predicate(finished_at="2026-10-01T00:00:00Z"), "schema_version": "2"}
    old["metrics"] = {"gateway_added_latency_ms": {"p50": 33.9, "p95": -18.1, "p99": -63.6}}
    old["checks"] = [{k: v for k, v in c.items() if k != "summary"} for c in old["checks"]]
    sd.sign_entry(entries, private, old)
    sd.sign_entry(entries, private, sd.predicate(level="failed", finished_at="2026-11-01T00:00:00Z",
                                                 metrics=sd.overhead_metrics(3.0, verdict="over")))  # fmt: skip
    sd.sign_entry(entries, private, sd.predicate(finished_at="2026-12-01T00:00:00Z", metrics=sd.overhead_metrics(1.2)))
    sd.sign_entry(entries, private, sd.predicate(profile="throughput"))  # another combination: its own row
    html = build_matrix(entries, keys, tmp_path / "out").read_text()
    rows = _rows(html)
    assert len(rows) == 2
    row = next(r for r in rows if "baseline" in r)
    trend = row[row.index('<div class="trend">') : row.index("</div>", row.index('<div class="trend">'))]
    assert re.findall(r'<span class="badge \w+" title="([\d-]+)T', trend) == ["2026-10-01", "2026-11-01", "2026-12-01"]
    assert re.findall(r">(contract|failed)</span>", trend) == ["contract", "failed", "contract"]
    history = re.findall(r'<tr class="history-row" data-level="(\w+)">(.*?)</tr>', row, re.S)
    assert [level for level, _ in history] == ["contract", "failed", "contract"]
    oldest, failed, newest = (cells for _, cells in history)
    assert "+33.9 ms black-box difference (schema 2, no interval)" in oldest
    assert "1.50 ms (95 % 1.43 to 1.57)" in failed and '<span class="badge bad">over</span>' in failed
    assert "0.60 ms (95 % 0.57 to 0.63)" in newest and '<span class="badge ok">within</span>' in newest
    assert "2/4" in newest  # checks passed of the entry


def test_rows_filter_by_device_runtime_and_model_without_a_script(tmp_path: Path) -> None:
    private, keys = sd.signing_key(tmp_path)
    entries = tmp_path / "entries"
    sd.sign_entry(entries, private, sd.predicate())
    sd.sign_entry(entries, private, sd.predicate(device="cuda", runtime_name="sglang-0.5.23-cuda", runtime_id=sd.digest("cuda")))
    html = build_matrix(entries, keys, tmp_path / "out").read_text()
    assert "<script" not in html
    fieldsets = re.findall(r'<fieldset data-field="(\w+)"><legend>(\w+)</legend>(.*?)</fieldset>', html, re.S)
    assert [(f, label) for f, label, _ in fieldsets] == [
        ("device", "device"),
        ("runtime_name", "runtime"),
        ("model_label", "model"),
    ]
    device_options = re.findall(r'id="(f0v\d)"> (\w+)</label>', fieldsets[0][2])
    assert device_options == [("f0v0", "cpu"), ("f0v1", "cuda")]
    rows = re.findall(r'<tr class="matrix-row" [^>]*data-device="(f0v\d)"', html)
    assert sorted(rows) == ["f0v0", "f0v1"]
    # choosing a device hides every row of another device (CSS :has on the radio)
    assert 'body:has(#f0v1:checked) tr.matrix-row:not([data-device="f0v1"]) { display: none; }' in html


def test_the_compare_page_holds_every_verified_entry_for_any_two_side_by_side(
    signed: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    entries, keys, _ = signed
    page = build_matrix(entries, keys, tmp_path / "out")
    assert 'href="compare.html"' in page.read_text()
    compare = (tmp_path / "out" / "compare.html").read_text()
    assert "<script" not in compare
    picks = re.findall(r'<input type="radio" name="([ab])" id="[ab]-(e\d)"( checked)?>', compare)
    assert sorted({k for _, k, _ in picks}) == ["e0", "e1"] and len(picks) == 4
    assert [(side, key) for side, key, checked in picks if checked] == [("a", "e1"), ("b", "e0")]  # newest, then the one before
    assert "body:has(#a-e0:checked) .col-e0, body:has(#b-e0:checked) .col-e0 { display: table-cell; }" in compare
    assert compare.count('<tr class="compare-check">') == 4  # every check id of either entry


def test_no_published_page_names_a_local_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "hitch-root"
    monkeypatch.setenv("HITCH_ROOT", str(root))
    private, keys = sd.signing_key(root, "keys")
    report = root / "reports" / "out"
    model = {"name": "SmolLM2-135M-Instruct", "source": "a local checkpoint"}
    sd.sign_entry(report, private, sd.predicate(model=model))
    results = {**sd.results(), **sd.predicate(model=model)}
    # a check's details and an error may name the machine's paths; the page must not
    results["checks"][0]["details"] = {"workdir": str(root / "runs" / "r1"), "log": f"{report}/evidence/x"}
    results["checks"][2]["details"]["reason"] = f"E  FileNotFoundError: {tmp_path}/gone"
    (report / "broken.dsse.json").write_text("{not json")
    from reports.builder import build_run_page

    pages = [build_matrix(report, [keys], report), report / "compare.html", build_run_page(results, report)]
    for page in pages:
        html = page.read_text()
        for local in (str(report), str(root), str(keys), str(tmp_path)):
            assert local not in html, (page.name, local)
    run = pages[2].read_text()
    assert "$HITCH_ROOT/runs/r1" in run and "[report dir]/evidence/x" in run


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


def test_a_check_not_applicable_is_not_counted_as_passed_and_reads_not_shown(tmp_path: Path) -> None:
    private, keys = sd.signing_key(tmp_path)
    entries = tmp_path / "entries"
    pred = sd.predicate()
    na = {"id": "agents.codex.real_tool_loop", "status": "not_applicable", "required": False, "duration_s": 1.0,
          "summary": "not shown: 0 tool round trips", "details": {"not_applicable": "0 tool round trips"}}  # fmt: skip
    pred = {**pred, "schema_version": "4", "checks": [*pred["checks"], na]}
    sd.sign_entry(entries, private, pred)
    html = build_matrix(entries, keys, tmp_path / "out").read_text()
    passed = sum(1 for c in pred["checks"] if c["status"] == "passed")
    assert f"{passed}/{len(pred['checks'])}" in html  # the check is in the total, never among the passed
    compare = (tmp_path / "out" / "compare.html").read_text()
    row = next(r for r in re.findall(r'<tr class="compare-check">.*?</tr>', compare, re.S) if "real_tool_loop" in r)
    assert '<span class="badge warn">not shown</span>' in row
