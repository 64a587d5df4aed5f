"""The pages as a browser sees them: headless Chromium loads each file and dumps its DOM, which we check.

Chromium is Debian's ``chromium`` package. Without it the test skips, unless ``HITCH_REQUIRE_CHROMIUM`` is set
(CI sets it): then a missing browser is a failure, never a silent skip.

Layout is checked at 1,400 and 800 px wide: a screenshot of each width (``HITCH_SCREENSHOT_DIR``, when set,
keeps them for a person to look at), and a probe — a copy of the page beside it with the page's CSP meta
removed and a short script appended that measures the laid-out page and writes the figures into the DOM —
says whether the page scrolls sideways, where the summary ends, and what each chart's text alternative is.
The published page itself carries no script.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tests.components import missing
from tests.reports import sample_data as sd

pytestmark = pytest.mark.needs_chromium


def chromium_or_skip() -> str:
    """The browser executable; a skip when absent, or a failure when HITCH_REQUIRE_CHROMIUM is set."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        exe = shutil.which(name)
        if exe:
            return exe
    missing("chromium", "no chromium on PATH (apt-get install -y chromium)")


def _chromium(exe: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
         f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HOME": str(profile)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def dump_dom(exe: str, page: Path, profile: Path, *, width: int = 1400, height: int = 1000) -> str:
    proc = _chromium(exe, profile, f"--window-size={width},{height}", "--dump-dom", page.resolve().as_uri())
    assert "<html" in proc.stdout, proc.stderr[-2000:]
    return proc.stdout


def screenshot(exe: str, page: Path, profile: Path, out: Path, *, width: int, height: int = 1000) -> tuple[int, int]:
    """A PNG of the first screenful at ``width`` px; returns its (width, height) as the PNG header says."""
    _chromium(
        exe, profile, "--hide-scrollbars", f"--window-size={width},{height}", f"--screenshot={out}", page.resolve().as_uri()
    )
    keep = os.environ.get("HITCH_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(out, Path(keep) / out.name)
    header = out.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    w, h = struct.unpack(">II", header[16:24])
    return w, h


# measures the laid-out page (see the module doc); ACTION runs first (e.g. choosing a filter)
_PROBE = """<script>(function () {
  ACTION
  const d = document.documentElement, s = document.getElementById("summary");
  const r = s ? s.getBoundingClientRect() : null;
  const out = {
    scrollWidth: d.scrollWidth, clientWidth: d.clientWidth, innerHeight: innerHeight,
    summary: r && {top: r.top, bottom: r.bottom},
    sideways: [...document.querySelectorAll("body *")].filter(e => e.getBoundingClientRect().right > d.clientWidth + 1
      && !e.closest(".scroll")).map(e => e.tagName + "#" + e.id + "." + e.getAttribute("class")).slice(0, 10),
    charts: [...document.querySelectorAll("svg.chart")].map(c => ({
      name: c.dataset.chart, label: c.getAttribute("aria-label") || "",
      desc: (c.querySelector("desc") || {}).textContent || "", shown: c.getBoundingClientRect().width > 0})),
    rows: [...document.querySelectorAll("tr.matrix-row")].filter(e => e.getClientRects().length > 0).length,
    columns: [...document.querySelectorAll("#compare thead th.ecol")].filter(e => e.getClientRects().length > 0)
      .map(e => e.className),
  };
  const pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();</script>"""


def probe(exe: str, page: Path, profile: Path, *, width: int, height: int = 1000, action: str = "") -> dict[str, Any]:
    """The probe's figures for ``page`` laid out at ``width`` x ``height`` (see the module doc)."""
    html = page.read_text()
    assert "<script" not in html, "a published page carries no script"
    html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html)
    copy = page.with_name(page.stem + ".probe.html")
    copy.write_text(html.replace("</body>", _PROBE.replace("ACTION", action) + "</body>"))
    try:
        dom = dump_dom(exe, copy, profile, width=width, height=height)
    finally:
        copy.unlink()
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, "the probe did not run"
    figures: dict[str, Any] = json.loads(found.group(1).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))
    return figures


class Dom(HTMLParser):
    """Elements of the dumped DOM as (tag, attrs) plus the text inside elements with an id."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self._open_ids: list[tuple[str, str]] = []
        self.text_by_id: dict[str, str] = {}
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.elements.append((tag, a))
        if "id" in a:
            self._open_ids.append((tag, a["id"]))
            self.text_by_id.setdefault(a["id"], "")

    def handle_endtag(self, tag: str) -> None:
        if self._open_ids and self._open_ids[-1][0] == tag:
            self._open_ids.pop()

    def handle_data(self, data: str) -> None:
        for _, ident in self._open_ids:
            self.text_by_id[ident] += data

    def find(self, tag: str, **attrs: str) -> list[dict[str, str]]:
        wanted = {k.replace("_", "-"): v for k, v in attrs.items()}
        return [a for t, a in self.elements if t == tag and all(v in a.get(k, "").split() for k, v in wanted.items())]


def test_pages_render_in_headless_chromium(tmp_path: Path) -> None:
    exe = chromium_or_skip()
    pages = sd.build_all(tmp_path)
    profile = tmp_path / "chromium-profile"

    matrix = Dom(dump_dom(exe, pages["matrix"], profile))
    rows = matrix.find("tr", **{"class": "matrix-row"})
    assert [r["data-level"] for r in rows] == ["contract"]
    rejected = matrix.find("li", **{"class": "rejected-entry"})
    assert [r["data-code"] for r in rejected] == ["catalog_signature_invalid"]
    assert "bad signature" in matrix.text_by_id["rejected"]
    assert "latency" not in matrix.text_by_id["matrix"]

    run = Dom(dump_dom(exe, pages["run"], profile))
    assert run.find("script") == []
    assert "<script>alert('x')</script>" in run.text_by_id["checks"]  # shown as text, not run as a script
    assert len(run.find("tr", **{"class": "check-row"})) == 4
    svgs = [a["data-chart"] for a in run.find("svg", **{"class": "chart"})]
    assert "overhead-residence" in svgs and "overhead-throughput-c32" in svgs and "lifecycle-timings-s" in svgs
    assert len(run.find("rect", **{"class": "bar"})) >= 12
    assert len(run.find("circle", **{"class": "noise"})) == 6  # the black-box difference's intervals hold 0

    load = Dom(dump_dom(exe, pages["load"], profile))
    assert [a["data-chart"] for a in load.find("svg", **{"class": "chart"})] == ["load-rps", "load-users", "load-p50", "load-p95"]
    assert len(load.find("polyline", **{"class": "series"})) == 8
    assert len(load.find("tr", **{"class": "figure-row"})) == 9


WIDTHS = (1400, 800)


def _realistic_run(tmp_path: Path) -> Path:
    """A run page as a provisional real-engine session writes it: every suite, skips, a model limit, faults,
    the decided overhead, lifecycle timings in two units."""
    from reports.builder import build_run_page

    checks = [
        {"id": f"{suite}.check_{i}", "status": "passed", "required": True, "duration_s": 1.5 + i,
         "summary": f"the {suite} behaviour number {i} held: 4 of 4 requests answered as SGLang answers them",
         "details": {"n": i}}
        for suite in ("hardware", "protocol", "correctness", "security", "lifecycle", "perf", "agents") for i in range(3)
    ] + [
        {"id": "faults.connection_reset.broken_stream", "status": "passed", "required": True, "duration_s": 2.0,
         "summary": "a reset after 2 events ends the stream broken; the evidence row says failed",
         "details": {"fault_kind": "network", "fault": {"via": "proxy", "spec": ['{"mode":"reset","after_events":2}']},
                     "client": {"status": 200, "broken": True}, "evidence": {"status": "failed", "error_code": None},
                     "recovery_ms": 111733.8}},
        {"id": "agents.codex.real_tool_loop", "status": "passed", "required": False, "duration_s": 95.0,
         "summary": "not shown for this model: 135M parameters", "details": {"not_applicable": "135M parameters"}},
        {"id": "agents.harbor.real_model", "status": "skipped", "required": False, "duration_s": 0.0,
         "details": {"reason": "agents.harbor.real_model: Harbor is not installed under the root (hitch eval harbor install)"}},
    ]  # fmt: skip
    reasons = [
        "agents.harbor.real_model: optional check skipped",
        "CPU lacks AMX (amx_bf16, amx_int8, amx_tile): the SGLang CPU engine needs Intel AMX",
        "runtime sglang-0.5.23-cpu-generic is not a pinned certifiable catalog runtime",
        "not certified without a Codex run on the real engine whose model makes at least 2 tool round trips and "
        "changes a file: the model cannot: 135M parameters",
    ]
    model = {"name": "SmolLM2-135M-Instruct", "architecture": "LlamaForCausalLM", "parameters": 134515008,
             "license": "Apache-2.0", "source": "HuggingFaceTB/SmolLM2-135M-Instruct"}  # fmt: skip
    pred = sd.predicate(level="provisional", engine="sglang", checks=checks, reasons=reasons, model=model,
                        to_certify=["run on an x86_64 CPU with Intel AMX (4th-generation Xeon or later)",
                                    "certify with a pinned certifiable runtime from the catalog (not the generic-CPU shim)",
                                    "certify a model that drives Codex's tool loop (make codex)"])  # fmt: skip
    lifecycle = {"warm_acquire_ms": 312.0, "idle_stop_s": 3.11, "idle_stop_after_ttl_s": 6.11, "recovery_restart_s": 8.74,
                 "cancel_slot_free_ms": 135.0}  # fmt: skip
    cpu = {"cores": 2, "user_s": 100.0, "system_s": 20.0, "utilisation": 0.4286}
    results = {**pred, "overhead": sd.overhead(), "lifecycle": lifecycle, "timeline": sd.timeline(cpu=cpu)}
    return build_run_page(results, tmp_path / "out")


def test_the_run_page_at_1400_and_800_px_summary_first_no_sideways_scroll_charts_described(tmp_path: Path) -> None:
    exe = chromium_or_skip()
    page = _realistic_run(tmp_path)
    profile = tmp_path / "chromium-profile"
    for width in WIDTHS:
        assert screenshot(exe, page, profile, tmp_path / f"run-{width}.png", width=width) == (width, 1000)
        got = probe(exe, page, profile, width=width)
        assert got["scrollWidth"] <= got["clientWidth"], (width, got["sideways"])
        assert got["sideways"] == [], width
        summary = got["summary"]
        assert summary is not None and summary["top"] >= 0 and summary["bottom"] <= got["innerHeight"], (width, summary)
        assert len(got["charts"]) >= 7
        assert "session-timeline" in [chart["name"] for chart in got["charts"]]
        for chart in got["charts"]:
            assert chart["label"] and chart["desc"].startswith(chart["label"].rsplit(" (", 1)[0]), chart
            assert chart["shown"] or chart["name"].startswith("overhead-throughput"), chart  # in a closed <details> otherwise


def test_the_matrix_and_compare_pages_fit_and_filter_without_a_page_script(tmp_path: Path) -> None:
    exe = chromium_or_skip()
    private, keys = sd.signing_key(tmp_path)
    entries = tmp_path / "entries"
    for day in ("01", "02", "03"):
        sd.sign_entry(entries, private, sd.predicate(finished_at=f"2026-11-{day}T00:00:00Z"))
    sd.sign_entry(entries, private, sd.predicate(device="cuda", runtime_name="sglang-0.5.23-cuda", runtime_id=sd.digest("cuda")))
    from reports.builder import build_matrix

    matrix = build_matrix(entries, keys, tmp_path / "out")
    compare = matrix.with_name("compare.html")
    profile = tmp_path / "chromium-profile"
    for width in WIDTHS:
        for page in (matrix, compare):
            screenshot(exe, page, profile, tmp_path / f"{page.stem}-{width}.png", width=width)
            got = probe(exe, page, profile, width=width)
            assert got["scrollWidth"] <= got["clientWidth"] and got["sideways"] == [], (page.name, width, got["sideways"])
    assert probe(exe, matrix, profile, width=1400)["rows"] == 2
    cuda = 'document.getElementById("f0v1").checked = true;'  # device filter: cuda
    assert probe(exe, matrix, profile, width=1400, action=cuda)["rows"] == 1
    # compare: the two newest by default; choosing another entry as B shows its column instead
    assert probe(exe, compare, profile, width=1400)["columns"] == ["ecol col-e3", "ecol col-e2"]
    other = 'document.getElementById("b-e0").checked = true;'
    assert probe(exe, compare, profile, width=1400, action=other)["columns"] == ["ecol col-e3", "ecol col-e0"]


def test_missing_chromium_skips_only_when_not_required(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("HITCH_REQUIRE_CHROMIUM", raising=False)
    with pytest.raises(pytest.skip.Exception):
        chromium_or_skip()
    monkeypatch.setenv("HITCH_REQUIRE_CHROMIUM", "1")
    with pytest.raises(pytest.fail.Exception, match="HITCH_REQUIRE_CHROMIUM"):
        chromium_or_skip()
