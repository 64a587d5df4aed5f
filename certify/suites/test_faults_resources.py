"""faults (resources: memory): an engine killed for memory, confirmed by the kernel (a container over its limit) or not.

- ``memory_growth``: a kill the kernel did not confirm as an OOM (a process outside a memory cgroup we own; a
  container killed from outside, no ``oom`` event) must be reported as ``inference_process_exited``, never
  ``inference_oom``. The fake grows its memory and is SIGKILLed as the OOM killer would; real SGLang is
  SIGKILLed the same way (its memory cannot be made to grow from outside): its process group, or its container.
- ``oom.container_limit``: a container over its memory limit is OOM-killed by the kernel and reported as
  ``inference_oom`` (needs Docker; without it this non-required check is skipped).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from certify.kit.daemon import PrivateDaemon
from certify.kit.faults import (
    IDLE_GROUP_KILL,
    MODE_CHECKS,
    assert_crashed,
    failed_event,
    fault_kind,
    fault_summary,
    sealed_inference_id,
    service_failure_code,
)
from certify.kit.probes import wait_until
from certify.registry import check
from certify.session import fake_engine_image
from harness.docker_engine import docker_client
from harness.errors import HitchError

_fault_kind = fault_kind("memory")


@pytest.fixture
def pdaemon(private_daemon: PrivateDaemon) -> Iterator[PrivateDaemon]:
    yield private_daemon


@check(
    MODE_CHECKS["memory_growth"],
    description="a memory hog killed by SIGKILL is process_exited (OOM unconfirmed); SGLang: its group SIGKILLed",
    summary=fault_summary,
)
def test_memory_growth(pdaemon: PrivateDaemon, certify_record: Any) -> None:
    shared = pdaemon.shared.pop(IDLE_GROUP_KILL, None) if pdaemon.fake is None else None
    if shared is not None:  # exit_after_seconds already SIGKILLed an idle real engine's group: the same fault
        certify_record.detail("same_kill_as", "faults.exit_after_seconds.idle_death")
        certify_record.detail("failed_event", shared["failed_event"])
        certify_record.detail("client", {"next_request": 403, "code": "inference_binding_revoked"})
        record = pdaemon.record(shared["service_id"])
        assert record is not None and record.state in ("failed", "stopped") and record.epoch == shared["epoch"]
        assert shared["failed_event"].get("code") == "inference_process_exited"
        return
    warm = pdaemon.runs.get(str(pdaemon.shared.pop("warm_run_id", None)))
    run = warm if warm is not None else pdaemon.create_run()
    engine = pdaemon.engine_target(run.service_id)
    assert engine is not None
    if pdaemon.fake is not None:
        before = engine.memory_bytes()
        pdaemon.fake.faults("memory_growth:mb_per_s=128")
        wait_until(lambda: engine.memory_bytes() > before + (96 << 20), 20.0, what="memory growth")
        certify_record.detail("rss_growth_mib", (engine.memory_bytes() - before) >> 20)
        t_fault = time.monotonic()
        engine.kill(leader_only=True)  # what the kernel's OOM killer does to a process outside a memory cgroup we own
    else:
        certify_record.detail("rss_mib", engine.memory_bytes() >> 20)
        t_fault = time.monotonic()
        engine.kill()
    details = assert_crashed(pdaemon, run, engine, "inference_process_exited")
    certify_record.detail("failed_event", details)
    certify_record.detail("client", {"next_request": 403, "code": "inference_binding_revoked"})
    certify_record.detail("recovery_ms", round((time.monotonic() - t_fault) * 1000, 1))
    assert details.get("code") != "inference_oom"


# below what real SGLang's server process needs just to import its stack (well over 1 GiB resident)
REAL_ENGINE_OOM_LIMIT = 384 << 20


def _stop_live_services(daemon: PrivateDaemon) -> list[str]:
    """Stop every service of ``daemon`` that is not stopped or failed (its runs deleted first); their ids."""
    live = [
        str(svc["service_id"])
        for svc in daemon.client().services().get("services", [])
        if svc.get("state") not in ("stopped", "failed")
    ]
    for service_id in live:
        daemon.stop_service(service_id)
    return live


@check(
    "faults.oom.container_limit",
    required=False,
    description="a container over its memory limit is OOM-killed and reported as inference_oom (needs Docker; "
    "real SGLang when the session runs its image, else the fake engine image)",
    summary=fault_summary,
)
def test_oom_container_limit(private_daemon: PrivateDaemon, certify_record: Any) -> None:
    pdaemon = private_daemon

    try:
        docker_client()  # answers a missing or refusing socket without the SDK (which leaks the socket)
    except HitchError as exc:
        pytest.skip(f"needs a reachable Docker engine: {exc.message}")
    # a session of real SGLang in a container (its pinned image) is OOM-killed for real: the server's own
    # imports (torch, transformers) outgrow the limit; otherwise the fake engine image grows on purpose
    real = pdaemon.engine == "sglang" and pdaemon.body.get("launcher") == "oci"
    flags: tuple[str, ...] = ()
    if real:
        image = str(pdaemon.body["image"])
        memory, wait_s = REAL_ENGINE_OOM_LIMIT, 300.0
    else:
        try:
            image = fake_engine_image(pdaemon.root.certify)
        except HitchError as exc:
            pytest.skip(exc.message)
        memory, flags, wait_s = 256 << 20, ("--fault", "memory_growth:mb_per_s=256"), 60.0
    certify_record.detail("engine", "sglang" if real else "fake")
    certify_record.detail("memory_limit_bytes", memory)
    # every live service of the private daemon (the warm one kept for the lifecycle suite, which makes a new one
    # when it is gone; anything an earlier check left) holds cores and memory the ledger would make this one wait
    # for on a small machine: stop them all first
    pdaemon.shared.pop("warm_run_id", None)
    held = _stop_live_services(pdaemon)
    certify_record.detail("services_stopped_first", held)
    lock = pdaemon.sealed_lock(sealed_inference_id(pdaemon))
    small = pdaemon.seal_variant(lock, resources={"memory_bytes": memory, "shm_bytes": 64 << 20, "cpu_cores": 1})
    t0 = time.monotonic()
    try:
        run = pdaemon.create_run(
            inference_id=small.inference_id,
            engine="sglang" if real else "fake",
            launcher="oci",
            image=image,
            fake_flags=list(flags),
        )
    except HitchError as err:  # killed while starting, or between ready and the run's registration
        certify_record.detail("create_error", err.code)
        code = service_failure_code(pdaemon, small.inference_id, wait_s) or err.code
    else:
        code = str(failed_event(pdaemon, run.service_id, run.epoch, wait_s).get("code"))
        pdaemon.runs.pop(run.run_id, None)
    certify_record.detail("code", code)
    certify_record.detail("client", {"code": code})
    certify_record.detail("recovery_ms", round((time.monotonic() - t0) * 1000, 1))
    assert code == "inference_oom"
