"""``hitch runtime ...``: list and show catalog runtimes, install one under HITCH_ROOT, pin a local OCI image."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from harness.cli import units
from harness.cli.output import COMMON, Common, cli_command, emit
from harness.errors import HitchError
from harness.paths import HitchRoot

if TYPE_CHECKING:
    from harness.contracts.runtime import InferenceRuntimeManifestV1

app = typer.Typer(no_args_is_help=True, help="pinned SGLang runtimes")

IdArg = Annotated[str, typer.Argument(help="catalog name (e.g. sglang-0.5.23-cpu-generic) or runtime_id")]


def _installed(root: HitchRoot, manifest: InferenceRuntimeManifestV1) -> bool | None:
    """True/False for a python-env runtime; None for oci (the image lives in Docker, not here)."""
    from harness.runtimes import installed_runtime

    if manifest.package.kind != "python-env":
        return None
    try:
        return installed_runtime(root, manifest) is not None
    except HitchError:
        return False


def _line(m: InferenceRuntimeManifestV1, installed: bool | None) -> str:
    flags = [
        m.package.kind,
        m.backend,
        "pinned" if m.pinned else "UNPINNED",
        "certifiable" if m.certifiable else "not certifiable",
    ]
    if installed is not None:
        flags.append("installed" if installed else "not installed")
    return f"{m.name:<28} {m.runtime_id[:19]}…  {', '.join(flags)}"


@app.command("list", help="every runtime of the catalog")
@cli_command
def list_cmd(common: Common = COMMON) -> None:
    from harness.runtimes import load_catalog

    hroot = common.hroot
    runtimes = load_catalog()
    installed = {m.name: _installed(hroot, m) for m in runtimes}
    emit(
        common.as_json,
        {
            "kind": "runtime-list",
            "runtimes": [m.to_json_dict() for m in runtimes],
            "installed": sorted(name for name, ok in installed.items() if ok),
        },
        "\n".join(_line(m, installed[m.name]) for m in runtimes),
    )


@app.command("show", help="one runtime's manifest (and whether it is installed here)")
@cli_command
def show_cmd(runtime: IdArg, common: Common = COMMON) -> None:
    from harness.runtimes import get_runtime, installed_runtime

    hroot = common.hroot
    manifest = get_runtime(runtime)
    found = installed_runtime(hroot, manifest) if manifest.package.kind == "python-env" else None
    payload: dict[str, Any] = {
        "kind": "runtime",
        "runtime": manifest.to_json_dict(),
        "installed": found is not None,
        "install_dir": str(found.path) if found else None,
        "python": str(found.python) if found else None,
    }
    human = _line(manifest, _installed(hroot, manifest)) + "\n" + json.dumps(manifest.to_json_dict(), indent=2)
    if found:
        human += f"\ninstalled at {found.path}"
    emit(common.as_json, payload, human)


@app.command("install", help="install a runtime (python-env: private venv from the hash-pinned lock; progress on stderr)")
@cli_command
def install_cmd(runtime: IdArg, common: Common = COMMON) -> None:
    from harness.runtimes import get_runtime, install_runtime

    hroot = common.hroot
    manifest = get_runtime(runtime)
    result = install_runtime(hroot, manifest)
    found = result.runtime
    payload: dict[str, Any] = {
        "kind": "runtime-install",
        "name": manifest.name,
        "runtime_id": manifest.runtime_id,
        "already_installed": result.already_installed,
        "seconds": result.seconds,
        "install_dir": str(found.path) if found else None,
        "python": str(found.python) if found else None,
        "venv_bytes": result.venv_bytes,
        "image_bytes": result.image_bytes,
        "versions": result.versions,
    }
    verb = "already installed" if result.already_installed else f"installed in {result.seconds:.1f} s"
    where = f" at {found.path}" if found else ""
    if result.image_bytes is not None:
        where += f" (image {units.size(result.image_bytes)})"
    emit(common.as_json, payload, f"{manifest.name} {verb}{where}")


@app.command(
    "plan",
    help="what installing a python-env runtime fetches: every pinned wheel as the package index pip uses lists it "
    "(size, sha256; yanked, missing or re-hashed pins fail); downloads nothing",
)
@cli_command
def plan_cmd(
    runtime: IdArg,
    index_url: Annotated[str | None, typer.Option("--index-url", help="ask this simple index instead of pip's")] = None,
    common: Common = COMMON,
) -> None:
    from harness.runtimes import get_runtime
    from harness.runtimes.index_plan import install_plan, require_resolvable

    plan = install_plan(get_runtime(runtime), index_url=index_url)
    total = plan.total_bytes
    payload: dict[str, Any] = {"kind": "runtime-plan", **plan.to_json_dict(), "total_bytes": total}
    extras = f"; extra indexes not asked: {' '.join(plan.extra_index_urls)}" if plan.extra_index_urls else ""
    sized = sorted((p for p in plan.pins if p.file is not None), key=lambda p: -(p.file.size or 0) if p.file else 0)
    lines = [
        f"{plan.runtime}: {len(plan.pins)} pinned wheels, "
        + (f"{total / 1e9:.2f} GB to download" if total is not None else "sizes not listed by the index")
        + f" (asked {plan.index_url}, {plan.index_source}{extras}; nothing downloaded)",
        *(f"  {p.file.size / 1e6:9.1f} MB  {p.file.filename}" for p in sized[:8] if p.file and p.file.size),
    ]
    lines += [f"  {p.status.upper()}: {p.name}=={p.version}: {p.detail}" for p in plan.problems]
    if plan.problems and not common.as_json:
        sys.stdout.write("\n".join(lines) + "\n")
    require_resolvable(plan)
    emit(common.as_json, payload, "\n".join([*lines, "every pin resolves"]))


@app.command("pin", help="pin an unpinned OCI runtime to an image already in the local Docker engine (operator overlay)")
@cli_command
def pin_cmd(
    runtime: Annotated[str, typer.Argument(help="catalog name of an OCI runtime without a digest")],
    image: Annotated[str | None, typer.Option("--image", help="local image (default: the catalog's image:tag_hint)")] = None,
    common: Common = COMMON,
) -> None:
    from harness.runtimes import load_catalog
    from harness.runtimes.catalog import pin_runtime

    hroot = common.hroot
    pin = pin_runtime(hroot, runtime, image)
    manifest = next(m for m in load_catalog(operator_pins=hroot.runtime_pins) if m.name == runtime)
    payload: dict[str, Any] = {
        "kind": "runtime-pin",
        "pin": pin.to_json_dict(),
        "overlay": str(hroot.runtime_pins),
        "runtime": manifest.to_json_dict(),
    }
    what = "RepoDigest (registry manifest digest)" if pin.source == "repo_digest" else "image ID (no RepoDigest: a local image)"
    emit(
        common.as_json,
        payload,
        f"{runtime} pinned by operator to {pin.digest}\n  from {pin.image_ref}: its {what}\n"
        f"  overlay: {payload['overlay']}\n  runtime_id: {manifest.runtime_id}",
    )
