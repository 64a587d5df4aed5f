"""``hitch bundle export RUN|EVAL|ENTRY --out X.tar`` and ``hitch bundle verify X.tar`` (spec §6.4).

The bundle itself is :mod:`harness.bundle`; an entry's signature and evidence are checked here with the
catalog's own verification (``hitch catalog verify``'s), on the entry's members extracted to a temporary folder
once their digests matched the manifest. Verification is offline: the trusted keys are ``--keys`` (default the
checkout's ``catalog/keys``), never a key carried by the bundle.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from harness.cli import options as opt
from harness.cli.output import COMMON, Common, cli_command, emit
from harness.errors import HitchError
from harness.paths import HitchRoot

app = typer.Typer(no_args_is_help=True, help="evidence bundles: manifests, lock, evidence, digests (never weights or secrets)")

_KINDS = ("run", "evaluation", "entry")


def _kind_of(root: HitchRoot, subject: str, kind: str | None) -> str:
    if kind is not None:
        if kind not in _KINDS:
            raise HitchError("usage_error", "--kind is run|evaluation|entry", {"kind": kind})
        return kind
    found = [
        k
        for k, exists in (
            ("entry", subject.endswith(".dsse.json") and Path(subject).is_file()),
            ("run", (root.runs / subject / "run.json").is_file()),
            ("evaluation", (root.path / "evals" / subject / "evaluation.json").is_file()),
        )
        if exists
    ]
    if len(found) != 1:
        why = "names nothing here" if not found else f"names a {' and an '.join(found)}: pass --kind"
        raise HitchError("usage_error", f"{subject!r} {why} (a run id, an evaluation id or an ENTRY.dsse.json)", {})
    return found[0]


def _entry_identity(entry: Path) -> tuple[str | None, str | None]:
    from catalog.signing import decode_statement_unverified, load_entry

    predicate = decode_statement_unverified(load_entry(entry)).get("predicate") or {}
    return predicate.get("model_id"), predicate.get("runtime_id")


def _run_identity(root: HitchRoot, run_id: str) -> tuple[str | None, str | None]:
    from harness.run_ref import read_ref

    ref = read_ref(root.runs / run_id)
    return ref.model_id, ref.runtime_id


@app.command("export", help="write a run's, an evaluation's or a signed entry's evidence into one tar")
@cli_command
def export_cmd(
    subject: Annotated[str, typer.Argument(help="a run id, an evaluation id, or a path to ENTRY.dsse.json")],
    out: Annotated[Path, typer.Option("--out", help="the tar to write")],
    kind: Annotated[str | None, typer.Option("--kind", help="run | evaluation | entry (default: what SUBJECT names)")] = None,
    common: Common = COMMON,
) -> None:
    from harness.bundle import entry_members, evaluation_members, export_bundle, root_secrets, run_members

    root = common.hroot
    chosen = _kind_of(root, subject, kind)
    model_id = runtime_id = None
    if chosen == "run":
        members = run_members(root, subject)
        model_id, runtime_id = _run_identity(root, subject)
        name = subject
    elif chosen == "evaluation":
        members = evaluation_members(root, subject)
        name = subject
    else:
        entry = Path(subject)
        members = entry_members(entry)
        model_id, runtime_id = _entry_identity(entry)
        name = entry.name
    manifest = export_bundle(
        chosen,  # type: ignore[arg-type]  # one of _KINDS (checked in _kind_of)
        name,
        members,
        out,
        secrets=root_secrets(root),
        model_id=model_id,
        runtime_id=runtime_id,
    )
    payload = {"kind": "bundle-export", "path": str(out), "manifest": manifest.to_json_dict()}
    emit(common.as_json, payload, f"{chosen} {name}: {len(manifest.files)} file(s) in {out}")


def _verify_entry(files: dict[str, bytes], bundle: Any, keys: list[Path]) -> dict[str, Any]:
    from catalog.evidence import verify_evidence
    from catalog.signing import load_entry, verify_envelope

    names = [n for n in files if n.startswith("entry/") and n.count("/") == 1 and n.endswith(".dsse.json")]
    if len(names) != 1:
        raise HitchError("bundle_invalid", "an entry bundle holds exactly one entry/*.dsse.json", {"entries": names})
    with tempfile.TemporaryDirectory(prefix="hitch-bundle-") as tmp:
        bundle.extract("entry/", Path(tmp))
        try:
            verified = verify_envelope(load_entry(Path(tmp) / names[0].removeprefix("entry/")), keys)
        except HitchError as exc:
            raise HitchError("bundle_invalid", f"the entry does not verify: {exc.message}", exc.details) from exc
        named = verified.predicate.get("evidence") or {}
        checked = 0
        if named:
            try:
                checked = verify_evidence(named, Path(tmp) / "evidence")
            except HitchError as exc:
                raise HitchError("bundle_invalid", f"the entry's evidence: {exc.message}", exc.details) from exc
    return {"keyid": verified.keyid, "level": verified.predicate.get("level"), "evidence_verified": checked}


@app.command(
    "verify", help="check a bundle offline: every member by digest, runs against their sealed refs, an entry's signature"
)
@cli_command
def verify_cmd(
    path: Annotated[Path, typer.Argument(help="a bundle tar (hitch bundle export)")],
    keys: opt.TrustedKeys = None,
    common: Common = COMMON,
) -> None:
    from catalog.signing import trusted_keys_dir
    from harness.bundle import check_runs, read_bundle

    bundle = read_bundle(path)
    manifest = bundle.manifest
    runs = check_runs(bundle)
    entry = (
        _verify_entry(bundle.files, bundle, list(keys) if keys else [trusted_keys_dir()]) if manifest.kind == "entry" else None
    )
    payload = {
        "kind": "bundle-verify",
        "path": str(path),
        "verified": True,
        "bundle_kind": manifest.kind,
        "subject": manifest.subject,
        "files": len(manifest.files),
        "runs_checked": runs,
        "entry": entry,
        "model_id": manifest.model_id,
        "runtime_id": manifest.runtime_id,
    }
    human = f"verified: {manifest.kind} {manifest.subject}, {len(manifest.files)} file(s), {len(runs)} run(s) against their refs"
    if entry is not None:
        human += f"; entry signed by {entry['keyid']} ({entry['level']}), {entry['evidence_verified']} evidence file(s)"
    emit(common.as_json, payload, human)
