"""Build a local OCI image that runs real SGLang (the generic-CPU runtime), without a registry, and pin it.

Usage (heavy: ~7 GB read and written twice; wrap it in ``flock /work/heavy.lock`` on a shared machine)::

    HITCH_ROOT=... .venv/bin/python scripts/ci/build_sglang_image.py [--force] [--no-pin]

Prints ``IMAGE_ID=sha256:...``; unless ``--no-pin``, then runs ``hitch runtime pin`` so the catalog's
OCI runtime ``sglang-0.5.23-cpu-generic-oci`` (no digest in the catalog: Debian's packages move, so the id
cannot be committed) is pinned in this HITCH_ROOT's operator overlay (``pinned_by: operator``).

What goes in:

1. Debian bookworm's python3.11 and the libraries it links (``apt-get download`` + ``dpkg-deb -x``, shared
   with the fake-engine image: :mod:`fixtures.images.rootfs`), plus ``python3-distutils``/``python3-lib2to3``.
2. The *installed* ``sglang-0.5.23-cpu-generic`` runtime of this HITCH_ROOT (``hitch runtime install``: a
   venv made from the hash-pinned lock). It is not re-resolved: its ``site-packages`` go to Debian's
   site directory ``/usr/local/lib/python3.11/dist-packages`` as they are, and every file is checked on the
   way into the tar against the sha256 its wheel's ``RECORD`` lists; the set of installed distributions must
   equal the lock's ``name==version`` lines (pip, which the venv brings itself, aside). A file that differs,
   is not in any RECORD, or a distribution the lock does not name stops the build. The venv's ``bin``
   (console scripts with host shebangs) stays out: the engine starts as ``python3 -m sglang.launch_server``.
3. The runtime's ``sgl_kernel`` shim at ``/opt/hitch/shim`` (``PYTHONPATH``), checked against the catalog's
   sha256 by the runtime's own integrity check.

Reproducible by construction, not by the registry: the image is written as a ``docker save`` archive and
``docker load``-ed, so its ID is the sha256 of a config this script writes (fixed ``created`` time, no
host-specific field) over one layer whose tar has sorted entries, root ownership and clamped build mtimes
(:mod:`fixtures.images.rootfs`); the venv's own mtimes are kept so its ``.pyc`` files stay valid on the read-only
rootfs. Two builds from the same .debs and the same installed runtime give the same ID.

Idempotent: the image carries ``dev.hitch.runtime-image.recipe`` (this script, the shared module, the
package list, the runtime's id and install marker); an image with that label is reused.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import docker

from fixtures.images import rootfs
from fixtures.images.rootfs import (
    PYTHON_PACKAGES,
    SOURCE_DATE_EPOCH,
    download_debs,
    normalize,
    populate_base,
    root_tar,
    tag_existing,
)
from harness.paths import HitchRoot
from harness.runtimes import get_runtime, require_installed
from harness.runtimes.catalog import requirement_pins
from harness.settings import settings

REPO = Path(__file__).resolve().parents[2]
SOURCE_RUNTIME = "sglang-0.5.23-cpu-generic"
OCI_RUNTIME = "sglang-0.5.23-cpu-generic-oci"
DEFAULT_TAG = "hitch/sglang-cpu-generic:0.5.23"  # the catalog entry's image:tag_hint (hitch runtime pin's default)
KIND_LABEL = "dev.hitch.runtime-image"
RECIPE_LABEL = "dev.hitch.runtime-image.recipe"
SITE_DIR = "usr/local/lib/python3.11/dist-packages"
SHIM_DIR = "opt/hitch/shim"
# lscpu (util-linux): SGLang reads the CPU/NUMA topology with it when it sizes a CPU engine
DEBIAN_PACKAGES = (*PYTHON_PACKAGES, "python3-distutils", "python3-lib2to3", "util-linux", "libsmartcols1")
UNLOCKED_DISTS = frozenset({"pip"})  # venv's own installer: not an engine dependency, not in the lock
CREATED = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(SOURCE_DATE_EPOCH))


def _log(msg: str) -> None:
    print(f"build_sglang_image: {msg}", flush=True)


class BuildRefused(SystemExit):
    def __init__(self, msg: str) -> None:
        super().__init__(f"build_sglang_image: {msg}")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_dists(site: Path) -> dict[str, str]:
    """``{normalized name: version}`` from the ``*.dist-info/METADATA`` files of ``site``."""
    found = {}
    for meta in sorted(site.glob("*.dist-info/METADATA")):
        head = meta.read_text(errors="replace").split("\n\n", 1)[0]
        fields = dict(ln.split(": ", 1) for ln in head.splitlines() if ": " in ln)
        found[_norm(fields["Name"])] = fields["Version"]
    return found


def check_dists_match_requirements(site: Path, requirements_text: str) -> int:
    want = {_norm(pin.name): pin.version for pin in requirement_pins(requirements_text)}
    have = installed_dists(site)
    extra = {n: v for n, v in have.items() if n not in want and n not in UNLOCKED_DISTS}
    missing = {n: v for n, v in want.items() if n not in have}
    differ = {n: (want[n], have[n]) for n in want.keys() & have.keys() if want[n] != have[n]}
    if extra or missing or differ:
        raise BuildRefused(f"the venv is not what its requirements pin: extra={extra} missing={missing} differ={differ}")
    return len(want)


def record_hashes(site: Path) -> dict[str, str | None]:
    """Every file the venv's wheels installed, relative to ``site``: its RECORD sha256 (urlsafe b64), or None
    for what pip writes itself (``.pyc``, ``RECORD``, ``INSTALLER``)."""
    hashes: dict[str, str | None] = {}
    for record in sorted(site.glob("*.dist-info/RECORD")):
        for row in csv.reader(record.read_text().splitlines()):
            if not row:
                continue
            rel = os.path.normpath(row[0])
            if rel.startswith(".."):  # console scripts in the venv's bin: not shipped
                continue
            digest = row[1] if len(row) > 1 else ""
            hashes[rel] = digest.removeprefix("sha256=") if digest.startswith("sha256=") else None
    return hashes


class _HashingReader:
    def __init__(self, fh: IO[bytes]) -> None:
        self._fh = fh
        self.sha = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self._fh.read(n)
        self.sha.update(data)
        return data


def _walk_sorted(top: Path) -> Iterator[Path]:
    """``top``'s entries, depth first, names sorted (a stable tar order)."""
    for entry in sorted(top.iterdir(), key=lambda p: p.name):
        yield entry
        if entry.is_dir() and not entry.is_symlink():
            yield from _walk_sorted(entry)


def add_verified_site(tar: tarfile.TarFile, site: Path, arcdir: str, built_after: float) -> tuple[int, int]:
    """Add ``site`` under ``arcdir``, each file checked against its RECORD hash while it is read once."""
    hashes = record_hashes(site)
    files = checked = 0
    for path in _walk_sorted(site):
        rel = path.relative_to(site).as_posix()
        info = normalize(tar.gettarinfo(str(path), f"{arcdir}/{rel}"), built_after)
        if not info.isfile():
            if not (info.isdir() or info.issym()):
                raise BuildRefused(f"{rel}: not a file, directory or symlink")
            tar.addfile(info)
            continue
        if rel not in hashes:
            raise BuildRefused(f"{rel}: in no wheel's RECORD (the venv was changed after install)")
        with path.open("rb") as fh:
            reader = _HashingReader(fh)
            tar.addfile(info, reader)
        files += 1
        want = hashes[rel]
        if want is not None:
            got = base64.urlsafe_b64encode(reader.sha.digest()).rstrip(b"=").decode()
            if got != want:
                raise BuildRefused(f"{rel}: sha256 differs from its wheel's RECORD")
            checked += 1
    return files, checked


class _Sha256Writer:
    """A file that hashes what is written to it (the layer's diff_id without a second read)."""

    def __init__(self, fh: IO[bytes]) -> None:
        self._fh = fh
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self._fh.write(data)

    def tell(self) -> int:
        return self.size


def image_config(diff_id: str, labels: dict[str, str]) -> bytes:
    config: dict[str, Any] = {
        "architecture": "amd64",
        "os": "linux",
        "created": CREATED,
        "config": {
            "Env": [
                "PATH=/usr/local/bin:/usr/bin:/bin",
                f"PYTHONPATH=/{SHIM_DIR}",
                "PYTHONDONTWRITEBYTECODE=1",
                "PYTHONNOUSERSITE=1",
                "SGLANG_USE_CPU_ENGINE=1",
                "HOME=/tmp",
            ],
            "Cmd": ["python3", "-m", "sglang.launch_server", "--help"],
            "WorkingDir": "/tmp",
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": CREATED, "created_by": "scripts/ci/build_sglang_image.py"}],
    }
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def docker_load(layer: Path, config: bytes, tag: str) -> str:
    """Stream a ``docker save`` archive (manifest, config, one layer) into ``docker load``; the image ID."""
    config_hex = hashlib.sha256(config).hexdigest()
    layer_name = f"{config_hex[:16]}/layer.tar"
    manifest = json.dumps([{"Config": f"{config_hex}.json", "RepoTags": [tag], "Layers": [layer_name]}]).encode()
    # docker load -q prints one line; its output goes to a file so a chatty failure cannot block the writer
    with tempfile.TemporaryFile() as said:
        proc = subprocess.Popen(["docker", "load", "-q"], stdin=subprocess.PIPE, stdout=said, stderr=subprocess.STDOUT)
        assert proc.stdin is not None
        try:
            with tarfile.open(fileobj=proc.stdin, mode="w|") as out:
                for name, data in ((f"{config_hex}.json", config), ("manifest.json", manifest)):
                    info = tarfile.TarInfo(name)
                    info.size, info.mtime = len(data), SOURCE_DATE_EPOCH
                    out.addfile(info, io.BytesIO(data))
                info = out.gettarinfo(str(layer), layer_name)
                info.mtime, info.uid, info.gid, info.uname, info.gname = SOURCE_DATE_EPOCH, 0, 0, "root", "root"
                with layer.open("rb") as fh:
                    out.addfile(info, fh)
        finally:
            proc.stdin.close()
            proc.wait()
        said.seek(0)
        text = said.read().decode(errors="replace").strip()
    if proc.returncode != 0:
        raise BuildRefused(f"docker load failed: {text[-500:]}")
    _log(text)
    return f"sha256:{config_hex}"


def recipe_hash(runtime_id: str, marker: bytes) -> str:
    h = hashlib.sha256()
    for part in (Path(__file__).read_bytes(), Path(rootfs.__file__).read_bytes()):
        h.update(part)
    h.update("\n".join(DEBIAN_PACKAGES).encode())
    h.update(runtime_id.encode() + b"\0" + marker)
    return h.hexdigest()


def build(root: HitchRoot, tag: str, force: bool, keep_layer: Path | None = None) -> str:
    client = docker.from_env()
    runtime = require_installed(root, get_runtime(SOURCE_RUNTIME))  # verifies the shim against the catalog
    site = runtime.path / "venv" / "lib" / "python3.11" / "site-packages"
    marker = (runtime.path / "installed.json").read_bytes()
    recipe = recipe_hash(runtime.manifest.runtime_id, marker)
    found = None if force else tag_existing(client, RECIPE_LABEL, recipe, tag, _log)
    if found is not None:
        return found
    pinned = check_dists_match_requirements(site, (runtime.path / "files" / "requirements.lock").read_text())
    _log(f"venv distributions = the requirements' {pinned} pins")
    labels = {
        KIND_LABEL: OCI_RUNTIME,
        RECIPE_LABEL: recipe,
        "dev.hitch.runtime-image.source_runtime_id": runtime.manifest.runtime_id,
    }
    with tempfile.TemporaryDirectory(prefix="hitch-sglang-image-", dir=settings().image_tmp) as tmp:
        work = Path(tmp)
        started = time.time() - 1
        debdir, base = work / "debs", work / "root"
        debdir.mkdir()
        base.mkdir()
        t = time.monotonic()
        debs = download_debs(DEBIAN_PACKAGES, debdir, _log)
        _log(f"downloaded {len(debs)} Debian packages in {time.monotonic() - t:.1f}s: {_deb_digest(debs)[:16]}")
        populate_base(base, debs)
        (base / SITE_DIR).mkdir(parents=True, exist_ok=True)
        for shipped in runtime.manifest.package.files if runtime.manifest.package.kind == "python-env" else []:
            dst = base / Path(SHIM_DIR).parent / shipped.path  # shim/sgl_kernel/... -> /opt/hitch/shim/sgl_kernel/...
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes((runtime.path / "files" / shipped.path).read_bytes())
        t = time.monotonic()
        layer = keep_layer or work / "layer.tar"
        with layer.open("wb") as raw:
            sink = _Sha256Writer(raw)
            with tarfile.open(fileobj=sink, mode="w", format=tarfile.PAX_FORMAT) as tar:
                root_tar(base, tar, built_after=started)
                files, checked = add_verified_site(tar, site, SITE_DIR, started)
        diff_id = f"sha256:{sink.sha.hexdigest()}"
        _log(
            f"layer {sink.size / 1e9:.2f} GB ({files} venv files, {checked} checked against RECORD) in "
            f"{time.monotonic() - t:.1f}s: {diff_id}"
        )
        t = time.monotonic()
        image_id = docker_load(layer, image_config(diff_id, labels), tag)
        _log(f"docker load in {time.monotonic() - t:.1f}s")
    image = client.images.get(tag)
    if image.id != image_id or image.labels.get(RECIPE_LABEL) != recipe:
        raise BuildRefused(f"docker load did not produce the expected image {image_id} (got {image.id})")
    return image_id


def _deb_digest(debs: list[Path]) -> str:
    """One digest of the downloaded packages (names + bytes): equal digests, equal Debian inputs."""
    h = hashlib.sha256()
    for deb in debs:
        h.update(deb.name.encode() + b"\0" + hashlib.sha256(deb.read_bytes()).digest())
    return h.hexdigest()


def pin(root: HitchRoot, image_id: str) -> None:
    """``hitch runtime pin`` (the operator overlay: the image ID, ``pinned_by: operator``)."""
    hitch = Path(sys.executable).with_name("hitch")
    out = subprocess.run(
        [str(hitch), "runtime", "pin", OCI_RUNTIME, "--image", image_id, "--json"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "HITCH_ROOT": str(root.path)},
    )
    if out.returncode != 0:
        raise BuildRefused(f"hitch runtime pin failed: {out.stdout[-300:]}{out.stderr[-300:]}")
    pinned = json.loads(out.stdout)["runtime"]
    _log(f"pinned {OCI_RUNTIME} -> {image_id} (runtime_id {pinned['runtime_id']}, pinned_by {pinned.get('pinned_by')})")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tag", default=DEFAULT_TAG)
    parser.add_argument("--force", action="store_true", help="rebuild even if an image with this recipe exists")
    parser.add_argument("--no-pin", action="store_true", help="build only; leave the operator overlay alone")
    parser.add_argument("--keep-layer", type=Path, default=None, help="write the layer tar here (kept; for comparing builds)")
    args = parser.parse_args()
    if sys.version_info[:2] != (3, 11):
        raise BuildRefused("run with Python 3.11 (the image's python3 is Debian bookworm's 3.11)")
    root = HitchRoot.at()
    t0 = time.monotonic()
    image_id = build(root, args.tag, args.force, args.keep_layer)
    size = docker.from_env().images.get(image_id).attrs.get("Size", 0)
    _log(f"done in {time.monotonic() - t0:.1f}s; image {size / 1e9:.2f} GB")
    if not args.no_pin:
        pin(root, image_id)
    print(f"IMAGE_ID={image_id}", flush=True)
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main())
