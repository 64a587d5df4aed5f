"""The pages as a browser sees them: headless Chromium loads each file and dumps its DOM, which we check.

Chromium is Debian's ``chromium`` package. Without it the test skips, unless ``HITCH_REQUIRE_CHROMIUM`` is set
(CI sets it): then a missing browser is a failure, never a silent skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

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


def dump_dom(exe: str, page: Path, profile: Path) -> str:
    proc = subprocess.run(
        [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            f"--user-data-dir={profile}",
            "--dump-dom",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HOME": str(profile)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "<html" in proc.stdout, proc.stderr[-2000:]
    return proc.stdout


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
    assert "overhead-unary-added" in svgs and "overhead-throughput-c32" in svgs and "lifecycle-timings" in svgs
    assert len(run.find("rect", **{"class": "bar"})) >= 12
    assert run.find("polyline", **{"class": "series"})

    load = Dom(dump_dom(exe, pages["load"], profile))
    assert [a["data-chart"] for a in load.find("svg", **{"class": "chart"})] == ["load-rps", "load-users", "load-p50", "load-p95"]
    assert len(load.find("polyline", **{"class": "series"})) == 8
    assert len(load.find("tr", **{"class": "figure-row"})) == 9


def test_missing_chromium_skips_only_when_not_required(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("HITCH_REQUIRE_CHROMIUM", raising=False)
    with pytest.raises(pytest.skip.Exception):
        chromium_or_skip()
    monkeypatch.setenv("HITCH_REQUIRE_CHROMIUM", "1")
    with pytest.raises(pytest.fail.Exception, match="HITCH_REQUIRE_CHROMIUM"):
        chromium_or_skip()
