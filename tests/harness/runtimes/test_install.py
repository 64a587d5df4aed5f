"""Installing a python-env runtime: staged + atomic, idempotent, verified, recorded; failures
leave nothing behind. Uses an offline fake runtime (see fake_runtime.py), not SGLang itself."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest

from harness.errors import HitchError
from harness.paths import HitchRoot
from harness.runtimes import get_runtime, install_runtime, installed_runtime, require_installed, runtime_dir
from tests.harness.runtimes.fake_runtime import NAME, SERVER_BROKEN, make_catalog


@pytest.fixture
def offline_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "wheels"))
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    return tmp_path


@pytest.mark.slow
def test_install_is_verified_recorded_and_idempotent(offline_pip: Path) -> None:
    catalog = make_catalog(offline_pip)
    root = HitchRoot(offline_pip / "root")
    manifest = get_runtime(NAME, catalog)
    assert installed_runtime(root, manifest) is None

    progress = io.StringIO()
    first = install_runtime(root, manifest, catalog_path=catalog, progress=progress)
    assert not first.already_installed
    assert "Successfully installed fakesgl-0.1" in progress.getvalue()
    assert first.versions["shim"] is True and first.versions["sglang"] == "0.0.fake"

    folder = runtime_dir(root, manifest)
    assert folder.name == manifest.runtime_id.split(":")[1]
    assert json.loads((folder / "installed.json").read_text())["runtime_id"] == manifest.runtime_id
    stored = root.runtimes / folder.name / "manifest.json"
    assert json.loads(stored.read_text()) == manifest.to_json_dict()
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # no staging left

    rt = require_installed(root, manifest)
    assert rt.python == folder / "venv" / "bin" / "python"
    assert rt.env["SGLANG_USE_CPU_ENGINE"] == "1"
    assert rt.env["PYTHONPATH"] == str(folder / "files" / "shim")
    # the launch environment really yields the shim and the server module from the installed copy
    probe = subprocess.run(
        [str(rt.python), "-c", "import sgl_kernel, sglang.srt.entrypoints.http_server as s; print(sgl_kernel.__file__, s.READY)"],
        capture_output=True,
        text=True,
        env=rt.launch_environ(),
        check=True,
    )
    assert probe.stdout.split() == [str(folder / "files" / "shim" / "sgl_kernel" / "__init__.py"), "True"]

    second = install_runtime(root, manifest, catalog_path=catalog, progress=io.StringIO())
    assert second.already_installed and second.runtime == first.runtime

    # an altered installed shim is refused, and a new install repairs it
    shim = folder / "files" / "shim" / "sgl_kernel" / "__init__.py"
    shim.write_text("# tampered\n")
    with pytest.raises(HitchError) as err:
        installed_runtime(root, manifest)
    assert err.value.code == "inference_runtime_integrity_failed"
    repaired = install_runtime(root, manifest, catalog_path=catalog, progress=io.StringIO())
    assert not repaired.already_installed
    assert installed_runtime(root, manifest) is not None


@pytest.mark.slow
def test_failed_verification_leaves_nothing(offline_pip: Path) -> None:
    catalog = make_catalog(offline_pip, SERVER_BROKEN)
    root = HitchRoot(offline_pip / "root")
    manifest = get_runtime(NAME, catalog)
    (root.runtime_envs / f".staging-{manifest.runtime_id.split(':')[1]}-deadbeef").mkdir(parents=True)  # an old crash
    with pytest.raises(HitchError) as err:
        install_runtime(root, manifest, catalog_path=catalog, progress=io.StringIO())
    assert err.value.code == "inference_runtime_unavailable"
    assert "no server here" in "\n".join(err.value.details["stderr_tail"])
    assert list(root.runtime_envs.iterdir()) == []
    assert not root.runtimes.exists()


def test_missing_install_is_unavailable(tmp_path: Path) -> None:
    catalog = make_catalog(tmp_path)
    with pytest.raises(HitchError) as err:
        require_installed(HitchRoot(tmp_path / "root"), get_runtime(NAME, catalog))
    assert err.value.code == "inference_runtime_unavailable"


def test_changed_catalog_file_is_refused_before_installing(offline_pip: Path) -> None:
    catalog = make_catalog(offline_pip)
    manifest = get_runtime(NAME, catalog)
    (catalog.parent / "runtimes" / NAME / "shim" / "sgl_kernel" / "__init__.py").write_text("# changed after load\n")
    root = HitchRoot(offline_pip / "root")
    with pytest.raises(HitchError) as err:
        install_runtime(root, manifest, catalog_path=catalog, progress=io.StringIO())
    assert err.value.code == "inference_runtime_integrity_failed"
    assert not runtime_dir(root, manifest).exists()


def test_pinned_oci_without_docker_is_unavailable(offline_pip: Path) -> None:
    catalog = make_catalog(offline_pip)
    root = HitchRoot(offline_pip / "root")
    with pytest.raises(HitchError) as err:
        install_runtime(root, get_runtime("fake-oci-pinned", catalog), catalog_path=catalog, progress=io.StringIO())
    assert err.value.code == "inference_runtime_unavailable"
    assert not root.runtimes.exists()
