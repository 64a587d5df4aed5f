"""The runtime catalog: its entries, runtime_id over shipped bytes, pins, lookups, parse errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.contracts.runtime import InferenceRuntimeManifestV1, OciPackage, PythonEnvPackage
from harness.errors import HitchError
from harness.ids import digest_json
from harness.runtimes import default_runtime, get_runtime, load_catalog, require_certifiable_pin, runtime_source_dir
from tests.harness.runtimes.conftest import GENERIC

GENERIC_OCI = "sglang-0.5.23-cpu-generic-oci"
NAMES = ["sglang-0.5.15.post1-cpu", "sglang-0.5.16-cuda", GENERIC, "sglang-0.5.23-cuda", GENERIC_OCI]


def _by_name(path: Path | None = None) -> dict[str, InferenceRuntimeManifestV1]:
    return {m.name: m for m in load_catalog(path)}


def test_catalog_has_the_five_runtimes_in_order() -> None:
    assert [m.name for m in load_catalog()] == NAMES


def test_oci_entries_are_listed_unpinned() -> None:
    cat = _by_name()
    cpu, cuda = cat["sglang-0.5.15.post1-cpu"], cat["sglang-0.5.16-cuda"]
    assert (cpu.engine_version, cpu.engine_commit) == ("0.5.15.post1", "0b3bb0cbe31873994c9f989fddfe2f87ca839fdd")
    assert (cpu.backend, cpu.cpu_feature_requirement) == ("cpu", "amx")
    assert (cuda.engine_version, cuda.engine_commit) == ("0.5.16", "fdebc938f7f4d16fe6b9f55dcd9a767cf0899ea1")
    assert cuda.backend == "cuda"
    for m in (cpu, cuda):
        assert isinstance(m.package, OciPackage)
        assert (m.package.image, m.package.digest, m.pinned, m.certifiable) == ("lmsysorg/sglang", None, False, False)


def test_generic_cpu_entry_is_a_pinned_provisional_python_env() -> None:
    m = _by_name()[GENERIC]
    assert (m.engine_version, m.backend, m.cpu_feature_requirement) == ("0.5.23", "cpu", "none")
    assert (m.pinned, m.certifiable, m.torch_version) == (True, False, "2.14.1")
    assert m.launch_env == {"SGLANG_USE_CPU_ENGINE": "1"}
    assert isinstance(m.package, PythonEnvPackage)
    assert m.package.lock_file.path == "requirements.lock"
    assert [f.path for f in m.package.files] == ["shim/sgl_kernel/__init__.py"]
    assert m.package.pythonpath == ["shim"]


def test_generic_cpu_image_entry_is_unpinned_and_stays_provisional_once_pinned(catalog_copy: Path) -> None:
    m = _by_name(catalog_copy)[GENERIC_OCI]
    assert isinstance(m.package, OciPackage)
    assert (m.package.image, m.package.tag_hint, m.package.digest) == ("hitch/sglang-cpu-generic", "0.5.23", None)
    assert (m.engine_version, m.backend, m.cpu_feature_requirement) == ("0.5.23", "cpu", "none")
    assert (m.pinned, m.certifiable) == (False, False)
    text = catalog_copy.read_text().replace('tag_hint = "0.5.23"', 'tag_hint = "0.5.23"\ndigest = "sha256:' + "b" * 64 + '"')
    catalog_copy.write_text(text)
    pinned = _by_name(catalog_copy)[GENERIC_OCI]
    assert (pinned.pinned, pinned.certifiable) == (True, False)  # a pin never makes generic CPU certifiable


def test_the_default_runtime_is_one_the_launcher_can_start(catalog_copy: Path) -> None:
    assert default_runtime("cpu", catalog_copy).name == GENERIC
    assert default_runtime("cpu", catalog_copy, launcher="process").name == GENERIC
    assert default_runtime("cpu", catalog_copy, launcher="oci").name == "sglang-0.5.15.post1-cpu"  # none pinned: the first
    text = catalog_copy.read_text().replace('tag_hint = "0.5.23"', 'tag_hint = "0.5.23"\ndigest = "sha256:' + "b" * 64 + '"')
    catalog_copy.write_text(text)
    assert default_runtime("cpu", catalog_copy, launcher="oci").name == GENERIC_OCI
    assert default_runtime("cpu", catalog_copy).name == GENERIC  # the catalog order keeps the process default
    assert default_runtime("cuda", catalog_copy, launcher="process").name == "sglang-0.5.23-cuda"


def test_runtime_id_is_the_digest_of_everything_else_but_its_licences() -> None:
    for m in load_catalog():
        body = m.to_json_dict()
        rid = body.pop("runtime_id")
        body.pop("licenses", None)
        assert rid == digest_json(body)
    assert load_catalog() == load_catalog()


def test_every_runtime_records_its_engine_and_bundled_licences() -> None:
    """Spec §7.1.5: SGLang's licence and the bundled packages' (as their wheels declare them) are kept with the
    runtime, as the model's is kept in its manifest."""
    found = _by_name()
    for manifest in found.values():
        assert manifest.licenses is not None and manifest.licenses.engine == "Apache-2.0", manifest.name
    for name in (GENERIC, "sglang-0.5.23-cuda", GENERIC_OCI):
        deps = found[name].licenses.dependencies  # type: ignore[union-attr]
        assert "BSD-3-Clause" in deps["torch"] and deps["triton"] == "MIT"
    assert found["sglang-0.5.23-cuda"].licenses.dependencies["nvidia-cublas"] == "LicenseRef-NVIDIA-Proprietary"  # type: ignore[union-attr]


def test_licences_never_change_a_runtime_id_and_older_manifests_load(catalog_copy: Path) -> None:
    before = {m.name: m.runtime_id for m in load_catalog(catalog_copy)}
    text = catalog_copy.read_text()
    stripped = re.sub(r"\n\[runtime\.licenses\]\n(?:[a-z]+ = .*\n)+", "\n", text)
    assert "licenses" not in stripped.replace("# `licenses`", "")
    catalog_copy.write_text(stripped)
    without = load_catalog(catalog_copy)
    assert {m.name: m.runtime_id for m in without} == before
    assert all(m.licenses is None and "licenses" not in m.to_json_dict() for m in without)
    old = without[0].to_json_dict()  # a manifest.json written before licences existed
    assert InferenceRuntimeManifestV1.model_validate(old).licenses is None


def test_an_image_licence_on_a_python_env_runtime_is_refused(catalog_copy: Path) -> None:
    text = catalog_copy.read_text()
    old = '[runtime.licenses]\nengine = "Apache-2.0"\ndependencies = { torch'
    assert old in text
    catalog_copy.write_text(
        text.replace(old, '[runtime.licenses]\nimage = "MIT"\nengine = "Apache-2.0"\ndependencies = { torch', 1)
    )
    with pytest.raises(HitchError) as err:
        load_catalog(catalog_copy)
    assert err.value.code == "runtime_catalog_invalid" and "image licence" in err.value.message


def test_committed_lock_is_fully_hash_pinned_and_has_no_cuda_only_kernels() -> None:
    text = (runtime_source_dir(GENERIC) / "requirements.lock").read_text()
    pins = dict(re.findall(r"^([a-z0-9][a-z0-9._-]*)==(\S+) \\$", text, re.M))
    assert len(pins) == text.count("--hash=sha256:") > 100
    assert (pins["torch"], pins["torchvision"], pins["sglang"]) == ("2.14.1", "0.29.1", "0.5.23")
    assert "soundfile" in pins
    for left_out in ("sglang-kernel", "flashinfer-python", "flash-attn-4", "torchaudio", "numba", "timm", "kernels"):
        assert left_out not in pins


@pytest.mark.parametrize("rel", ["shim/sgl_kernel/__init__.py", "requirements.lock"])
def test_runtime_id_changes_when_shipped_bytes_change(catalog_copy: Path, rel: str) -> None:
    before = _by_name(catalog_copy)
    target = catalog_copy.parent / "runtimes" / GENERIC / rel
    target.write_bytes(target.read_bytes() + b"\n# edited\n")
    after = _by_name(catalog_copy)
    assert after[GENERIC].runtime_id != before[GENERIC].runtime_id
    assert after["sglang-0.5.16-cuda"].runtime_id == before["sglang-0.5.16-cuda"].runtime_id


def test_pinning_an_oci_digest_changes_its_id_and_makes_it_certifiable(catalog_copy: Path) -> None:
    before = _by_name(catalog_copy)["sglang-0.5.16-cuda"]
    text = catalog_copy.read_text().replace('tag_hint = "v0.5.16"', 'tag_hint = "v0.5.16"\ndigest = "sha256:' + "a" * 64 + '"')
    catalog_copy.write_text(text)
    after = _by_name(catalog_copy)["sglang-0.5.16-cuda"]
    assert (after.pinned, after.certifiable) == (True, True)
    assert after.runtime_id != before.runtime_id
    assert require_certifiable_pin(after) is after


@pytest.mark.parametrize("name", NAMES[:2])
def test_unpinned_oci_is_refused(name: str) -> None:
    with pytest.raises(HitchError) as err:
        require_certifiable_pin(get_runtime(name))
    assert err.value.code == "inference_runtime_unpinned"


def test_pinned_python_env_passes_the_pin_check() -> None:
    m = get_runtime(GENERIC)
    assert require_certifiable_pin(m) is m


def test_lookup_by_name_and_by_runtime_id() -> None:
    m = get_runtime(GENERIC)
    assert get_runtime(m.runtime_id) == m


@pytest.mark.parametrize("key", ["sglang-9.9.9", "sha256:" + "0" * 64])
def test_unknown_runtime_is_not_found(key: str) -> None:
    with pytest.raises(HitchError) as err:
        get_runtime(key)
    assert err.value.code == "inference_runtime_not_found"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ('engine_version = "0.5.16"', 'engine_version = "0.5.16"\nsurprise = 1'),  # unknown key
        ('fdebc938f7f4d16fe6b9f55dcd9a767cf0899ea1"', 'FDEBC938"'),  # bad commit
        ('backend = "cuda"', 'backend = "metal"'),  # unknown backend
        ('kind = "python-env"', 'kind = "conda"'),  # unknown package kind
        ('lock_file = "requirements.lock"', 'lock_file = "../requirements.lock"'),  # escapes the folder
        ('lock_file = "requirements.lock"', 'lock_file = "missing.lock"'),  # missing file
        ('files = ["shim/sgl_kernel/__init__.py"]', "files = []"),  # shim on PYTHONPATH but not covered
        ('schema_version = "1"', 'schema_version = "2"'),
        ('name = "sglang-0.5.16-cuda"', 'name = "sglang-0.5.15.post1-cpu"'),  # duplicate name
        ('[[runtime]]\nname = "sglang-0.5.16-cuda"', "[[runtime]\nbroken"),  # not TOML
    ],
)
def test_bad_catalog_is_refused_with_a_clear_code(catalog_copy: Path, old: str, new: str) -> None:
    text = catalog_copy.read_text()
    assert old in text
    catalog_copy.write_text(text.replace(old, new, 1))
    with pytest.raises(HitchError) as err:
        load_catalog(catalog_copy)
    assert err.value.code == "runtime_catalog_invalid"


def test_unlisted_file_on_pythonpath_is_refused(catalog_copy: Path) -> None:
    extra = catalog_copy.parent / "runtimes" / GENERIC / "shim" / "sneaky.py"
    extra.write_text("x = 1\n")
    with pytest.raises(HitchError) as err:
        load_catalog(catalog_copy)
    assert err.value.code == "runtime_catalog_invalid"
    assert err.value.details["unlisted"] == ["shim/sneaky.py"]


@pytest.mark.parametrize(
    "line", ["requests==2.0\n", "requests>=2.0 --hash=sha256:" + "a" * 64 + "\n", "requests==2 --hash=md5:ab\n"]
)
def test_lock_without_exact_hash_pins_is_refused(catalog_copy: Path, line: str) -> None:
    lock = catalog_copy.parent / "runtimes" / GENERIC / "requirements.lock"
    lock.write_text(lock.read_text() + line)
    with pytest.raises(HitchError) as err:
        load_catalog(catalog_copy)
    assert err.value.code == "runtime_catalog_invalid"
