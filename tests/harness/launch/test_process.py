"""The process launcher with real processes: no shell, own group, exact env, redacted 0600 log, full stop."""

from __future__ import annotations

import asyncio
import os
import stat
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from fixtures.process_faults import pid_alive
from harness.contracts.lock import ResourceVectorV1
from harness.contracts.service import ProcessIdentityV1
from harness.engine.launch_spec import LaunchSpec
from harness.engine.redaction import secret_values
from harness.launch.process import ProcessEngine, ProcessLauncher, is_our_process, live_group_members

pytestmark = pytest.mark.integration

SECRET = "hek-" + "5" * 48
# A leader that forks two children (like SGLang's scheduler and detokenizer), prints, then waits.
FAMILY = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    mode = sys.argv[1]
    if mode == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    kids = [subprocess.Popen([sys.executable, "-c", stubborn]) for _ in range(2)]
    print("argv:", sys.argv[1:], flush=True)
    print("kids:", " ".join(str(k.pid) for k in kids), flush=True)
    print("secret", open(sys.argv[2]).read().split(": ")[1].strip(), flush=True)
    if mode == "exit":
        sys.exit(7)
    def term(*_):
        for k in kids:
            k.kill()
        sys.exit(0)
    if mode != "ignore-term":
        signal.signal(signal.SIGTERM, term)
    time.sleep(600)
    """
)


def _spec(tmp_path: Path, mode: str, env: dict[str, str] | None = None) -> LaunchSpec:
    secret_file = tmp_path / "private" / "engine-config.yaml"
    secret_file.parent.mkdir(exist_ok=True)
    secret_file.write_text(f'api-key: "{SECRET}"\n')
    return LaunchSpec(
        service_id="svc",
        epoch=1,
        inference_id="sha256:" + "0" * 64,
        argv=[sys.executable, "-c", FAMILY, mode, str(secret_file), "$(touch pwned)"],
        env=env if env is not None else {"PATH": "/usr/bin:/bin", "MARKER": "only-this"},
        host="127.0.0.1",
        port=1,
        model_dir=tmp_path,
        log_path=tmp_path / "svc" / "engine.log",
        device="cpu",
        resources=ResourceVectorV1(cpu_cores=1, memory_bytes=0, shm_bytes=0, gpu_count=0, gpu_memory_bytes=0, disk_bytes=0),
        secret_files={str(secret_file): secret_file},
    )


async def _wait_for_line(path: Path, prefix: str) -> str:
    for _ in range(400):
        for line in path.read_text().splitlines() if path.exists() else []:
            if line.startswith(prefix):
                return line
        await asyncio.sleep(0.025)
    raise AssertionError(f"no line {prefix!r} in {path}")


async def _started(tmp_path: Path, mode: str, env: dict[str, str] | None = None) -> tuple[ProcessEngine, list[int]]:
    engine = await ProcessLauncher().start(_spec(tmp_path, mode, env))
    kids = [int(p) for p in (await _wait_for_line(engine.spec.log_path, "kids:")).split()[1:]]
    await _wait_for_line(engine.spec.log_path, "secret")
    return engine, kids


def test_stop_takes_the_whole_group_down(tmp_path: Path) -> None:
    async def run() -> None:
        engine, kids = await _started(tmp_path, "serve")
        assert os.getpgid(engine.pid) == engine.pid  # its own session and group
        assert set(kids) <= set(live_group_members(engine.pid))
        assert await engine.poll() is None
        exit_info = await engine.stop(5.0)
        assert exit_info.exit_code == 0 and not exit_info.oom and not exit_info.escalated
        assert live_group_members(engine.pid) == []
        assert not any(pid_alive(k) for k in kids)
        assert await engine.stop(5.0) == exit_info  # idempotent

    asyncio.run(run())


def test_sigkill_after_the_grace_period(tmp_path: Path) -> None:
    async def run() -> None:
        engine, kids = await _started(tmp_path, "ignore-term")
        exit_info = await engine.stop(0.5)
        assert exit_info.exit_code == -9 and "SIGKILL" in exit_info.reason
        assert exit_info.escalated  # the grace ran out: recorded, not hidden
        assert live_group_members(engine.pid) == []
        assert not any(pid_alive(k) for k in kids)

    asyncio.run(run())


def test_exit_code_env_argv_and_redacted_private_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "do-not-pass")

    async def run() -> None:
        engine, _ = await _started(tmp_path, "serve")
        environ = Path(f"/proc/{engine.pid}/environ").read_bytes().split(b"\0")
        assert sorted(e for e in environ if e) == [b"MARKER=only-this", b"PATH=/usr/bin:/bin"]
        cmdline = Path(f"/proc/{engine.pid}/cmdline").read_bytes()
        assert SECRET.encode() not in cmdline
        await engine.stop(5.0)

        (tmp_path / "b").mkdir()
        exiting = await ProcessLauncher().start(_spec(tmp_path / "b", "exit"))
        while (info := await exiting.poll()) is None:
            await asyncio.sleep(0.02)
        assert info.exit_code == 7 and not info.oom
        await exiting.stop(1.0)

    asyncio.run(run())
    log = tmp_path / "svc" / "engine.log"
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    text = log.read_text()
    assert SECRET not in text
    assert 'secret "<redacted>"' in text
    assert "'$(touch pwned)'" in text and not (tmp_path / "pwned").exists()  # argv reached it verbatim, no shell


def test_is_our_process_refuses_a_reused_pid(tmp_path: Path) -> None:
    async def run() -> ProcessIdentityV1:
        engine, _ = await _started(tmp_path, "serve")
        identity = engine.identity
        assert identity.pid == engine.pid and identity.start_time is not None
        assert is_our_process(identity)
        reused = identity.model_copy(update={"start_time": identity.start_time - 3600})
        assert not is_our_process(reused)
        await engine.stop(5.0)
        return identity

    identity = asyncio.run(run())
    assert not is_our_process(identity)  # gone
    assert not is_our_process(ProcessIdentityV1(launcher="process", pid=os.getpid(), start_time=1.0))
    assert not is_our_process(ProcessIdentityV1(launcher="process", pid=None, start_time=None))


def test_secret_values_reads_yaml_lines_and_bare_values(tmp_path: Path) -> None:
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text(f'# comment\napi-key: "{SECRET}"\nshort: x\n')
    bare = tmp_path / "k"
    bare.write_text("hak-" + "9" * 40 + "\n")
    assert secret_values({"a": yaml_file, "b": bare, "c": tmp_path / "missing"}) == ["hek-" + "5" * 48, "hak-" + "9" * 40]


def test_the_engine_and_its_children_run_on_the_leased_cores_only(tmp_path: Path) -> None:
    leased = (sorted(os.sched_getaffinity(0))[-1],)  # one core: a strict subset wherever there are two or more

    async def run() -> None:
        engine = await ProcessLauncher().start(replace(_spec(tmp_path, "serve"), cpu_cores=leased))
        kids = [int(p) for p in (await _wait_for_line(engine.spec.log_path, "kids:")).split()[1:]]
        try:
            for pid in (engine.pid, *kids):
                assert os.sched_getaffinity(pid) == set(leased), pid
        finally:
            await engine.stop(5.0)

    asyncio.run(run())
