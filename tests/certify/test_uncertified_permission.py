"""A certify session on a backend the doctor does not certify runs only with ``--allow-uncertified`` (spec §8.1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from certify.options import CertifyOptions, choose_engine
from harness.devices import run_doctor
from harness.paths import HitchRoot

pytestmark = pytest.mark.skipif(
    run_doctor("cpu").devices["cpu"].certifiable, reason="this machine certifies its CPU: nothing to permit"
)


def _opts(tmp_path: Path, allow: bool, engine: str | None = None) -> CertifyOptions:
    return CertifyOptions(
        device="cpu", engine=engine, runtime=None, launcher=None, model="fixture:tiny", profile="baseline",
        sign_key=None, report_dir=tmp_path / "report", canary=False, root=HitchRoot(tmp_path / "root"),
        allow_uncertified=allow,
    )  # fmt: skip


def test_the_generic_runtime_is_blocked_without_the_permission(tmp_path: Path) -> None:
    chosen = choose_engine(_opts(tmp_path, allow=False))
    assert chosen.engine == "sglang" and chosen.blocked is not None
    assert "--allow-uncertified" in chosen.blocked and "not certifiable" in chosen.blocked


def test_the_permission_runs_it_and_the_choice_says_so(tmp_path: Path) -> None:
    chosen = choose_engine(_opts(tmp_path, allow=True))
    assert chosen.engine == "sglang" and chosen.blocked is None
    assert "uncertified backend allowed (--allow-uncertified)" in chosen.choice_reason


def test_the_fake_engine_needs_no_permission(tmp_path: Path) -> None:
    assert choose_engine(_opts(tmp_path, allow=False, engine="fake")).blocked is None
