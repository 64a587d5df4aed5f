"""Every page is one file that loads nothing: no scripts, no stylesheets, no network src/href."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from tests.reports import sample_data as sd

URL_ATTRS = {"src", "href", "srcset", "action", "formaction", "poster", "data", "xlink:href", "background"}


class _Refs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.refs: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.refs.extend((tag, name, value or "") for name, value in attrs if name in URL_ATTRS)


def test_pages_reference_no_network_resource(tmp_path: Path) -> None:
    pages = sd.build_all(tmp_path)
    for kind, page in pages.items():
        html = page.read_text()
        parser = _Refs()
        parser.feed(html)
        assert not {"script", "link", "iframe", "img", "object", "embed"} & set(parser.tags), kind
        for tag, attr, value in parser.refs:
            assert not re.match(r"^\s*([a-z][a-z0-9+.-]*:|//)", value, re.I), (kind, tag, attr, value)
        assert not re.search(r"https?://", html), kind
        assert "@import" not in html and "url(" not in html, kind
    # the matrix links to its entry file by a relative path, which resolves next to the page
    matrix = pages["matrix"]
    hrefs = [v for t, a, v in _collect(matrix) if a == "href"]
    assert hrefs and all((matrix.parent / h).resolve().is_file() for h in hrefs)


def _collect(page: Path) -> list[tuple[str, str, str]]:
    parser = _Refs()
    parser.feed(page.read_text())
    return parser.refs
