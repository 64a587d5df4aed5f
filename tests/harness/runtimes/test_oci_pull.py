"""An OCI pull says what arrived (spec §5 rule 6, §7.1): throttled progress from Docker's pull stream, the image
checked against the runtime's pinned digest, its size recorded.

No registry is reachable from this machine, so no test here pulls live: the pull stream is fed as recorded
lines in the format docker-py's ``APIClient.pull(stream=True, decode=True)`` yields (its documented example and
the Docker Engine API's ``POST /images/create`` progress messages), and the digest check runs against
``docker image inspect`` of a real image built here (``FROM scratch``, a label; no RepoDigests, being local).
"""

from __future__ import annotations

import io
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.contracts.runtime import InferenceRuntimeManifestV1, OciPackage
from harness.errors import HitchError
from harness.paths import HitchRoot
from harness.runtimes import get_runtime
from harness.runtimes.oci_pull import PullFollower, check_pulled_image, pull_image, record_pull
from harness.runtimes.pins import inspect_image
from tests.harness.docker_support import docker_client_or_skip

HITCH = [sys.executable, "-c", "from harness.cli.app import main; main()"]
CUDA_OCI = "sglang-0.5.16-cuda"  # shipped unpinned: a test pins it to its own local image
REPO = "hitch-test/pull-probe"
LAYER_A, LAYER_B = "a3ed95caeb02", "5f70bf18a086"
PINNED = "sha256:" + "ab" * 32


def _recorded_stream(digest: str = PINNED, chunks: int = 50) -> list[dict[str, Any]]:
    """Docker's pull stream of a two-layer image, ``chunks`` Downloading lines per layer."""
    lines: list[dict[str, Any]] = [{"status": f"Pulling from {REPO}", "id": digest}]
    for layer in (LAYER_A, LAYER_B):
        lines.append({"status": "Pulling fs layer", "progressDetail": {}, "id": layer})
    sizes = {LAYER_A: 2_000_000, LAYER_B: 3_000_000}
    for layer, total in sizes.items():
        for i in range(1, chunks + 1):
            current = total * i // chunks
            lines.append({"status": "Downloading", "progressDetail": {"current": current, "total": total},
                          "progress": f"[=>   ] {current}B/{total}B", "id": layer})  # fmt: skip
        lines += [
            {"status": "Verifying Checksum", "progressDetail": {}, "id": layer},
            {"status": "Download complete", "progressDetail": {}, "id": layer},
            {"status": "Extracting", "progressDetail": {"current": total, "total": total}, "id": layer},
            {"status": "Pull complete", "progressDetail": {}, "id": layer},
        ]
    return [*lines, {"status": f"Digest: {digest}"}, {"status": f"Status: Downloaded newer image for {REPO}@{digest}"}]


class _Clock:
    """One second per stream line: the throttle is tested without waiting on the wall clock."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_a_recorded_pull_stream_is_shown_as_throttled_layer_and_byte_progress() -> None:
    stream = _recorded_stream()
    out = io.StringIO()
    follower = PullFollower(out, every_s=20.0, clock=_Clock())
    follower.follow(stream)
    assert len(stream) > 100 and len(follower.lines) <= len(stream) // 20 + 2  # not a line per chunk
    assert out.getvalue().splitlines() == follower.lines
    assert follower.lines[-1] == "  layers 2/2 done, 5.0 MB of 5.0 MB downloaded"
    assert any(" 0/2 done" in line and "of 2.0 MB" in line for line in follower.lines[1:3])  # bytes as they came
    assert follower.digest == PINNED and follower.status is not None and "Downloaded newer image" in follower.status


def test_an_error_line_of_a_recorded_pull_stream_is_runtime_unavailable() -> None:
    stream = [
        {"status": f"Pulling from {REPO}", "id": PINNED},
        {"errorDetail": {"message": "manifest unknown"}, "error": "manifest unknown"},
    ]
    with pytest.raises(HitchError) as err:
        PullFollower(io.StringIO()).follow(stream)
    assert err.value.code == "inference_runtime_unavailable" and "manifest unknown" in err.value.message


def test_a_recorded_pull_whose_digest_line_is_not_the_pin_is_refused_before_the_image_is_used() -> None:
    manifest = _variant(OciPackage(image=REPO, digest=PINNED))
    with pytest.raises(HitchError) as err:
        pull_image(manifest, io.StringIO(), stream=_recorded_stream("sha256:" + "cd" * 32, chunks=2))
    assert err.value.code == "inference_runtime_integrity_failed"
    assert err.value.details["expected"] == PINNED and err.value.details["where"] == "the pull's Digest line"


@pytest.fixture(scope="module")
def local_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    client = docker_client_or_skip()
    tag = f"{REPO}:{secrets.token_hex(4)}"
    ctx = tmp_path_factory.mktemp("pull-probe")
    (ctx / "Dockerfile").write_text("FROM scratch\nLABEL org.hitch.test=oci-pull\n")
    image, _ = client.images.build(path=str(ctx), tag=tag, rm=True)
    try:
        yield tag, str(image.id)
    finally:
        client.images.remove(tag, force=True)
        client.close()


def _variant(package: OciPackage) -> InferenceRuntimeManifestV1:
    return get_runtime(CUDA_OCI).model_copy(update={"package": package})


def test_what_arrived_is_checked_against_the_pin_on_a_real_local_images_inspect(local_image: tuple[str, str]) -> None:
    tag, image_id = local_image
    attrs = inspect_image(tag)
    found = check_pulled_image(attrs, OciPackage(image=REPO, digest=image_id, digest_source="image_id"))
    assert (found.digest, found.image_id, found.size_bytes) == (image_id, image_id, attrs["Size"])
    other = "sha256:" + "00" * 32
    for package, where in (
        (OciPackage(image=REPO, digest=other, digest_source="image_id"), "image ID"),
        (OciPackage(image=REPO, digest=image_id), "RepoDigests"),  # a catalog pin: the registry's digest, absent here
    ):
        with pytest.raises(HitchError) as err:
            check_pulled_image(attrs, package)
        assert err.value.code == "inference_runtime_integrity_failed" and err.value.details["where"] == where


def test_a_recorded_pull_stream_then_the_real_image_is_checked_and_its_size_recorded(
    local_image: tuple[str, str], tmp_path: Path
) -> None:
    _, image_id = local_image
    manifest = _variant(OciPackage(image=REPO, digest=image_id, digest_source="image_id"))
    out = io.StringIO()
    pulled = pull_image(manifest, out, stream=_recorded_stream(chunks=5), clock=_Clock())
    size = inspect_image(image_id)["Size"]
    assert pulled.size_bytes == size and pulled.image_id == image_id and pulled.layers == 2
    lines = out.getvalue().splitlines()
    assert lines[0] == f"pulling {image_id} (linux/amd64)" and lines[-1].startswith(f"pulled {image_id}: ")
    root = HitchRoot(tmp_path / "root")
    kept = json.loads(record_pull(root, manifest, pulled).read_text())
    assert (kept["digest"], kept["size_bytes"]) == (image_id, size)


def test_runtime_install_of_an_operator_pin_checks_the_local_image_and_reports_its_size(
    local_image: tuple[str, str], tmp_path: Path
) -> None:
    tag, image_id = local_image
    env = {**os.environ, "HITCH_ROOT": str(tmp_path / "root")}

    def hitch(*args: str) -> dict[str, Any]:
        proc = subprocess.run([*HITCH, *args, "--json"], capture_output=True, text=True, timeout=120, env=env, check=False)
        assert proc.returncode == 0, proc.stderr + proc.stdout
        answer: dict[str, Any] = json.loads(proc.stdout)
        return answer

    hitch("runtime", "pin", CUDA_OCI, "--image", tag)
    installed = hitch("runtime", "install", CUDA_OCI)
    assert installed["already_installed"] and installed["image_bytes"] == inspect_image(image_id)["Size"]
