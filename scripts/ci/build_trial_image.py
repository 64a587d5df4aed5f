"""Build the eval "trial" image: the fake engine image plus ``fixtures/eval_trial`` (a Python client).

Usage: ``.venv/bin/python scripts/ci/build_trial_image.py [--tag hitch/eval-trial:dev]``.
Prints ``IMAGE_ID=sha256:...``.

No registry: the base is the fake engine image (``build_fake_image.py``, itself idempotent), and the client
is added by a two-line Dockerfile built from an in-memory context. Idempotent the same way: the image
carries ``dev.hitch.fixture-image.recipe`` = a hash of the base image id, this script and the client
sources; an image with that label is only re-tagged.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import docker
import docker.errors

REPO = Path(__file__).resolve().parents[2]
DEFAULT_TAG = "hitch/eval-trial:dev"
RECIPE_LABEL = "dev.hitch.fixture-image.recipe"
KIND_LABEL = "dev.hitch.fixture-image"
KIND = "eval-trial"
APP_DIR = "/opt/hitch/app"  # the fake image's WORKDIR and first PYTHONPATH entry
SOURCES = REPO / "fixtures" / "eval_trial"


def _log(msg: str) -> None:
    print(f"build_trial_image: {msg}", flush=True)


def _sources() -> list[Path]:
    return sorted(f for f in SOURCES.rglob("*.py") if "__pycache__" not in f.parts)


def _base_image() -> str:
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts/ci/build_fake_image.py")], capture_output=True, text=True, check=False
    )
    image = next((ln.split("=", 1)[1] for ln in out.stdout.splitlines() if ln.startswith("IMAGE_ID=")), None)
    if out.returncode != 0 or image is None:
        raise SystemExit(f"build_trial_image: the fake engine image could not be built:\n{out.stdout}\n{out.stderr}")
    return image


def recipe_hash(base: str) -> str:
    h = hashlib.sha256(base.encode() + b"\0" + Path(__file__).read_bytes())
    for f in _sources():
        h.update(str(f.relative_to(REPO)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _context(base: str, recipe: str) -> io.BytesIO:
    dockerfile = (
        f"FROM {base}\n"
        f"COPY eval_trial {APP_DIR}/fixtures/eval_trial\n"
        f"LABEL {KIND_LABEL}={KIND} {RECIPE_LABEL}={recipe}\n"
        'CMD ["python3", "-m", "fixtures.eval_trial"]\n'
    ).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        entries = [("Dockerfile", dockerfile)] + [(f"eval_trial/{f.relative_to(SOURCES)}", f.read_bytes()) for f in _sources()]
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def build(tag: str) -> str:
    client = docker.from_env()
    base = _base_image()
    recipe = recipe_hash(base)
    repo_name, _, tag_name = tag.rpartition(":")
    existing = client.images.list(filters={"label": f"{RECIPE_LABEL}={recipe}"})
    if existing:
        existing[0].tag(repo_name, tag_name)
        _log(f"image with recipe {recipe[:12]} already present; tagged {tag}")
        return str(existing[0].id)
    t = time.monotonic()
    image, _ = client.images.build(fileobj=_context(base, recipe), custom_context=True, tag=tag, rm=True, pull=False)
    _log(f"built {tag} in {time.monotonic() - t:.1f}s")
    for old in client.images.list(filters={"label": f"{KIND_LABEL}={KIND}"}):
        if old.id != image.id:
            with contextlib.suppress(docker.errors.APIError):  # still used by a container: left alone
                client.images.remove(old.id)
    return str(image.id)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tag", default=DEFAULT_TAG)
    args = parser.parse_args()
    print(f"IMAGE_ID={build(args.tag)}", flush=True)
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main())
