"""The runtime catalog: ``catalog/runtimes.toml`` -> :class:`InferenceRuntimeManifestV1` records.

Owns parsing and validating the catalog (unknown keys refused), hashing each python-env
runtime's shipped files (requirements + shim) out of ``catalog/runtimes/<name>/``, computing
``runtime_id`` and looking runtimes up by name or id.

``runtime_id = digest_json(entry without runtime_id)``: an oci package contributes its
image digest, a python-env package the sha256 of its requirements file and of every shipped file,
so editing the shim or the requirements yields a new runtime. An entry's ``licenses`` (spec §7.1.5) are
recorded in its manifest but left out of ``runtime_id``: they describe the pinned bytes, they are not bytes.
"""

from __future__ import annotations

import re
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from harness.contracts.runtime import InferenceRuntimeManifestV1
from harness.errors import HitchError
from harness.ids import digest_json, is_sha256_id, sha256_hex
from harness.paths import HitchRoot
from harness.runtimes.pins import RuntimePinV1, choose_digest, inspect_image, read_pins, write_pins

__all__ = [
    "RequirementPin",
    "check_requirements",
    "default_catalog_path",
    "default_runtime",
    "get_runtime",
    "load_catalog",
    "requirement_pins",
    "requirements_pin_engine",
    "pin_runtime",
    "pinned_image",
    "require_certifiable_pin",
    "runtime_source_dir",
]

_CODE = "runtime_catalog_invalid"
_NAME = r"^[a-z0-9][a-z0-9._-]{0,63}$"


def _relative(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._/-]*", value) or ".." in value.split("/") or "//" in value:
        raise ValueError("must be a plain relative path inside the runtime's catalog folder")
    return value


_Rel = Annotated[str, AfterValidator(_relative)]
_REQUIREMENT = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s\\;]+)$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class _OciEntry(_Strict):
    kind: Literal["oci"]
    image: str = Field(min_length=1)
    tag_hint: str | None = None
    digest: Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")] | None = None
    platform: str = "linux/amd64"


class _PythonEnvEntry(_Strict):
    kind: Literal["python-env"]
    python: Annotated[str, StringConstraints(pattern=r"^3\.\d+$")]
    lock_file: _Rel
    files: list[_Rel] = Field(default_factory=list)
    pythonpath: list[_Rel] = Field(default_factory=list)


class _Licenses(_Strict):
    engine: str = Field(min_length=1)
    dependencies: dict[str, Annotated[str, StringConstraints(min_length=1)]] = Field(default_factory=dict)
    image: str | None = None


class _Entry(_Strict):
    name: Annotated[str, StringConstraints(pattern=_NAME)]
    engine: Literal["sglang"] = "sglang"
    engine_version: str = Field(min_length=1)
    engine_commit: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}$")] | None = None
    backend: Literal["cpu", "cuda"]
    cpu_feature_requirement: Literal["amx", "none"] | None = None
    certifiable: bool
    torch_version: str | None = None
    cuda_version: str | None = None
    launch_env: dict[str, str] = Field(default_factory=dict)
    package: Annotated[_OciEntry | _PythonEnvEntry, Field(discriminator="kind")]
    licenses: _Licenses | None = None


class _Catalog(_Strict):
    schema_version: Literal["1"]
    runtime: list[_Entry] = Field(min_length=1)


def default_catalog_path() -> Path:
    """``catalog/runtimes.toml``: data of the ``catalog`` folder beside ``harness`` (a checkout or site-packages).

    Read as a file, never imported: the runtime core depends on no code above it (DESIGN §2)."""
    return Path(__file__).resolve().parents[2] / "catalog" / "runtimes.toml"


def runtime_source_dir(name: str, catalog_path: Path | None = None) -> Path:
    """The folder holding a runtime's shipped files: ``<catalog dir>/runtimes/<name>``."""
    return (catalog_path or default_catalog_path()).parent / "runtimes" / name


def _fail(message: str, details: dict[str, Any]) -> HitchError:
    return HitchError(_CODE, message, details)


def _file_sha(folder: Path, rel: str, entry: str) -> str:
    path = folder / rel
    if not path.is_file() or path.is_symlink():
        raise _fail(f"runtime {entry}: shipped file {rel} is missing (or not a plain file)", {"path": str(path)})
    return "sha256:" + sha256_hex(path.read_bytes())


@dataclass(frozen=True)
class RequirementPin:
    """One requirement of a hash-pinned requirements file: ``name==version`` and the sha256 digests (hex) it admits."""

    name: str
    version: str
    sha256s: frozenset[str]


def _requirement_lines(text: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, words) of each requirement line, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", text)
    for lineno, raw in enumerate(joined.splitlines(), 1):
        line = raw.strip()
        if line and not line.startswith("#"):
            yield lineno, line.split()


def check_requirements(text: str, entry: str) -> int:
    """Every requirement is ``name==version`` with at least one ``--hash=sha256:``; returns the count."""
    count = 0
    for lineno, parts in _requirement_lines(text):
        if not _REQUIREMENT.match(parts[0]):
            raise _fail(f"runtime {entry}: requirements line {lineno} is not `name==version`", {"line": parts[0]})
        hashes = [p for p in parts[1:] if p.startswith("--hash=")]
        if len(hashes) != len(parts) - 1 or not hashes:
            raise _fail(f"runtime {entry}: requirements line {lineno} lacks --hash=sha256: pins", {"line": parts[0]})
        if any(not re.fullmatch(r"--hash=sha256:[0-9a-f]{64}", h) for h in hashes):
            raise _fail(f"runtime {entry}: requirements line {lineno} has a non-sha256 hash", {"line": parts[0]})
        count += 1
    if count == 0:
        raise _fail(f"runtime {entry}: the requirements file pins no package", {})
    return count


def requirement_pins(text: str) -> list[RequirementPin]:
    """The pins of a requirements file :func:`check_requirements` accepts, in file order."""
    pins = []
    for _lineno, parts in _requirement_lines(text):
        name, _, version = parts[0].partition("==")
        digests = frozenset(p.removeprefix("--hash=sha256:") for p in parts[1:] if p.startswith("--hash=sha256:"))
        pins.append(RequirementPin(name, version, digests))
    return pins


def requirements_pin_engine(requirements_text: str, engine: str, version: str) -> bool:
    """Whether a (checked) requirements file pins ``engine==version`` itself with a sha256: the engine's bytes are known."""
    return any(p.name == engine and p.version == version and p.sha256s for p in requirement_pins(requirements_text))


def _manifest(entry: _Entry, catalog_path: Path, pin: RuntimePinV1 | None = None) -> InferenceRuntimeManifestV1:
    pkg = entry.package
    package: dict[str, Any]
    engine_known = entry.engine_commit is not None
    operator = False
    if isinstance(pkg, _OciEntry):
        package = pkg.model_dump()
        if pin is not None and pkg.digest is None:
            package["digest"] = pin.digest
            package["digest_source"] = pin.source
            operator = True
        pinned = package["digest"] is not None
    else:
        folder = runtime_source_dir(entry.name, catalog_path)
        if pkg.lock_file in pkg.files:
            raise _fail(f"runtime {entry.name}: the requirements file is listed in files too", {"path": pkg.lock_file})
        for sub in pkg.pythonpath:
            listed = {f for f in pkg.files if f.startswith(sub.rstrip("/") + "/")}
            present = {
                p.relative_to(folder).as_posix()
                for p in (folder / sub).rglob("*")
                if p.is_file() and "__pycache__" not in p.parts
            }
            if not listed or present - listed:
                raise _fail(
                    f"runtime {entry.name}: every file under pythonpath dir {sub!r} must be listed in files",
                    {"unlisted": sorted(present - listed), "dir": sub},
                )
        requirements_path = folder / pkg.lock_file
        requirements_sha = _file_sha(folder, pkg.lock_file, entry.name)
        requirements_text = requirements_path.read_text()
        check_requirements(requirements_text, entry.name)
        pinned = True
        engine_known = engine_known or requirements_pin_engine(requirements_text, entry.engine, entry.engine_version)
        package = {
            "kind": "python-env",
            "python": pkg.python,
            "lock_file": {"path": pkg.lock_file, "sha256": requirements_sha},
            "files": [{"path": f, "sha256": _file_sha(folder, f, entry.name)} for f in sorted(set(pkg.files))],
            "pythonpath": list(pkg.pythonpath),
        }
    fields: dict[str, Any] = {
        "schema_version": "1",
        "name": entry.name,
        "engine": entry.engine,
        "engine_version": entry.engine_version,
        "engine_commit": entry.engine_commit,
        "backend": entry.backend,
        "cpu_feature_requirement": entry.cpu_feature_requirement,
        # the catalog's intent counts only once every artifact is pinned and the engine's bytes are known: by
        # its source commit, or (python-env) by the hash of the engine's own wheel in the requirements
        "certifiable": entry.certifiable and pinned and engine_known,
        "pinned": pinned,
        "torch_version": entry.torch_version,
        "cuda_version": entry.cuda_version,
        "launch_env": dict(entry.launch_env),
        "package": package,
    }
    if operator:  # absent otherwise, so every catalog-pinned runtime keeps its runtime_id
        fields["pinned_by"] = "operator"
    fields["runtime_id"] = digest_json(fields)
    if entry.licenses is not None:  # after the id: a licence statement describes the pinned bytes, it is not one of them
        if entry.licenses.image is not None and not isinstance(pkg, _OciEntry):
            raise _fail(f"runtime {entry.name}: an image licence is for an oci package", {})
        fields["licenses"] = entry.licenses.model_dump(exclude_none=True)
    try:
        return InferenceRuntimeManifestV1.model_validate(fields)
    except ValidationError as exc:  # pragma: no cover - the entry model already refuses these
        raise _fail(f"runtime {entry.name}: {exc.error_count()} problem(s)", {"errors": str(exc)}) from exc


def load_catalog(
    catalog_path: Path | None = None, *, operator_pins: bool | Path | None = None
) -> list[InferenceRuntimeManifestV1]:
    """Every runtime of the catalog, in file order; any problem -> ``runtime_catalog_invalid``.

    ``operator_pins``: the overlay of ``hitch runtime pin`` (:mod:`harness.runtimes.pins`) to apply — a file,
    True for this HITCH_ROOT's, False for none; by default the shipped catalog gets this root's overlay and an
    explicit ``catalog_path`` none.
    """
    path = catalog_path or default_catalog_path()
    use_pins = operator_pins if operator_pins is not None else catalog_path is None
    pins = {} if use_pins is False else read_pins(use_pins if isinstance(use_pins, Path) else HitchRoot.at().runtime_pins)
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as exc:
        raise _fail(f"cannot read the runtime catalog {path}: {exc.strerror}", {"path": str(path)}) from exc
    except tomllib.TOMLDecodeError as exc:
        raise _fail(f"the runtime catalog {path} is not valid TOML: {exc}", {"path": str(path)}) from exc
    try:
        parsed = _Catalog.model_validate(raw)
    except ValidationError as exc:
        problems = [
            {"loc": ".".join(str(p) for p in err["loc"]), "msg": err["msg"]}
            for err in exc.errors(include_url=False, include_input=False)
        ]
        raise _fail(f"invalid runtime catalog {path}: {len(problems)} problem(s)", {"problems": problems}) from exc
    names = [e.name for e in parsed.runtime]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise _fail("the runtime catalog names a runtime twice", {"names": dupes})
    return [_manifest(entry, path, pins.get(entry.name)) for entry in parsed.runtime]


def get_runtime(
    name_or_runtime_id: str,
    catalog_path: Path | None = None,
    *,
    runtimes: Sequence[InferenceRuntimeManifestV1] | None = None,
) -> InferenceRuntimeManifestV1:
    """A runtime by catalog name or ``runtime_id``; unknown -> ``inference_runtime_not_found``. ``runtimes`` (an
    already loaded catalog) stands for ``load_catalog(catalog_path)``."""
    runtimes = runtimes if runtimes is not None else load_catalog(catalog_path)
    key = "runtime_id" if is_sha256_id(name_or_runtime_id) else "name"
    for runtime in runtimes:
        if getattr(runtime, key) == name_or_runtime_id:
            return runtime
    raise HitchError(
        "inference_runtime_not_found",
        f"no runtime {name_or_runtime_id!r} in the catalog",
        {"runtime": name_or_runtime_id, "known": [r.name for r in runtimes]},
    )


def pinned_image(manifest: InferenceRuntimeManifestV1) -> str:
    """The image reference an ``oci`` launch of this runtime runs: its digest (catalog) or the operator's pin
    (``hitch runtime pin``); ``inference_runtime_unpinned`` when it has none (a tag is never enough)."""
    pkg = manifest.package
    if pkg.kind != "oci" or pkg.digest is None:
        raise HitchError(
            "inference_runtime_unpinned",
            f"runtime {manifest.name} has no pinned OCI image: `hitch runtime pin` one, or use --launcher process",
            {"runtime": manifest.name, "runtime_id": manifest.runtime_id, "kind": pkg.kind},
        )
    return pkg.reference()


def require_certifiable_pin(manifest: InferenceRuntimeManifestV1) -> InferenceRuntimeManifestV1:
    """Refuse a runtime whose artifacts are not all pinned (a tag is never enough)."""
    unpinned = not manifest.pinned or (manifest.package.kind == "oci" and manifest.package.digest is None)
    if unpinned:
        raise HitchError(
            "inference_runtime_unpinned",
            f"runtime {manifest.name} is not pinned by digest; it cannot back a lock or a certification",
            {"runtime": manifest.name, "runtime_id": manifest.runtime_id},
        )
    return manifest


def default_runtime(
    device: str,
    catalog_path: Path | None = None,
    *,
    launcher: str | None = None,
    runtimes: Sequence[InferenceRuntimeManifestV1] | None = None,
) -> InferenceRuntimeManifestV1:
    """A pinned, certifiable runtime for the device if the catalog has one, else the best pinned one.

    ``launcher`` narrows the choice to what it can start: ``oci`` an image, ``process`` a python-env. ``runtimes``
    (an already loaded catalog) stands for ``load_catalog(catalog_path)``."""
    kind = {"oci": "oci", "process": "python-env"}.get(launcher or "")
    loaded = runtimes if runtimes is not None else load_catalog(catalog_path)
    candidates = [r for r in loaded if r.backend == device and kind in (None, r.package.kind)]
    for wanted in ((True, True), (False, True)):
        for runtime in candidates:
            if (runtime.certifiable, runtime.pinned) == wanted:
                return runtime
    if candidates:
        return candidates[0]
    raise HitchError("inference_runtime_not_found", f"the runtime catalog has no {device} runtime", {"device": device})


def pin_runtime(
    root: HitchRoot,
    name: str,
    image_ref: str | None = None,
    *,
    inspect: Callable[[str], Mapping[str, Any]] | None = None,
    clock: Callable[[], float] = time.time,
) -> RuntimePinV1:
    """Pin catalog runtime ``name`` (OCI, unpinned) to the local image ``image_ref`` (default: image:tag_hint)."""
    # the repository's catalog alone: an earlier operator pin is replaced, never stacked
    entry = next((r for r in load_catalog(operator_pins=False) if r.name == name), None)
    if entry is None:
        raise HitchError("inference_runtime_not_found", f"no runtime {name!r} in the catalog", {"runtime": name})
    pkg = entry.package
    if pkg.kind != "oci":
        raise HitchError("usage_error", f"runtime {name} is a python-env runtime: its requirements file pins it already", {})
    if pkg.digest is not None:
        raise HitchError("usage_error", f"runtime {name} is pinned by the catalog ({pkg.digest})", {})
    ref = image_ref or (f"{pkg.image}:{pkg.tag_hint}" if pkg.tag_hint else pkg.image)
    attrs = (inspect or inspect_image)(ref)
    digest, source = choose_digest(attrs, pkg.image)
    pin = RuntimePinV1(name=name, image_ref=ref, digest=digest, source=source, pinned_at=clock())
    pins = read_pins(root.runtime_pins)
    pins[name] = pin
    write_pins(root.runtime_pins, pins)
    return pin
