"""Build the local OCI image that runs the fake SGLang engine, from Debian packages, without a registry.

Usage: ``.venv/bin/python scripts/ci/build_fake_image.py [--tag hitch/fake-sglang:dev] [--force]``.
Prints ``IMAGE_ID=sha256:...`` (the reference the OCI launcher takes: pinned, never the tag).

Steps (facts behind them: shared/reference/docker-engine-in-ci.md):

1. ``apt-get download`` Debian bookworm's python3 (3.11) and the libraries it links, ``dpkg-deb -x`` each
   into one root directory; add ``/etc/passwd``, ``/etc/group``, ``/tmp``.
2. ``pip install --target`` the fake engine's deps (aiohttp, tokenizers, jinja2 and what they pull in),
   constrained to the versions in this checkout's venv, with the host's Python — it must be 3.11 like the
   image's, so compiled wheels match; then ``compileall`` so a read-only rootfs never needs a .pyc write.
3. Copy ``fixtures/__init__.py``, ``fixtures/fake_sglang/``, ``harness/chat_template.py``, ``harness/sglang_parsers.py``,
   ``harness/signals.py`` (the fake's SIGTERM handling) and ``harness/sse.py`` (the eval trial client built on
   this image reads its stream with it) in.
4. One tar (all files owned by root) → ``docker import`` with ENV/WORKDIR/LABEL changes; tag it.

Idempotent: the image carries ``dev.hitch.fixture-image.recipe`` = a hash of this script, the package
list, the pinned Python deps and the fixture sources; if an image with that label exists it is only
re-tagged (~0.3 s).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tarfile
import tempfile
import time
from importlib import metadata
from pathlib import Path

import docker
from rootfs_image import PYTHON_PACKAGES, clamp_tree, download_debs, populate_base, root_tar, run, tag_existing

REPO = Path(__file__).resolve().parents[2]
DEFAULT_TAG = "hitch/fake-sglang:dev"
RECIPE_LABEL = "dev.hitch.fixture-image.recipe"
KIND_LABEL = "dev.hitch.fixture-image"
APP_DIR = "/opt/hitch/app"
SITE_DIR = "/opt/hitch/site-packages"

DEBIAN_PACKAGES = PYTHON_PACKAGES
PY_TOP_LEVEL = ("aiohttp", "jinja2", "pyyaml", "pydantic")  # with their deps (pyyaml: --config YAML; pydantic: request models)
PY_NO_DEPS = ("tokenizers",)  # its huggingface_hub dependency is only for downloads (none here): ~25 MB saved
# leaf modules of ours the fake shares with the product (they import only jinja2 / the standard library): the
# chat-template environment, SGLang's tool-call parser names and the SSE reader (the eval trial client's)
FIXTURE_SOURCES = (
    "fixtures/__init__.py",
    "fixtures/fake_sglang",
    "harness/__init__.py",
    "harness/chat_template.py",
    "harness/sglang_parsers.py",
    "harness/sse.py",
    "harness/signals.py",
)


def _log(msg: str) -> None:
    print(f"build_fake_image: {msg}", flush=True)


def _fixture_files() -> list[Path]:
    files: list[Path] = []
    for rel in FIXTURE_SOURCES:
        p = REPO / rel
        if p.is_file():
            files.append(p)
        else:
            files.extend(sorted(f for f in p.rglob("*") if f.is_file() and "__pycache__" not in f.parts))
    return files


def _constraints() -> str:
    """The venv's installed distributions as ``name==version`` lines (pip constraints)."""
    lines = sorted(
        f"{d.metadata['Name']}=={d.version}"
        for d in metadata.distributions()
        if d.metadata["Name"] and d.metadata["Name"].lower() != "hitch-local-inference"
    )
    return "\n".join(lines) + "\n"


def recipe_hash(constraints: str) -> str:
    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes())
    h.update(Path(__file__).with_name("rootfs_image.py").read_bytes())
    h.update("\n".join(DEBIAN_PACKAGES + PY_TOP_LEVEL + PY_NO_DEPS).encode())
    h.update(constraints.encode())
    h.update(f"{sys.version_info.major}.{sys.version_info.minor}".encode())
    for f in _fixture_files():
        h.update(str(f.relative_to(REPO)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _populate_root(root: Path, debs: list[Path], site: Path) -> None:
    populate_base(root, debs)
    opt = root / SITE_DIR.lstrip("/")
    opt.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(site, opt, symlinks=True)
    app = root / APP_DIR.lstrip("/")
    for f in _fixture_files():
        target = app / f.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, target)


def _pip_target(site: Path, constraints: str, work: Path) -> None:
    cfile = work / "constraints.txt"
    cfile.write_text(constraints)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile"]
    pip += ["--only-binary=:all:", "--target", str(site), "-c", str(cfile)]
    run([*pip, *PY_TOP_LEVEL])
    run([*pip, "--no-deps", *PY_NO_DEPS])


def build(tag: str, force: bool) -> str:
    if sys.version_info[:2] != (3, 11):
        raise SystemExit("build_fake_image: run with Python 3.11 (the image's python3 is Debian bookworm's 3.11)")
    client = docker.from_env()
    constraints = _constraints()
    recipe = recipe_hash(constraints)
    repo_name, _, tag_name = tag.rpartition(":")
    found = None if force else tag_existing(client, RECIPE_LABEL, recipe, tag, _log)
    if found is not None:
        return found
    with tempfile.TemporaryDirectory(prefix="hitch-fake-image-") as tmp:
        work = Path(tmp)
        started = time.time() - 1  # anything this build writes is newer (clamped in the tar)
        t = time.monotonic()
        debdir, root, site = work / "debs", work / "root", work / "site"
        for d in (debdir, root, site):
            d.mkdir()
        debs = download_debs(DEBIAN_PACKAGES, debdir, _log)
        _log(f"downloaded {len(debs)} Debian packages in {time.monotonic() - t:.1f}s")
        t = time.monotonic()
        _pip_target(site, constraints, work)
        _log(f"installed {', '.join(PY_TOP_LEVEL + PY_NO_DEPS)} (+deps) in {time.monotonic() - t:.1f}s")
        t = time.monotonic()
        _populate_root(root, debs, site)
        clamp_tree(root, started)
        run([sys.executable, "-m", "compileall", "-q", "-j", "0", str(root / SITE_DIR.lstrip("/"))])
        run([sys.executable, "-m", "compileall", "-q", str(root / APP_DIR.lstrip("/"))])
        tar_path = work / "rootfs.tar"
        with tarfile.open(tar_path, "w") as tar:
            root_tar(root, tar, built_after=started)
        _log(f"rootfs {tar_path.stat().st_size / 1e6:.1f} MB assembled in {time.monotonic() - t:.1f}s")
        t = time.monotonic()
        changes = [
            f"ENV PYTHONPATH={APP_DIR}:{SITE_DIR}",
            "ENV PYTHONDONTWRITEBYTECODE=1",
            "ENV PATH=/usr/local/bin:/usr/bin:/bin",
            f"WORKDIR {APP_DIR}",
            'CMD ["python3", "-m", "fixtures.fake_sglang", "--help"]',
            f"LABEL {KIND_LABEL}=fake-sglang {RECIPE_LABEL}={recipe}",
        ]
        with tar_path.open("rb") as fh:
            out = client.api.import_image(src=fh, repository=repo_name, tag=tag_name, changes=changes)
        _log(f"docker import in {time.monotonic() - t:.1f}s")
    image = client.images.get(tag)
    if image.labels.get(RECIPE_LABEL) != recipe:
        raise SystemExit(f"build_fake_image: import did not produce the expected image: {out!r}")
    _remove_superseded(client, keep=str(image.id))
    return str(image.id)


def _remove_superseded(client: docker.DockerClient, keep: str, kind: str = "fake-sglang") -> None:
    """Older builds of this image (our label only); one still used by a container is left alone."""
    for old in client.images.list(filters={"label": f"{KIND_LABEL}={kind}"}):
        if old.id != keep:
            try:
                client.images.remove(old.id)
                _log(f"removed superseded {old.id[:19]}")
            except docker.errors.APIError:
                pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tag", default=DEFAULT_TAG)
    parser.add_argument("--force", action="store_true", help="rebuild even if an image with this recipe exists")
    args = parser.parse_args()
    t0 = time.monotonic()
    image_id = build(args.tag, args.force)
    _log(f"done in {time.monotonic() - t0:.1f}s")
    print(f"IMAGE_ID={image_id}", flush=True)
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main())
