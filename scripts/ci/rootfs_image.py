"""Shared by the local image builders (``build_fake_image.py``, ``build_sglang_image.py``): a Debian rootfs
from ``apt-get download`` + ``dpkg-deb -x``, and its tar.

Imported as a sibling module (the builders run as scripts, so ``scripts/ci`` is on ``sys.path``).

The tar is as reproducible as its inputs: entries in sorted order, owned by root, and every mtime this
build itself produced (directories it made, files it wrote) clamped to ``SOURCE_DATE_EPOCH``; mtimes that
came with the inputs (a .deb's, an installed venv's) are kept — a ``.pyc`` is valid only while its
source keeps the mtime it was compiled against.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

# python3's dependency closure on bookworm minus what only dpkg/perl/tar need; libstdc++6 for native wheels.
PYTHON_PACKAGES = (
    "python3",
    "python3.11",
    "python3-minimal",
    "python3.11-minimal",
    "libpython3-stdlib",
    "libpython3.11-minimal",
    "libpython3.11-stdlib",
    "libc6",
    "libgcc-s1",
    "gcc-12-base",
    "libstdc++6",
    "libssl3",
    "zlib1g",
    "libexpat1",
    "libffi8",
    "libbz2-1.0",
    "liblzma5",
    "libsqlite3-0",
    "libncursesw6",
    "libtinfo6",
    "libreadline8",
    "readline-common",
    "libdb5.3",
    "libgdbm6",
    "libuuid1",
    "libnsl2",
    "libtirpc3",
    "libtirpc-common",
    "libcrypt1",
    "libgssapi-krb5-2",
    "libkrb5-3",
    "libk5crypto3",
    "libkrb5support0",
    "libkeyutils1",
    "libcom-err2",
    "media-types",
    "busybox-static",
)

# 2020-01-01T00:00:00Z unless the caller's environment fixes another (reproducible-builds.org convention)
SOURCE_DATE_EPOCH = int(os.environ.get("SOURCE_DATE_EPOCH", "1577836800"))


def tag_existing(client: Any, recipe_label: str, recipe: str, tag: str, log: Callable[[str], None]) -> str | None:
    """The ID of an image already built from ``recipe`` (by its label), tagged ``tag``; None when there is none."""
    existing = client.images.list(filters={"label": f"{recipe_label}={recipe}"})
    if not existing:
        return None
    repo_name, _, tag_name = tag.rpartition(":")
    existing[0].tag(repo_name, tag_name)
    log(f"image with recipe {recipe[:12]} already present; tagged {tag}")
    return str(existing[0].id)


def run(argv: list[str], cwd: Path | None = None) -> None:
    """Run quietly; on failure show what the tool said."""
    proc = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout)
        raise subprocess.CalledProcessError(proc.returncode, argv)


def download_debs(packages: Iterable[str], dest: Path, log: Callable[[str], None] = print) -> list[Path]:
    names = list(packages)
    try:
        run(["apt-get", "download", "-q", *names], cwd=dest)
    except subprocess.CalledProcessError:
        log("apt-get download failed; running apt-get update once and retrying")
        run(["apt-get", "update", "-qq"])
        run(["apt-get", "download", "-q", *names], cwd=dest)
    return sorted(dest.glob("*.deb"))


def populate_base(root: Path, debs: list[Path]) -> None:
    """Unpack ``debs`` into ``root`` and add the few files a container needs (users, hosts, mount points)."""
    for deb in debs:
        run(["dpkg-deb", "-x", str(deb), str(root)])
    etc = root / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n")
    (etc / "group").write_text("root:x:0:\nnogroup:x:65534:\n")
    (etc / "hosts").write_text("127.0.0.1 localhost\n")
    for d in ("tmp", "root", "proc", "sys", "dev", "run"):
        (root / d).mkdir(exist_ok=True)
    (root / "tmp").chmod(0o1777)
    busybox = root / "bin" / "busybox"
    if busybox.exists() and not (root / "bin" / "sh").exists():
        (root / "bin" / "sh").symlink_to("busybox")


def normalize(info: tarfile.TarInfo, built_after: float) -> tarfile.TarInfo:
    """Root-owned; an mtime made by this build (at or after ``built_after``) clamped to SOURCE_DATE_EPOCH."""
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = SOURCE_DATE_EPOCH if info.mtime >= built_after else int(info.mtime)
    return info


def clamp_tree(root: Path, built_after: float) -> None:
    """Clamp, on disk, the mtimes this build made under ``root`` — before compiling bytecode, whose header
    records its source's mtime (clamping only in the tar would leave every .pyc stale)."""
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if st.st_mtime >= built_after and not os.path.islink(path):
                os.utime(path, (SOURCE_DATE_EPOCH, SOURCE_DATE_EPOCH))


def root_tar(root: Path, tar: tarfile.TarFile, built_after: float) -> None:
    """Add ``root``'s entries (tarfile recurses in sorted order) to ``tar``."""
    for entry in sorted(root.iterdir()):
        tar.add(entry, arcname=entry.name, filter=lambda info: normalize(info, built_after))
