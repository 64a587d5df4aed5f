"""Engine fixtures of the parity suite: the fake and real SGLang, same checkpoint, same flags.

Each engine is started at most once per session (real SGLang needs ~30 s and ~2 GB) and always stopped in
teardown (SIGTERM to its process group, then SIGKILL). Every test of this package carries
``xdist_group("sglang")``: run with ``pytest -n auto --dist loadgroup`` and all of them land on one worker,
so real SGLang is started once per run, not once per worker.

Real SGLang comes from the installed ``sglang-0.5.23-cpu-generic`` runtime under HITCH_ROOT. When it is
not installed its tests skip, unless ``HITCH_REQUIRE_SGLANG=1`` (CI), which turns that into a failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from certify.kit.engines import CPU_GENERIC_RUNTIME, sglang_command
from fixtures.engine_process import EngineProcess
from fixtures.fake_sglang.parity_engines import EngineCommand, fake_command, launch_engine
from harness.errors import HitchError
from harness.paths import HitchRoot
from tests.components import missing
from tests.parity.probes import ProbeCache

API_KEY = "sk-parity-api"
ADMIN_KEY = "sk-parity-admin"
REAL_READY_TIMEOUT_S = 240.0

SGLANG = [pytest.mark.needs_sglang, pytest.mark.integration]
ENGINES = [pytest.param("fake", id="fake"), pytest.param("sglang", id="sglang", marks=SGLANG)]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    engine_tests = Path(__file__).with_name("test_parity.py")
    for item in items:
        if Path(str(item.path)) == engine_tests:
            item.add_marker(pytest.mark.xdist_group("sglang"))
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def parity_checkpoint(tiny_model: Path) -> Path:
    return tiny_model


def require_sglang() -> EngineCommand:
    """The real engine's command, or skip (fail under HITCH_REQUIRE_SGLANG=1) with the reason."""
    try:
        command = sglang_command()
        where = HitchRoot.at().path
        reason = f"runtime {CPU_GENERIC_RUNTIME} is not installed under {where} (hitch runtime install {CPU_GENERIC_RUNTIME})"
    except HitchError as exc:
        command, reason = None, f"runtime {CPU_GENERIC_RUNTIME} is unusable: {exc.code}: {exc.message}"
    if command is not None:
        return command
    missing("sglang", reason)


def _serve(command: EngineCommand, checkpoint: Path, logs: Path, timeout: float) -> Iterator[EngineProcess]:
    engine = launch_engine(command, checkpoint, logs, API_KEY, ADMIN_KEY, ready_timeout_s=timeout)
    try:
        yield engine
    finally:
        engine.stop()


@pytest.fixture(scope="session")
def fake_engine(parity_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    yield from _serve(fake_command(), parity_checkpoint, tmp_path_factory.mktemp("fake-logs"), 30.0)


@pytest.fixture(scope="session")
def sglang_engine(parity_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineProcess]:
    command = require_sglang()
    yield from _serve(command, parity_checkpoint, tmp_path_factory.mktemp("sglang-logs"), REAL_READY_TIMEOUT_S)


@pytest.fixture(scope="session")
def fake_answers(fake_engine: EngineProcess) -> ProbeCache:
    return ProbeCache(fake_engine)


@pytest.fixture(scope="session")
def sglang_answers(sglang_engine: EngineProcess) -> ProbeCache:
    return ProbeCache(sglang_engine)


@pytest.fixture(params=ENGINES)
def answers(request: pytest.FixtureRequest) -> ProbeCache:
    """The probe answers of one engine (parametrized: fake, sglang)."""
    cache: ProbeCache = request.getfixturevalue(f"{request.param}_answers")
    return cache


@pytest.fixture
def engine(answers: ProbeCache) -> EngineProcess:
    return answers.engine
