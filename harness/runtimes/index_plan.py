"""A python-env runtime's install plan, asked of the package index pip would use: no wheel is downloaded.

For every ``name==version --hash=sha256:...`` pin of a runtime's requirements file, the index's project page (the
simple repository API: PEP 691 JSON, or PEP 503 HTML for an index that serves only that) must list a file
with exactly the pinned sha256 that is not yanked; that file's record (name, size, ``requires-python``, upload
time) is the plan. A pin fails as **missing** (the index has no such version), **re-hashed** (the version is
there but no file has the pinned sha256: re-uploaded or replaced) or **yanked** — each found before a GPU
machine spends its time downloading 4.4 GB to learn it.

Which index: the one ``pip install`` uses for the requirements (``hitch runtime install``): ``PIP_INDEX_URL``, else
pip's configuration (``pip config list``: ``install.index-url`` before ``global.index-url``), else PyPI.
Extra indexes are not asked: a runtime's requirements are resolved from the index alone
(``scripts/resolve_runtime_requirements.py``), so it must install from it alone.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urljoin, urlparse

import httpx

from harness.contracts.base import Record
from harness.contracts.runtime import InferenceRuntimeManifestV1, PythonEnvPackage
from harness.errors import HitchError
from harness.runtimes.catalog import RequirementPin, requirement_pins, runtime_source_dir

__all__ = [
    "DEFAULT_INDEX",
    "IndexFileV1",
    "InstallPlanV1",
    "PinCheckV1",
    "install_plan",
    "pip_index_url",
    "require_resolvable",
]

DEFAULT_INDEX = "https://pypi.org/simple"
_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
_TIMEOUT = httpx.Timeout(30.0, connect=10.0)


class IndexFileV1(Record):
    """One file as the index lists it."""

    filename: str
    sha256: str | None
    size: int | None = None
    requires_python: str | None = None
    yanked: bool | str = False
    upload_time: str | None = None


class PinCheckV1(Record):
    name: str
    version: str
    status: Literal["ok", "missing", "rehashed", "yanked"]
    file: IndexFileV1 | None = None
    detail: str = ""


class InstallPlanV1(Record):
    schema_version: Literal["1"] = "1"
    runtime: str
    index_url: str
    index_source: str
    extra_index_urls: list[str]
    pins: list[PinCheckV1]

    @property
    def total_bytes(self) -> int | None:
        sizes = [p.file.size for p in self.pins if p.file is not None]
        return None if any(s is None for s in sizes) else sum(s for s in sizes if s is not None)

    @property
    def problems(self) -> list[PinCheckV1]:
        return [p for p in self.pins if p.status != "ok"]


def pip_index_url(python: str = sys.executable) -> tuple[str, str, list[str]]:
    """(index URL, where pip got it, extra index URLs) as ``python -m pip install`` would use them."""
    proc = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False, timeout=60)
    config: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            config[key.strip()] = value.strip().strip("'\"")
    extra_keys = (":env:.extra-index-url", "install.extra-index-url", "global.extra-index-url")
    extras = next((config[k] for k in extra_keys if k in config), "")
    for key, source in (
        (":env:.index-url", "PIP_INDEX_URL"),
        ("install.index-url", "pip config install.index-url"),
        ("global.index-url", "pip config global.index-url"),
    ):
        if config.get(key):
            return config[key].rstrip("/"), source, extras.split()
    return DEFAULT_INDEX, "pip's default index", extras.split()


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _wheel_version(filename: str) -> str | None:
    parts = filename.split("-")
    if filename.endswith(".whl") and len(parts) >= 5:
        return parts[1]
    return None


class _Anchors(HTMLParser):
    """PEP 503: one ``<a href="URL#sha256=HEX" data-yanked=... data-requires-python=...>FILENAME</a>`` per file."""

    def __init__(self) -> None:
        super().__init__()
        self.files: list[tuple[dict[str, str | None], str]] = []
        self._open: dict[str, str | None] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._open = dict(attrs)

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self.files.append((self._open, data.strip()))
            self._open = None


def _from_html(text: str, base: str) -> list[IndexFileV1]:
    parser = _Anchors()
    parser.feed(text)
    files = []
    for attrs, filename in parser.files:
        href = attrs.get("href") or ""
        digest = re.search(r"#sha256=([0-9a-f]{64})", href)
        size = None
        url = urljoin(base, href.split("#", 1)[0])
        if url.startswith("file://"):
            local = Path(unquote(urlparse(url).path))
            size = local.stat().st_size if local.is_file() else None
        yanked: bool | str = False
        if "data-yanked" in attrs:  # present means yanked; its value, if any, is the reason
            yanked = attrs["data-yanked"] or True
        files.append(
            IndexFileV1(
                filename=filename,
                sha256=digest.group(1) if digest else None,
                size=size,
                requires_python=attrs.get("data-requires-python"),
                yanked=yanked,
            )
        )
    return files


def _from_json(data: dict[str, Any]) -> list[IndexFileV1]:
    return [
        IndexFileV1(
            filename=f["filename"],
            sha256=(f.get("hashes") or {}).get("sha256"),
            size=f.get("size"),
            requires_python=f.get("requires-python"),
            yanked=f.get("yanked", False),
            upload_time=f.get("upload-time"),
        )
        for f in data.get("files", [])
    ]


def _project_files(client: httpx.Client, index: str, name: str) -> list[IndexFileV1] | None:
    """The files the index lists for project ``name``; None when it has no such project."""
    url = f"{index}/{_norm(name)}/"
    if url.startswith("file://"):
        page = Path(unquote(urlparse(url).path)) / "index.html"
        return _from_html(page.read_text(encoding="utf-8"), url) if page.is_file() else None
    response = client.get(url)
    if response.status_code == 404:
        return None
    response.raise_for_status()
    if "json" in response.headers.get("content-type", ""):
        return _from_json(response.json())
    return _from_html(response.text, str(response.url))


def _check(pin: RequirementPin, files: list[IndexFileV1] | None) -> PinCheckV1:
    same_version = [f for f in files or [] if _wheel_version(f.filename) == pin.version or f"-{pin.version}." in f.filename]
    match = next((f for f in files or [] if f.sha256 in pin.sha256s), None)
    if match is None and not same_version:
        detail = "no such project on the index" if files is None else f"the index lists no {pin.name} {pin.version}"
        return PinCheckV1(name=pin.name, version=pin.version, status="missing", detail=detail)
    if match is None:
        listed = ", ".join(f"{f.filename} sha256:{f.sha256}" for f in same_version[:3])
        detail = f"no file has the pinned sha256; the index lists {listed}"
        return PinCheckV1(name=pin.name, version=pin.version, status="rehashed", detail=detail)
    if match.yanked:
        reason = match.yanked if isinstance(match.yanked, str) else "no reason given"
        return PinCheckV1(name=pin.name, version=pin.version, status="yanked", file=match, detail=f"yanked: {reason}")
    return PinCheckV1(name=pin.name, version=pin.version, status="ok", file=match)


def install_plan(
    manifest: InferenceRuntimeManifestV1,
    *,
    index_url: str | None = None,
    catalog_path: Path | None = None,
    workers: int = 16,
) -> InstallPlanV1:
    """Every pin of ``manifest``'s requirements checked against the index (``index_url``, default: pip's); an index that
    does not answer is ``runtime_index_unavailable``."""
    if not isinstance(manifest.package, PythonEnvPackage):
        raise HitchError("usage_error", f"runtime {manifest.name} is an OCI image: it has no requirements to plan", {})
    requirements = runtime_source_dir(manifest.name, catalog_path) / manifest.package.lock_file.path
    pins: Sequence[RequirementPin] = requirement_pins(requirements.read_text())
    if index_url is None:
        index, source, extras = pip_index_url()
    else:
        index, source, extras = index_url.rstrip("/"), "--index-url", []
    headers = {"Accept": _ACCEPT, "User-Agent": "hitch-runtime-plan"}
    try:
        with (
            httpx.Client(headers=headers, timeout=_TIMEOUT, follow_redirects=True) as client,
            ThreadPoolExecutor(max_workers=workers) as pool,
        ):
            pages = list(pool.map(lambda pin: _project_files(client, index, pin.name), pins))
    except (httpx.HTTPError, OSError, ValueError) as exc:
        raise HitchError(
            "runtime_index_unavailable",
            f"the package index {index} did not answer for runtime {manifest.name}: {type(exc).__name__}: {exc}",
            {"index_url": index, "runtime": manifest.name},
        ) from exc
    checks = [_check(pin, files) for pin, files in zip(pins, pages, strict=True)]
    return InstallPlanV1(runtime=manifest.name, index_url=index, index_source=source, extra_index_urls=extras, pins=checks)


def require_resolvable(plan: InstallPlanV1) -> InstallPlanV1:
    """``plan``, or ``runtime_lock_unresolvable`` naming each yanked, missing or re-hashed pin."""
    bad = plan.problems
    if bad:
        named = "; ".join(f"{p.name}=={p.version} {p.status}" for p in bad[:10])
        raise HitchError(
            "runtime_lock_unresolvable",
            f"{len(bad)} pin(s) of runtime {plan.runtime} do not resolve on {plan.index_url}: {named}",
            {"index_url": plan.index_url, "problems": [p.to_json_dict() for p in bad]},
        )
    return plan
