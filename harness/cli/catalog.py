"""`hitch catalog ...`: keygen, sign, verify, list and trust signed catalog entries (catalog.signing).

Outputs name key files and key ids, never key material. Verification is offline: ``--keys DIR``
(repeatable) names the trusted ``<keyid>.pub.pem`` directories, default the checkout's ``catalog/keys/``;
the development key is trusted only when its public directory is passed or copied in with ``trust``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from harness.cli import options as opt
from harness.cli.options import check_path
from harness.cli.output import COMMON, Common, cli_command, emit
from harness.errors import HitchError

app = typer.Typer(no_args_is_help=True, help="catalog commands")
_EVIDENCE_HELP = "also re-hash every evidence file the entry names (report dir or its evidence/)"
_SELECT_HELP = "run and compare only the checks pytest's -k selects (the level is then not compared)"
_REPORT_DIR_HELP = "where the reproduction's entry goes (default reports/out/<stamp>-reproduce)"


def _keys(keys: list[Path] | None) -> list[Path]:
    from catalog.signing import trusted_keys_dir

    return list(keys) if keys else [trusted_keys_dir()]


@app.command("keygen")
@cli_command
def keygen(
    out: Annotated[Path | None, typer.Option("--out", help="private key file to create (default: the dev key)")] = None,
    force: Annotated[bool, typer.Option("--force", help="replace an existing key at --out")] = False,
    common: Common = COMMON,
) -> None:
    """Create an Ed25519 key (0600) and export its public half to <dir>/public/<keyid>.pub.pem.

    Without --out: the development key under HITCH_ROOT, created only if absent."""
    from catalog.signing import dev_key_pair, generate_key

    pair = generate_key(out, force=force) if out is not None else dev_key_pair(common.hroot)
    payload = pair.to_dict()
    human = (
        f"{'created' if pair.created else 'exists'}: {pair.private_key} (keyid {pair.keyid})\n"
        f"public key: {pair.public_key}\n"
        f"verify its entries with --keys {pair.public_key.parent}, or trust it: hitch catalog trust {pair.public_key}"
    )
    emit(common.as_json, payload, human)


def _parse_subjects(items: list[str]) -> dict[str, str]:
    subjects: dict[str, str] = {}
    for item in items:
        name, sep, digest = item.partition("=")
        if not sep or not name or name in subjects:
            raise HitchError("catalog_entry_invalid", f"--subject wants NAME=sha256:<hex>, each name once: {item[:100]!r}")
        subjects[name] = digest
    return subjects


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise HitchError("catalog_entry_invalid", f"cannot read {path}: {exc.strerror}", {"path": str(path)}) from None
    except ValueError:
        raise HitchError("catalog_entry_invalid", f"{path} is not JSON", {"path": str(path)}) from None


@app.command("sign")
@cli_command
def sign(
    source: Annotated[Path, typer.Argument(help="predicate JSON (DESIGN §6), or a whole in-toto statement")],
    subject: Annotated[
        list[str] | None,
        typer.Option(
            "--subject", help="NAME=sha256:<hex> (repeatable; default: runtime/model/inference_lock from the predicate)"
        ),
    ] = None,
    key: Annotated[Path | None, typer.Option("--key", help="Ed25519 private key (default: the dev key)")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="entry dir (default: <HITCH_ROOT>/catalog/entries)")] = None,
    common: Common = COMMON,
) -> None:
    """Sign a predicate (or statement) into a DSSE envelope and write it as <...>.dsse.json."""
    from catalog.signing import (
        STATEMENT_TYPE,
        build_statement,
        describe_key,
        dev_key_pair,
        root_entries_dir,
        sign_envelope,
        subjects_from_predicate,
        write_entry,
    )

    hroot = common.hroot
    document = _read_json(source)
    if isinstance(document, dict) and "_type" in document and document.get("_type") == STATEMENT_TYPE:
        if subject:
            raise HitchError("catalog_entry_invalid", "a statement carries its own subjects; drop --subject")
        statement = document
    else:
        if not isinstance(document, dict):
            raise HitchError("catalog_entry_invalid", f"{source} is not a JSON object")
        subjects = _parse_subjects(subject) if subject else subjects_from_predicate(document)
        statement = build_statement(document, subjects)
    pair = describe_key(key) if key is not None else dev_key_pair(hroot)
    envelope = sign_envelope(statement, pair.private_key)
    path = write_entry(envelope, out if out is not None else root_entries_dir(hroot))
    payload = {
        "entry": str(path),
        "keyid": pair.keyid,
        "public_keys_dir": str(pair.public_key.parent),
        "level": statement["predicate"]["level"],
        "subjects": {s["name"]: "sha256:" + s["digest"]["sha256"] for s in statement["subject"]},
    }
    human = (
        f"signed ({statement['predicate']['level']}): {path}\nverify: hitch catalog verify {path} --keys {pair.public_key.parent}"
    )
    emit(common.as_json, payload, human)


@app.command("verify")
@cli_command
def verify(
    entry: Annotated[Path, typer.Argument(help="a .dsse.json entry")],
    keys: opt.TrustedKeys = None,
    evidence: Annotated[Path | None, typer.Option("--evidence", help=_EVIDENCE_HELP)] = None,
    common: Common = COMMON,
) -> None:
    """Verify an entry offline against trusted public keys; exit 3 (catalog_signature_invalid) if it does not.

    With ``--evidence DIR`` every evidence file the signed predicate names must be in DIR with the signed
    digest (``catalog_evidence_invalid`` names each missing or altered one)."""
    from catalog.evidence import verify_evidence
    from catalog.signing import load_entry, verify_envelope

    check_path(entry)
    if evidence is not None:
        check_path(evidence, "directory")
    verified = verify_envelope(load_entry(entry), _keys(keys))
    predicate = verified.predicate
    checked = None if evidence is None else verify_evidence(predicate.get("evidence") or {}, evidence)
    payload = {
        "entry": str(entry),
        "verified": True,
        "keyid": verified.keyid,
        "level": predicate["level"],
        "subjects": verified.subjects,
        "evidence_verified": checked,
        "predicate": predicate,
    }
    human = (
        f"verified: {entry} (keyid {verified.keyid})\n"
        f"level {predicate['level']}: {predicate.get('runtime_name') or predicate.get('runtime_id') or '-'} x "
        f"{predicate.get('model_id') or '-'} x {predicate.get('device', '-')} x {predicate.get('profile', '-')}"
    )
    if checked is not None:
        human += f"\nevidence: {checked} file(s) re-hashed, all match"
    emit(common.as_json, payload, human)


@app.command("list")
@cli_command
def list_(
    dirs: Annotated[
        list[Path] | None,
        typer.Argument(help="entry dirs (default: catalog/entries and <HITCH_ROOT>/catalog/entries)"),
    ] = None,
    keys: opt.TrustedKeys = None,
    common: Common = COMMON,
) -> None:
    """Every entry with its level, runtime, model, device, profile and whether (or why not) it verified."""
    from catalog.signing import published_entries_dir, root_entries_dir, scan_entries

    directories = list(dirs) if dirs else [published_entries_dir(), root_entries_dir(common.hroot)]
    entries = [check.summary() for check in scan_entries(directories, _keys(keys))]
    lines = [
        f"{'yes' if e['verified'] else 'NO '}  {e['level'] or '-'}  {e['runtime'] or '-'}  {e['model_id'] or '-'}  "
        f"{e['device'] or '-'}  {e['profile'] or '-'}  {e['path']}" + ("" if e["verified"] else f"  ({e['reason']})")
        for e in entries
    ]
    emit(
        common.as_json,
        {"dirs": [str(d) for d in directories], "keys_dirs": [str(k) for k in _keys(keys)], "entries": entries},
        "\n".join(lines) or f"no entries in {', '.join(str(d) for d in directories)}",
    )


@app.command("trust")
@cli_command
def trust(
    public_key: Annotated[Path, typer.Argument(help="an Ed25519 public key PEM (e.g. from `hitch catalog keygen`)")],
    keys: Annotated[Path | None, typer.Option("--keys", help="trusted keys dir (default catalog/keys)")] = None,
    common: Common = COMMON,
) -> None:
    """Copy a public key into a trusted keys dir as <keyid>.pub.pem."""
    from catalog.signing import trust_public_key, trusted_keys_dir

    path = trust_public_key(public_key, keys if keys is not None else trusted_keys_dir())
    emit(common.as_json, {"trusted": str(path), "keyid": path.name.removesuffix(".pub.pem")}, f"trusted: {path}")


@app.command("reproduce")
@cli_command
def reproduce(
    entry: Annotated[Path, typer.Argument(help="the signed entry (*.dsse.json) to reproduce on this machine")],
    keys: opt.TrustedKeys = None,
    select: Annotated[str | None, typer.Option("-k", help=_SELECT_HELP)] = None,
    report_dir: Annotated[Path | None, typer.Option("--report-dir", help=_REPORT_DIR_HELP)] = None,
    sign_key: Annotated[
        Path | None, typer.Option("--sign-key", help="Ed25519 key for the new entry (default: the dev key)")
    ] = None,
    fake_fault: opt.FakeFault = None,
    common: Common = COMMON,
) -> None:
    """Verify the entry, require its model and runtime here by digest, certify its exact lock and profile again,
    and compare level, check outcomes, greedy continuations, logprob gaps and every figure against its margin.

    Exit 0: reproduced; exit 10: differs (every difference listed); exit 11: inconclusive (what would decide it)."""
    import time

    from certify.options import REPO
    from certify.reproduce import reproduce as run_reproduction
    from harness.compare.figures import DIFFERS_EXIT_CODE, INCONCLUSIVE_EXIT_CODE

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = (report_dir or REPO / "reports" / "out" / f"{stamp}-reproduce").expanduser().resolve()
    result = run_reproduction(
        common.hroot, entry, _keys(keys), out, select=select, fake_faults=tuple(fake_fault or ()), sign_key=sign_key
    )
    verdict = result.comparison.verdict
    lines = [f"{verdict}: {entry} on this machine ({result.new_entry})"]
    lines += [f"  - {d.detail}" for d in result.comparison.differences]
    lines += [f"  to decide: {t}" for t in result.comparison.to_decide()]
    if result.comparison.machine:
        causes = result.comparison.causes()
        machine, engine = ", ".join(causes["machine"]) or "none", ", ".join(causes["engine"]) or "none"
        where = "; ".join(result.comparison.machine[:4])
        lines.append(f"  another machine ({where}): the machine's: {machine}; the engine's: {engine}")
    lines += [f"  note: {n}" for n in result.comparison.notes]
    emit(common.as_json, {"kind": "catalog-reproduce", **result.to_json()}, "\n".join(lines))
    if verdict == "differs":
        raise typer.Exit(DIFFERS_EXIT_CODE)
    if verdict == "inconclusive":
        raise typer.Exit(INCONCLUSIVE_EXIT_CODE)
