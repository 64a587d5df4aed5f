"""Build the local base image of the Harbor task set (``fixtures/harbor_tasks/``), without a registry.

Usage: ``.venv/bin/python scripts/ci/build_harbor_base_image.py [--tag hitch/harbor-base:dev] [--force]``
(root; needs ``debootstrap``, installed from Debian's packages when missing). Prints ``IMAGE_ID=sha256:...``.

Harbor's task templates start ``FROM ubuntu:24.04`` / ``python:3.12-slim`` and their verifiers download
``uv``; none of that exists without a registry or the internet. This image is Debian bookworm
``debootstrap --variant=minbase`` with ``python3`` (the task verifiers), ``tmux`` and ``asciinema``
(``terminus-2`` drives a tmux session in the container and records it; without them it tries to install them
at every trial's setup and, with no network, loses ~20 s) baked in, tarred with every file owned by root and
``docker import``-ed.
The task Dockerfiles start ``FROM`` this tag, so compose builds them without pulling anything.

Idempotent: the image carries ``dev.hitch.fixture-image.recipe`` = a hash of the recipe (its version, the
suite, the mirror, the packages); an image with that label is only re-tagged. The tar/import/superseded-image steps are
the fake engine image's (:mod:`fixtures.images.fake_engine`).
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
from pathlib import Path

import docker

from fixtures.images.fake_engine import KIND_LABEL, RECIPE_LABEL, remove_superseded
from fixtures.images.rootfs import root_tar, run, tag_existing

DEFAULT_TAG = "hitch/harbor-base:dev"
KIND = "harbor-base"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
PACKAGES = ("python3", "tmux", "asciinema", "procps")


def _log(msg: str) -> None:
    print(f"build_harbor_base_image: {msg}", flush=True)


RECIPE_VERSION = "1"  # bump when build() changes what goes into the image


def recipe_hash() -> str:
    return hashlib.sha256("\n".join((RECIPE_VERSION, SUITE, MIRROR, *PACKAGES)).encode()).hexdigest()


def _debootstrap() -> str:
    found = shutil.which("debootstrap") or (os.path.exists("/usr/sbin/debootstrap") and "/usr/sbin/debootstrap")
    if found:
        return str(found)
    _log("installing debootstrap from Debian's packages")
    run(["apt-get", "install", "-y", "-q", "debootstrap"])
    return "/usr/sbin/debootstrap"


def build(tag: str, force: bool) -> str:
    client = docker.from_env()
    recipe = recipe_hash()
    found = None if force else tag_existing(client, RECIPE_LABEL, recipe, tag, _log)
    if found is not None:
        return found
    with tempfile.TemporaryDirectory(prefix="hitch-harbor-base-") as tmp:
        work = Path(tmp)
        root = work / "root"
        t = time.monotonic()
        built_after = time.time()
        argv = [_debootstrap(), "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(root), MIRROR]
        run(argv)
        shutil.rmtree(root / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        shutil.rmtree(root / "var" / "lib" / "apt" / "lists", ignore_errors=True)
        _log(f"debootstrap in {time.monotonic() - t:.1f}s")
        t = time.monotonic()
        tar_path = work / "rootfs.tar"
        with tarfile.open(tar_path, "w") as tar:
            root_tar(root, tar, built_after)
        changes = ['CMD ["bash"]', "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                   f"LABEL {KIND_LABEL}={KIND} {RECIPE_LABEL}={recipe}"]  # fmt: skip
        repo_name, _, tag_name = tag.rpartition(":")
        with tar_path.open("rb") as fh:
            client.api.import_image(src=fh, repository=repo_name, tag=tag_name, changes=changes)
        _log(f"rootfs {tar_path.stat().st_size / 1e6:.1f} MB imported in {time.monotonic() - t:.1f}s")
    image = client.images.get(tag)
    if image.labels.get(RECIPE_LABEL) != recipe:
        raise SystemExit("build_harbor_base_image: the import did not produce the expected image")
    remove_superseded(client, keep=str(image.id), kind=KIND)
    return str(image.id)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tag", default=DEFAULT_TAG)
    parser.add_argument("--force", action="store_true", help="rebuild even if an image with this recipe exists")
    args = parser.parse_args()
    started = time.monotonic()
    print(f"IMAGE_ID={build(args.tag, args.force)}", flush=True)
    _log(f"done in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main())
