"""Engine logs are redacted by one function on both launchers, with the key lines SGLang 0.5.23 really prints.

``data/sglang-0.5.23-server-args.log`` is the ``server_args={...}`` start-up line of a real SGLang 0.5.23
run here (``sglang/srt/entrypoints/engine.py``: ``logger.info(f"server_args={...resolved_dict()}")``), its
two keys replaced by placeholders. An engine program reads the keys from its secret config file (as SGLang
reads ``--config``) and prints that line, the ``ServerArgs(...)`` repr form and the ``launch_command`` form;
under the process launcher and in a container (the fake engine image; skipped without Docker unless
``HITCH_REQUIRE_DOCKER=1``) the log on disk holds no key and keeps every other field.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from harness.contracts.lock import ResourceVectorV1
from harness.engine.launch_spec import LaunchedEngine, LaunchSpec
from harness.engine.redaction import REDACTED, LineRedactor, redact_text
from harness.launch.oci import OciLauncher, remove_owned
from harness.launch.process import ProcessLauncher
from tests.harness.docker_support import docker_client_or_skip, fake_image_id

DATA = Path(__file__).resolve().parents[1] / "engine" / "data" / "sglang-0.5.23-server-args.log"
API_KEY = "hek-" + "Zq3" * 14
ADMIN_KEY = "hak-" + "Wm7" * 14
MiB = 1024 * 1024
CONFIG_INSIDE = "/run/hitch/engine-config.yaml"

# prints what SGLang prints at start-up, with the keys it read from its config file; then stays up, as an
# engine does, until stopped (a container that exits at once may be gone before the launcher reads its address)
PRINTER = textwrap.dedent(
    """
    import signal, sys, time
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    template, config = sys.argv[1], sys.argv[2]
    keys = dict(line.split(": ", 1) for line in open(config).read().splitlines())
    api, admin = keys["api-key"].strip('"'), keys["admin-api-key"].strip('"')
    line = open(template).read().replace("@API_KEY@", api).replace("@ADMIN_API_KEY@", admin)
    sys.stdout.write(line)
    print(f"[2026-12-01 16:34:38] ServerArgs(model_path='/m', api_key={api!r}, admin_api_key={admin!r}, port=30000)")
    print(f"launch_command: python -m sglang.launch_server --api-key {api} --admin-api-key={admin} --port 30000")
    sys.stdout.flush()
    time.sleep(600)
    """
)


def _lines() -> str:
    text = DATA.read_text()
    return text.replace("@API_KEY@", API_KEY).replace("@ADMIN_API_KEY@", ADMIN_KEY)


def _assert_redacted(text: str) -> None:
    assert API_KEY not in text and ADMIN_KEY not in text
    assert API_KEY[:12] not in text and ADMIN_KEY[:12] not in text  # not even a fragment split at a chunk edge
    assert f"'api_key': '{REDACTED}', 'admin_api_key': '{REDACTED}'" in text
    assert "'ssl_keyfile_password': None" in text  # an unset secret stays what it is
    assert "'served_model_name': 'local-b88d1916e8d1'" in text and "'max_total_tokens':" in text


def test_the_real_sglang_line_is_redacted_by_name_even_without_the_known_keys() -> None:
    text = _lines()
    assert API_KEY in text and ADMIN_KEY in text
    _assert_redacted(redact_text(text))
    _assert_redacted(redact_text(text, (API_KEY, ADMIN_KEY)))


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (f"ServerArgs(api_key='{API_KEY}', port=1)", f"ServerArgs(api_key='{REDACTED}', port=1)"),
        (
            f'{{"admin_api_key": "{ADMIN_KEY}", "max_total_tokens": 9}}',
            f'{{"admin_api_key": "{REDACTED}", "max_total_tokens": 9}}',
        ),
        (
            f"--api-key {API_KEY} --admin-api-key={ADMIN_KEY} --port 1",
            f"--api-key {REDACTED} --admin-api-key={REDACTED} --port 1",
        ),
        (f"SGLANG_API_KEY={API_KEY} other", f"SGLANG_API_KEY={REDACTED} other"),
        ("api_key=None, tokenizer_path='/t', max_total_tokens=2048", "api_key=None, tokenizer_path='/t', max_total_tokens=2048"),
        ("    token = Path(args.token_file).read_text()", "    token = Path(args.token_file).read_text()"),
    ],
)
def test_named_forms(line: str, expected: str) -> None:
    assert redact_text(line) == expected


def test_line_redactor_never_splits_a_key_across_writes() -> None:
    data = _lines().encode()
    for step in (1, 7, 4096):
        redactor = LineRedactor((API_KEY, ADMIN_KEY))
        out = b"".join(redactor.feed(data[i : i + step]) for i in range(0, len(data), step)) + redactor.finish()
        _assert_redacted(out.decode())


# -- both launchers ------------------------------------------------------------------------------------


def _spec(tmp_path: Path, argv0: list[str], *, image: str | None, secret_inside: str | None) -> LaunchSpec:
    model_dir = tmp_path / "model"
    model_dir.mkdir(exist_ok=True)
    (model_dir / "template.log").write_text(DATA.read_text())
    (model_dir / "printer.py").write_text(PRINTER)
    config = tmp_path / "private" / "engine-config.yaml"
    config.parent.mkdir(exist_ok=True)
    config.write_text(f'api-key: "{API_KEY}"\nadmin-api-key: "{ADMIN_KEY}"\n')
    config.chmod(0o600)
    seen_config = secret_inside or str(config)
    return LaunchSpec(
        service_id=f"svc-{tmp_path.name}"[:60],
        epoch=1,
        inference_id="sha256:" + "cd" * 32,
        argv=[*argv0, str(model_dir / "printer.py"), str(model_dir / "template.log"), seen_config],
        env={},
        host="127.0.0.1",
        port=30000,
        model_dir=model_dir,
        log_path=tmp_path / "logs" / "engine.log",
        device="cpu",
        resources=ResourceVectorV1(
            cpu_cores=1, memory_bytes=256 * MiB, shm_bytes=64 * MiB, gpu_count=0, gpu_memory_bytes=0, disk_bytes=0
        ),
        image=image,
        secret_files={seen_config: config},
    )


async def _run_until_logged(engine: LaunchedEngine, log: Path) -> str:
    """Wait for the printer's last line in the log, then stop the engine; the log as it stands after the stop."""
    for _ in range(1200):
        if "launch_command" in (log.read_text() if log.exists() else ""):
            break
        assert await engine.poll() is None, "the printer exited before its lines reached the log"
        await asyncio.sleep(0.05)
    await engine.stop(10.0)
    return log.read_text()


@pytest.mark.integration
def test_process_launcher_log_is_redacted(tmp_path: Path) -> None:
    spec = _spec(tmp_path, [sys.executable], image=None, secret_inside=None)

    async def body() -> str:
        engine = await ProcessLauncher().start(spec)
        return await _run_until_logged(engine, spec.log_path)

    text = asyncio.run(body())
    _assert_redacted(text)
    assert f"api_key='{REDACTED}'" in text and f"--admin-api-key={REDACTED}" in text
    assert spec.log_path.stat().st_mode & 0o777 == 0o600


@pytest.fixture
def docker_client() -> Iterator[docker.DockerClient]:
    c = docker_client_or_skip()
    yield c
    c.close()


@pytest.mark.integration
@pytest.mark.needs_docker
def test_oci_launcher_log_is_redacted(
    tmp_path: Path, docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> None:
    image = fake_image_id(tmp_path_factory)
    root = tmp_path / "root"
    root.mkdir()
    spec = _spec(tmp_path, ["python3"], image=image, secret_inside=CONFIG_INSIDE)

    async def body() -> str:
        engine = await OciLauncher(root, client=docker_client).start(spec)
        return await _run_until_logged(engine, spec.log_path)

    try:
        text = asyncio.run(body())
    finally:
        remove_owned(root, timeout_s=0, client=docker_client)
    _assert_redacted(text)
    assert f"api_key='{REDACTED}'" in text and f"--admin-api-key={REDACTED}" in text
    assert spec.log_path.stat().st_mode & 0o777 == 0o600
