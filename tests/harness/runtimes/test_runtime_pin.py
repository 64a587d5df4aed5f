"""``hitch runtime pin NAME``: an image already in the local Docker engine pins an OCI runtime, for one root only.

The image is a real one, built here (``FROM scratch``, a label) and removed afterwards. Built locally, it has
no RepoDigests, so the pin records its image ID; the RepoDigest choice is checked on the inspect shape of a
pulled image, which cannot exist on this machine without a registry.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.errors import HitchError
from harness.lock import build_lock
from harness.paths import HitchRoot
from harness.runtimes import get_runtime, load_catalog, require_certifiable_pin
from harness.runtimes.catalog import default_catalog_path
from harness.runtimes.pins import choose_digest
from harness.store import read_manifest
from tests.harness.docker_support import docker_client_or_skip
from tests.harness.engine.inputs import ServiceInputs, checkpoint_cache, service_inputs

HITCH = [sys.executable, "-c", "from harness.cli.app import main; main()"]
CUDA_OCI = "sglang-0.5.16-cuda"
REPO = "lmsysorg/sglang"


@pytest.fixture
def inputs(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> ServiceInputs:
    return service_inputs(tmp_path / "root", checkpoint_cache(tmp_path_factory.getbasetemp()))


@pytest.fixture
def local_image(tmp_path: Path) -> Iterator[tuple[str, str]]:
    client = docker_client_or_skip()
    tag = f"hitch-test/pin-probe:{secrets.token_hex(4)}"
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text("FROM scratch\nLABEL org.hitch.test=runtime-pin\n")
    image, _ = client.images.build(path=str(tmp_path / "ctx"), tag=tag, rm=True)
    try:
        yield tag, str(image.id)
    finally:
        client.images.remove(tag, force=True)
        client.close()


def _hitch(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HITCH_ROOT": str(root)}
    return subprocess.run([*HITCH, *args], capture_output=True, text=True, timeout=120, env=env, check=False)


def test_pin_records_the_local_image_id_in_the_roots_overlay(
    tmp_path: Path, local_image: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tag, image_id = local_image
    catalog_before = hashlib.sha256(default_catalog_path().read_bytes()).hexdigest()
    root = tmp_path / "root"
    unpinned = get_runtime(CUDA_OCI)
    assert not unpinned.pinned and unpinned.pinned_by is None

    proc = _hitch(root, "runtime", "pin", CUDA_OCI, "--image", tag, "--json")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    out = json.loads(proc.stdout)
    assert out["pin"]["digest"] == image_id and out["pin"]["source"] == "image_id"
    assert out["overlay"] == str(HitchRoot(root).runtime_pins) and HitchRoot(root).runtime_pins.is_file()
    assert hashlib.sha256(default_catalog_path().read_bytes()).hexdigest() == catalog_before  # never the repo
    human = _hitch(root, "runtime", "pin", CUDA_OCI, "--image", tag)
    assert "image ID (no RepoDigest: a local image)" in human.stdout

    monkeypatch.setenv("HITCH_ROOT", str(root))
    pinned = require_certifiable_pin(get_runtime(CUDA_OCI))
    assert pinned.pinned and pinned.certifiable and pinned.pinned_by == "operator"
    assert pinned.package.kind == "oci" and pinned.package.digest == image_id
    assert pinned.package.reference() == image_id  # launched by its ID: no registry manifest exists for it
    assert pinned.runtime_id != unpinned.runtime_id
    assert pinned.to_json_dict()["pinned_by"] == "operator"
    assert get_runtime(pinned.runtime_id) == pinned
    # other roots, and the repository's catalog alone, are untouched
    assert not load_catalog(operator_pins=False)[1].pinned
    monkeypatch.setenv("HITCH_ROOT", str(tmp_path / "other-root"))
    assert get_runtime(CUDA_OCI) == unpinned
    # --root wins over HITCH_ROOT, for the overlay too
    shown = _hitch(tmp_path / "other-root", "runtime", "show", CUDA_OCI, "--root", str(root), "--json")
    assert json.loads(shown.stdout)["runtime"]["pinned_by"] == "operator", shown.stderr
    assert "pinned_by" not in json.loads(_hitch(tmp_path / "other-root", "runtime", "show", CUDA_OCI, "--json").stdout)["runtime"]


def test_a_lock_and_a_signed_entry_made_with_an_operator_pin_say_so(
    tmp_path: Path, local_image: tuple[str, str], monkeypatch: pytest.MonkeyPatch, inputs: ServiceInputs
) -> None:
    from certify.outputs import build_predicate

    tag, _ = local_image
    monkeypatch.setenv("HITCH_ROOT", str(inputs.root.path))
    assert _hitch(inputs.root.path, "runtime", "pin", CUDA_OCI, "--image", tag).returncode == 0
    runtime = get_runtime(CUDA_OCI)
    lock = build_lock(
        read_manifest(inputs.root, inputs.lock.model_id), runtime, device="cuda", profile="baseline", cpu_cores_per_node=2
    )
    assert lock.runtime_id == runtime.runtime_id
    predicate = build_predicate(_opts(inputs, runtime.runtime_id), {"runtime_id": lock.runtime_id}, _evaluation(), {}, {}, {})
    assert (predicate.runtime_name, predicate.runtime_pinned_by) == (CUDA_OCI, "operator")
    catalog_runtime = get_runtime("sglang-0.5.23-cuda").runtime_id
    plain = build_predicate(_opts(inputs, catalog_runtime), {"runtime_id": catalog_runtime}, _evaluation(), {}, {}, {})
    assert plain.runtime_pinned_by == "catalog"


def test_pin_refusals(tmp_path: Path, local_image: tuple[str, str]) -> None:
    root = tmp_path / "root"
    cases = [
        (("sglang-0.5.23-cuda",), "usage_error"),  # python-env: the lock pins it
        (("sglang-0.5.16-cuda", "--image", "hitch-test/absent:nope"), "inference_runtime_unavailable"),
        (("no-such-runtime",), "inference_runtime_not_found"),
    ]
    for args, code in cases:
        proc = _hitch(root, "runtime", "pin", *args, "--json")
        assert proc.returncode != 0
        assert json.loads(proc.stdout)["error"]["code"] == code, args
    assert not HitchRoot(root).runtime_pins.exists()  # a refused pin writes nothing


def test_the_catalog_repositorys_repo_digest_wins_over_the_image_id_with_recorded_inspect_output() -> None:
    """A pulled image's RepoDigests (inspect output as Docker returns it): no registry is reachable here."""
    digest = "sha256:" + "ab" * 32
    attrs: dict[str, Any] = {
        "Id": "sha256:" + "cd" * 32,
        "RepoDigests": [f"someone/else@sha256:{'ef' * 32}", f"docker.io/{REPO}@{digest}"],
    }
    assert choose_digest(attrs, REPO) == (digest, "repo_digest")
    assert choose_digest({**attrs, "RepoDigests": []}, REPO) == ("sha256:" + "cd" * 32, "image_id")
    with pytest.raises(HitchError):
        choose_digest({"RepoDigests": []}, REPO)


def _opts(inputs: ServiceInputs, runtime_id: str) -> Any:
    from certify.options import CertifyOptions

    return CertifyOptions(
        device="cuda",
        engine="sglang",
        runtime=runtime_id,
        launcher="oci",
        model="local/tiny",
        profile="baseline",
        sign_key=None,
        report_dir=inputs.root.path / "report",
        canary=False,
        root=inputs.root,
    )


def _evaluation() -> Any:
    from certify.evaluate import Evaluation

    return Evaluation(level="failed", reasons=[], checks=[])
