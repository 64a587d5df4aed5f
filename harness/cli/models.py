"""`hitch models ...`: add, list, inspect and gc over the content-addressed model store."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from harness.cli import options as opt
from harness.cli import units
from harness.cli.output import COMMON, Common, cli_command, emit
from harness.errors import HitchError

if TYPE_CHECKING:
    from harness.contracts.model import LocalModelManifestV1

app = typer.Typer(no_args_is_help=True, help="models commands")
alias_app = typer.Typer(no_args_is_help=True, help="model aliases (pointers for people, never identity)")
app.add_typer(alias_app, name="alias")


def _fixture_facts(files_dir: Path, manifest: LocalModelManifestV1) -> dict[str, Any]:
    """The checkpoint's own fixture provenance (if it has one) and the catalog fixture whose pin it matches."""
    from catalog.model_fixtures import fixture_for_model_id
    from harness.contracts.base import parse_record
    from harness.contracts.model_fixture import FIXTURE_PROVENANCE_FILE, ModelFixtureProvenanceV1

    provenance = None
    if any(f.path == FIXTURE_PROVENANCE_FILE for f in manifest.files):
        try:
            data = json.loads((files_dir / FIXTURE_PROVENANCE_FILE).read_bytes())
        except (OSError, ValueError) as exc:
            raise HitchError(
                "local_model_integrity_failed", f"{FIXTURE_PROVENANCE_FILE} is unreadable", {"error": str(exc)}
            ) from exc
        provenance = parse_record(ModelFixtureProvenanceV1, data, "local_model_invalid").to_json_dict()
    entry = fixture_for_model_id(manifest.model_id)
    return {"fixture_provenance": provenance, "catalog_fixture": entry.to_json_dict() if entry else None}


def _fixture_lines(facts: dict[str, Any]) -> list[str]:
    lines = []
    prov = facts["fixture_provenance"]
    if prov is not None:
        src = prov["source"]
        lines += [
            f"provenance: {prov['name']} ({prov['architecture']}, {prov['parameter_count']} parameters), "
            f"license {prov['license']}",
            f"  from {src['package']}=={src['version']} ({src['index']}) wheel {src['wheel_sha256']}",
            f"  {src['member']} ({src['gguf_quantization']}) {src['gguf_sha256']}",
            f"  upstream {src['upstream']}",
        ]
    entry = facts["catalog_fixture"]
    if entry is not None:
        lines.append(f"catalog fixture: {entry['ref']} (model_id matches the pin in catalog/model_fixtures.toml)")
    return lines


def _aliases_by_model(aliases: dict[str, str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for alias, model_id in sorted(aliases.items()):
        out.setdefault(model_id, []).append(alias)
    return out


@app.command("add")
@cli_command
def add(
    directory: Annotated[Path, typer.Argument(help="checkpoint directory (HF safetensors)")],
    name: Annotated[str, typer.Option("--name", help="alias: [a-z0-9][a-z0-9._-]{0,63}")],
    tool_call_parser: Annotated[
        str | None,
        typer.Option(
            "--tool-call-parser",
            help="SGLang's tool-call parser for this model (e.g. hermes, llama3), or none; default: from the chat template",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="move --name when it already names another model (it is never moved silently)")
    ] = False,
    common: Common = COMMON,
) -> None:
    """Import a local checkpoint directory into the store and alias it."""
    from harness.store import RichImportProgress, import_model

    hroot = common.hroot
    opt.check_path(directory, "directory")
    show_bar = not common.as_json and sys.stderr.isatty()
    with RichImportProgress() if show_bar else contextlib.nullcontext() as bar:
        result = import_model(hroot, directory, name, progress=bar, tool_call_parser=tool_call_parser, move_alias=force)
    payload = {
        "model_id": result.model_id,
        "alias": result.alias,
        "ref": f"local/{result.alias}",
        "previous_model_id": result.previous_model_id,
        "already_present": result.already_present,
        "files_dir": str(result.files_dir),
        "manifest": result.manifest.to_json_dict(),
    }
    lines = [f"{'already in the store' if result.already_present else 'imported'}: {result.model_id}"]
    if result.previous_model_id and result.previous_model_id != result.model_id:
        lines.append(f"alias {result.alias} moved: {result.previous_model_id} -> {result.model_id}")
    else:
        lines.append(f"alias {result.alias} -> {result.model_id}")
    lines.append(f"tool-call parser: {result.manifest.chat_template.tool_call_parser or 'none (its locks claim no tool calls)'}")
    lines.append(f"use it as --model local/{result.alias}")
    emit(common.as_json, payload, "\n".join(lines))


def _summary(manifest_json: dict[str, Any], aliases: list[str]) -> dict[str, Any]:
    return {
        "model_id": manifest_json["model_id"],
        "aliases": aliases,
        "architectures": manifest_json["architecture"]["architectures"],
        "torch_dtype": manifest_json["architecture"]["torch_dtype"],
        "quantization": manifest_json["architecture"]["quantization"],
        "files": len(manifest_json["files"]),
        "size_bytes": sum(f["size"] for f in manifest_json["files"]),
    }


@app.command("list")
@cli_command
def list_(common: Common = COMMON) -> None:
    """Every published model with its aliases."""
    from harness.store import list_model_ids, quarantined_models, read_aliases, read_manifest

    hroot = common.hroot
    by_model = _aliases_by_model(read_aliases(hroot))
    models = [_summary(read_manifest(hroot, m).to_json_dict(), by_model.get(m, [])) for m in list_model_ids(hroot)]
    # unpublished by a failed re-hash at a start (harness.store.start_check): usable again once re-imported
    quarantined = [
        {"model_id": m, "aliases": by_model.get(m, []), "path": str(where)} for m, where in quarantined_models(hroot).items()
    ]
    rows = [("MODEL", "ALIASES", "ARCHITECTURE", "SIZE")] + [
        (m["model_id"], ",".join(m["aliases"]) or "-", "/".join(m["architectures"]), units.size(m["size_bytes"])) for m in models
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    human = "\n".join("  ".join(r[i].ljust(widths[i]) for i in range(4)).rstrip() for r in rows) if models else ""
    human = human or "no models; add one with `hitch models add DIR --name ALIAS`"
    for q in quarantined:
        human += (
            f"\nquarantined: {q['model_id']} ({','.join(q['aliases']) or 'no alias'}) at {q['path']}: a file no longer "
            "matched its manifest; import the same checkpoint again (`hitch models add DIR --name ALIAS`)"
        )
    emit(common.as_json, {"models": models, "quarantined": quarantined}, human)


@app.command("inspect")
@cli_command
def inspect(
    ref: opt.ModelArg,
    verify: Annotated[bool, typer.Option("--verify", help="re-hash the published files against the manifest")] = False,
    common: Common = COMMON,
) -> None:
    """The manifest of one model; --verify re-hashes its published files."""
    from harness.store import model_files_dir, read_aliases, resolve_model, verify_model_files

    hroot = common.hroot
    manifest = resolve_model(hroot, ref)
    if verify:
        verify_model_files(hroot, manifest)
    aliases = _aliases_by_model(read_aliases(hroot)).get(manifest.model_id, [])
    data = manifest.to_json_dict()
    files_dir = model_files_dir(hroot, manifest.model_id)
    facts = _fixture_facts(files_dir, manifest)
    payload = {
        "ref": ref,
        "model_id": manifest.model_id,
        "aliases": aliases,
        "files_dir": str(files_dir),
        "verified": verify,
        "manifest": data,
        **facts,
    }
    arch = manifest.architecture
    human = "\n".join(
        [
            f"model_id: {manifest.model_id}",
            f"aliases: {', '.join(aliases) or '-'}",
            f"architecture: {'/'.join(arch.architectures)} ({arch.model_type}), dtype {arch.torch_dtype}, "
            f"quantization {arch.quantization or 'none'}",
            f"weights: {len(manifest.weights.shards)} shard(s), {manifest.weights.tensor_count} tensors, "
            f"{units.size(manifest.weights.total_tensor_bytes)}",
            f"chat template: {manifest.chat_template.source}",
            f"files: {len(manifest.files)} in {payload['files_dir']}",
            f"verified: {'yes' if verify else 'not checked (use --verify)'}",
            *_fixture_lines(facts),
        ]
    )
    emit(common.as_json, payload, human)


@app.command("gc")
@cli_command
def gc(
    apply: Annotated[bool, typer.Option("--apply", help="delete the candidates (default: dry run)")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="only list candidates (the default)")] = False,
    common: Common = COMMON,
) -> None:
    """List (or with --apply delete) unreferenced models and leftover staging directories."""
    from harness.store import run_gc

    if apply and dry_run:
        raise HitchError("usage_error", "--apply and --dry-run contradict each other")
    plan = run_gc(common.hroot, apply=apply)
    payload = {"dry_run": not apply, **plan.to_json_dict()}
    lines = [f"{'deleted' if apply else 'would delete'}:"]
    candidates = plan.deleted if apply else plan.unreferenced_models + plan.orphan_model_files + plan.staging_leftovers
    lines += [f"  {c}" for c in candidates] or ["  nothing"]
    lines += [f"kept {m}: {', '.join(r)}" for m, r in sorted(plan.kept.items())]
    emit(common.as_json, payload, "\n".join(lines))


@alias_app.command("rm")
@cli_command
def alias_rm(
    name: Annotated[str, typer.Argument(help="the alias (ALIAS or local/ALIAS)")],
    common: Common = COMMON,
) -> None:
    """Remove an alias; the model stays in the store (`hitch models gc` collects what nothing references)."""
    from harness.store import remove_alias

    alias = name.removeprefix("local/")
    model_id = remove_alias(common.hroot, alias)
    emit(
        common.as_json,
        {"kind": "model-alias-removed", "alias": alias, "model_id": model_id},
        f"alias {alias} removed (it named {model_id}; the model stays until `hitch models gc`)",
    )
