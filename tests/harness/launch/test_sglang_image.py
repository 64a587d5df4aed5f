"""``scripts/ci/build_sglang_image.py``: the venv checks that stop a build, a byte-identical layer from the same
inputs, a fixed image config, and (only where the image was built and pinned) the image itself.

The builder is heavy (~7 GB), so it never runs here: its parts run on small inputs. The image test needs
``make sglang-image`` (or the script) to have pinned ``sglang-0.5.23-cpu-generic-oci`` in HITCH_ROOT's
operator overlay; otherwise it skips (fails under ``HITCH_REQUIRE_SGLANG_IMAGE=1``).
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import io
import os
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.components import missing

REPO = Path(__file__).resolve().parents[3]
OCI_RUNTIME = "sglang-0.5.23-cpu-generic-oci"


@pytest.fixture(scope="module")
def builder() -> Iterator[ModuleType]:
    sys.path.insert(0, str(REPO / "scripts" / "ci"))
    try:
        yield importlib.import_module("build_sglang_image")
    finally:
        sys.path.remove(str(REPO / "scripts" / "ci"))


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _site(tmp: Path) -> Path:
    """A tiny installed venv: one wheel (``demo-pkg 1.0``) with its RECORD, a compiled .pyc, and pip."""
    site = tmp / "site-packages"
    files = {"demo_pkg/__init__.py": b"VALUE = 1\n", "demo_pkg/data.bin": bytes(range(256))}
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
    (site / "demo_pkg/__pycache__").mkdir()
    (site / "demo_pkg/__pycache__/__init__.cpython-311.pyc").write_bytes(b"pyc")
    for name, version, rows in (("demo-pkg", "1.0", files), ("pip", "24.0", {})):
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\nbody: text\n")
        lines = [f"{rel},{_record_hash(data)},{len(data)}" for rel, data in rows.items()]
        if rows:
            lines.append("demo_pkg/__pycache__/__init__.cpython-311.pyc,,")
        lines += [f"{info.name}/METADATA,{_record_hash((info / 'METADATA').read_bytes())},", f"{info.name}/RECORD,,"]
        lines.append("../../../bin/demo,sha256=x,1")  # a console script: outside site-packages, never shipped
        (info / "RECORD").write_text("\n".join(lines) + "\n")
    return site


REQUIREMENTS = "# requirements\ndemo_pkg==1.0 \\\n    --hash=sha256:" + "a" * 64 + "\n"


def test_the_venv_must_hold_exactly_the_required_distributions(builder: ModuleType, tmp_path: Path) -> None:
    site = _site(tmp_path)
    assert builder.check_dists_match_requirements(site, REQUIREMENTS) == 1  # pip, the venv's own installer, aside
    with pytest.raises(SystemExit, match=r"differ=.*demo-pkg"):
        builder.check_dists_match_requirements(site, REQUIREMENTS.replace("==1.0", "==1.1"))
    with pytest.raises(SystemExit, match=r"missing=.*other"):
        builder.check_dists_match_requirements(site, REQUIREMENTS + "other==2 \\\n    --hash=sha256:" + "b" * 64 + "\n")
    (site / "extra-3.0.dist-info").mkdir()
    (site / "extra-3.0.dist-info/METADATA").write_text("Name: extra\nVersion: 3.0\n")
    with pytest.raises(SystemExit, match=r"extra=.*'extra'"):
        builder.check_dists_match_requirements(site, REQUIREMENTS)


def _layer(builder: ModuleType, site: Path, base: Path, built_after: float) -> tuple[bytes, tuple[int, int]]:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        builder.root_tar(base, tar, built_after=built_after)
        counts = builder.add_verified_site(tar, site, builder.SITE_DIR, built_after)
    return out.getvalue(), counts


def _base(tmp: Path) -> Path:
    base = tmp / "base"
    (base / "etc").mkdir(parents=True)
    (base / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (base / "usr/local/lib/python3.11/dist-packages").mkdir(parents=True)
    return base


def test_every_venv_file_is_checked_against_its_wheels_record(builder: ModuleType, tmp_path: Path) -> None:
    site = _site(tmp_path)
    data, (files, checked) = _layer(builder, site, _base(tmp_path), time.time() - 1)
    assert (files, checked) == (7, 4)  # 2 package files + 2 METADATA hashed; the pyc and RECORDs: pip writes them
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = tar.getnames()
        assert f"{builder.SITE_DIR}/demo_pkg/data.bin" in names and "etc/passwd" in names
        assert not any("bin/demo" in n for n in names)
        assert {m.uid for m in tar.getmembers()} == {0}
    (site / "demo_pkg/data.bin").write_bytes(b"tampered")
    with pytest.raises(SystemExit, match=r"demo_pkg/data\.bin: sha256 differs"):
        _layer(builder, site, _base(tmp_path / "2"), time.time() - 1)


def test_a_file_in_no_record_stops_the_build(builder: ModuleType, tmp_path: Path) -> None:
    site = _site(tmp_path)
    (site / "demo_pkg/added.py").write_text("print('not from the wheel')\n")
    with pytest.raises(SystemExit, match=r"demo_pkg/added\.py: in no wheel.s RECORD"):
        _layer(builder, site, _base(tmp_path), time.time() - 1)


def test_two_builds_of_the_same_inputs_give_the_same_layer_bytes(builder: ModuleType, tmp_path: Path) -> None:
    site = _site(tmp_path)
    old = 1_700_000_000  # an installed venv's mtimes: kept, so its .pyc files stay valid
    for path in site.rglob("*"):
        os.utime(path, (old, old))
    first, _ = _layer(builder, site, _base(tmp_path / "a"), time.time() - 1)
    second, _ = _layer(builder, site, _base(tmp_path / "b"), time.time() - 1)  # fresh dirs: new mtimes, clamped
    assert hashlib.sha256(first).hexdigest() == hashlib.sha256(second).hexdigest()
    with tarfile.open(fileobj=io.BytesIO(first)) as tar:
        mtimes = {m.name: m.mtime for m in tar.getmembers()}
    assert mtimes["etc/passwd"] == builder.SOURCE_DATE_EPOCH
    assert mtimes[f"{builder.SITE_DIR}/demo_pkg/__init__.py"] == old


def test_the_image_config_is_fixed_by_its_inputs(builder: ModuleType) -> None:
    labels = {builder.KIND_LABEL: OCI_RUNTIME}
    one = builder.image_config("sha256:" + "1" * 64, labels)
    assert one == builder.image_config("sha256:" + "1" * 64, labels)
    assert one != builder.image_config("sha256:" + "2" * 64, labels)
    assert b'"created":"2020-01-01T00:00:00Z"' in one


def _pinned_image() -> str:
    from harness.runtimes import get_runtime

    package = get_runtime(OCI_RUNTIME).package
    if package.kind != "oci" or package.digest is None:
        missing("sglang_image", f"{OCI_RUNTIME} is not pinned in this HITCH_ROOT (make sglang-image)")
    return package.reference()


@pytest.mark.integration
@pytest.mark.needs_docker
@pytest.mark.needs_sglang
def test_the_pinned_image_imports_real_sglang_and_the_shim_hardened() -> None:
    """The pinned image, run the way the OCI launcher runs engines (read-only rootfs, no capabilities, no
    network, the caller's uid): Debian's python3 imports the locked SGLang, torch and the shim, and the
    venv's bytecode is valid (nothing is recompiled: the sources kept their mtimes)."""
    from tests.harness.docker_support import docker_client_or_skip

    image = _pinned_image()
    client = docker_client_or_skip()
    probe = (
        "import os, sys, importlib.util, sglang, torch, sgl_kernel\n"
        "from sglang.srt.entrypoints import http_server\n"
        "src = importlib.util.find_spec('sglang.srt.server_args').origin\n"
        "head = open(importlib.util.cache_from_source(src), 'rb').read(16)\n"
        "fresh = int.from_bytes(head[8:12], 'little') == int(os.stat(src).st_mtime) & 0xFFFFFFFF\n"
        "print(sys.executable, sglang.__version__, torch.__version__, sgl_kernel.SHIM, fresh, src)"
    )
    try:
        out = client.containers.run(
            image,
            ["python3", "-c", probe],
            remove=True,
            read_only=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            network_mode="none",
            user=f"{os.getuid()}:{os.getgid()}",
            tmpfs={"/tmp": "rw,size=64m"},
            environment={"PATH": "/usr/local/bin:/usr/bin:/bin"},
        )
    finally:
        client.close()
    exe, sglang_version, torch_version, shim, pyc, origin = out.decode().split()
    assert (exe, sglang_version, shim, pyc) == ("/usr/bin/python3", "0.5.23", "True", "True")
    assert torch_version.startswith("2.14.1")
    assert origin == "/usr/local/lib/python3.11/dist-packages/sglang/srt/server_args.py"


@pytest.mark.integration
@pytest.mark.needs_docker
@pytest.mark.needs_sglang
@pytest.mark.slow
@pytest.mark.xdist_group("sglang")
def test_real_sglang_in_the_pinned_image_becomes_ready_through_the_oci_launcher(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The whole readiness sequence against real SGLang in its container (bridge network, Docker's proxy):
    the cache flush waits for the engine to finish the probes' requests, so the start becomes ready (it used
    to fail every time with ``flush_cache: HTTP 400``, the probe's request still pending in the engine), and
    the stop leaves no container."""
    import asyncio

    from harness.launch.oci import OciLauncher, list_owned_containers
    from harness.service import ServiceSupervisor
    from harness.service.starter_supervisor import EngineChoice, engine_program
    from tests.harness.docker_support import docker_client_or_skip
    from tests.harness.engine.inputs import checkpoint_cache, service_inputs

    image = _pinned_image()
    docker_client_or_skip().close()
    inputs = service_inputs(tmp_path / "root", checkpoint_cache(tmp_path_factory.getbasetemp()))
    program = engine_program(inputs.root, inputs.lock, EngineChoice(engine="sglang", launcher="oci", image=image))
    sup = ServiceSupervisor(
        inputs.root,
        "svc-oci-real",
        inputs.lock,
        inputs.model_dir,
        program,
        OciLauncher(inputs.root.path),
        owner="test-owner",
        startup_timeout_s=600.0,
        image=image,
        host="0.0.0.0",
    )

    async def run() -> None:
        endpoint = await sup.start()
        try:
            report = endpoint.readiness
            assert report.steps[-1] == "flush_cache" and report.flush_attempts >= 1
            ready = [e for e in sup.store.events() if e.event == "inference.ready"]
            assert ready[-1].details["engine_idle_wait_s"] == report.idle_wait_s
        finally:
            await sup.stop()

    asyncio.run(run())
    assert sup.state == "stopped"
    assert list_owned_containers(inputs.root.path) == []
