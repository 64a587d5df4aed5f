"""hardware: the engine really runs on the requested device, and the machine is recorded.

A CPU run must hold no GPU (no allocation in the service record, no CUDA device visible to the engine); a
CUDA run records the GPU UUID from the service's device lease and NVML, shows through NVML that the engine's
processes hold memory on that GPU and on no other, runs the lock's KV pool, memory fraction and CUDA graph
settings, and serves requests at concurrency 1 and 8. A run that asked for cuda on a machine without a usable
GPU fails closed before any suite (``certify.options``), and a lock that does not fit the GPU is refused
before an engine starts (``harness.service.gpu_leases``): never a silent CPU run.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from certify.kit.probes import session_service
from certify.kit.white_box import NvmlGpuInventory, expected_server_info, processes_by_gpu, run_doctor, server_info_mismatches
from certify.registry import check
from certify.session import CertifyEnv
from harness.app.inventory import model_files
from harness.app.locks import sealed_lock
from harness.contracts.lock import CudaPlatformV1


def _server_info(env: CertifyEnv) -> dict[str, Any]:
    r = httpx.get(env.engine_url + "/server_info", headers=env.engine_headers(), timeout=30)
    assert r.status_code == 200, r.text[:300]
    info = r.json()
    assert isinstance(info, dict)
    return info


def _service_record(env: CertifyEnv) -> dict[str, Any]:
    record = session_service(env)
    assert record is not None, "the service has no record"
    return record.model_dump(mode="json")


@check(
    "hardware.server_info.device",
    description="the engine's own /server_info names the requested device",
    summary=lambda d: f"the engine's own /server_info reports device {d['server_info.device']}",
)
def test_server_info_device(certify_env: CertifyEnv, certify_record: Any) -> None:
    info = _server_info(certify_env)
    certify_record.detail("server_info.device", info.get("device"))
    assert info.get("device") == certify_env.device


@check(
    "hardware.service.allocation",
    description="the service record's device allocation matches the request",
    summary=lambda d: (
        f"the service record allocates device {d['allocation']['device']}, cores {d['allocation']['cpu_cores']}, "
        + (f"GPU {d['allocation']['gpu_uuid']}" if d["allocation"]["gpu_uuid"] else "no GPU")
    ),
)
def test_service_allocation(certify_env: CertifyEnv, certify_record: Any) -> None:
    record = _service_record(certify_env)
    allocation = record["allocation"]
    certify_record.detail("allocation", allocation)
    assert allocation["device"] == certify_env.device
    if certify_env.device == "cpu":
        assert allocation["gpu_uuid"] is None
    else:
        assert isinstance(allocation["gpu_uuid"], str) and allocation["gpu_uuid"].startswith("GPU-")


@check(
    "hardware.cpu.no_gpu_visible",
    devices=("cpu",),
    description="a CPU engine sees no CUDA device",
    summary="the CPU engine sees no CUDA device (CUDA_VISIBLE_DEVICES={CUDA_VISIBLE_DEVICES!r})",
)
def test_cpu_engine_sees_no_gpu(certify_env: CertifyEnv, certify_record: Any) -> None:
    record = _service_record(certify_env)
    process = record.get("process") or {}
    if process.get("launcher") == "oci":
        import docker

        container = docker.from_env().containers.get(process["container_id"])
        host_config = container.attrs["HostConfig"]
        certify_record.detail("device_requests", host_config.get("DeviceRequests"))
        assert not host_config.get("DeviceRequests"), "a CPU container was given a device request"
        return
    import psutil

    environ = psutil.Process(int(process["pid"])).environ()
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    certify_record.detail("CUDA_VISIBLE_DEVICES", visible)
    assert visible is not None and visible.strip() in ("", "-1"), f"CUDA_VISIBLE_DEVICES={visible!r} for a CPU engine"


@check(
    "hardware.cuda.gpu_recorded",
    devices=("cuda",),
    description="GPU UUID in the lease matches NVML",
    summary="the engine runs on GPU {gpu_uuid} and /server_info reports device {server_info[device]}",
)
def test_cuda_gpu_recorded(certify_env: CertifyEnv, certify_record: Any) -> None:
    record = _service_record(certify_env)
    uuid = record["allocation"]["gpu_uuid"]
    gpus = [g.get("uuid") for g in run_doctor("cuda").cuda.model_dump(mode="json").get("gpus", [])]
    info = _server_info(certify_env)
    certify_record.detail("gpu_uuid", uuid)
    certify_record.detail("server_info", {k: info.get(k) for k in ("device", "mem_fraction_static", "attention_backend")})
    assert uuid in gpus


@check(
    "hardware.lock.served",
    description="the engine serves the sealed lock (its /server_info against the lock); the lock is kept as evidence",
    summary=lambda d: (
        f"the engine's /server_info matches the sealed lock {d['inference_id'][:19]} on {len(d['fields_compared'])} "
        "fields; the lock is kept as evidence for a reproduction"
    ),
)
def test_engine_serves_the_sealed_lock(certify_env: CertifyEnv, certify_record: Any) -> None:
    """Readiness compared /server_info with the lock before the run; this records the lock itself (``lock.json``,
    the sealed bytes) so an entry names the exact lock a reproduction must run (``hitch catalog reproduce``),
    and compares again now that the suites run."""
    from urllib.parse import urlsplit

    env = certify_env
    lock = sealed_lock(env.root, env.run.inference_id)
    sealed = env.root.digest_dir(env.root.sealed_locks, lock.inference_id) / "lock.json"
    certify_record.evidence("lock.json", sealed.read_bytes())
    certify_record.detail("inference_id", lock.inference_id)
    port = urlsplit(env.engine_url).port
    assert port is not None, env.engine_url
    expected = expected_server_info(lock, model_files(env.root, lock.model_id), port)
    for placement in ("model_path", "host", "port"):  # where the launcher put it (a container mounts and maps them)
        expected.pop(placement, None)
    mismatches = server_info_mismatches(_server_info(env), expected)
    certify_record.detail("fields_compared", sorted(expected))
    assert not mismatches, mismatches


@check(
    "hardware.doctor.fingerprint",
    description="doctor facts recorded as evidence",
    summary=lambda d: (
        "the doctor's facts are recorded; certifiable here"
        if d["certifiable"]
        else "the doctor's facts are recorded; not certifiable here: " + "; ".join(d["reasons"])
    ),
)
def test_doctor_fingerprint(certify_env: CertifyEnv, certify_record: Any) -> None:
    report = run_doctor(certify_env.device)  # type: ignore[arg-type]
    data = report.model_dump(mode="json")
    certify_record.evidence("doctor.json", json.dumps(data, sort_keys=True).encode())
    verdict = data["devices"][certify_env.device]
    certify_record.detail("certifiable", verdict["certifiable"])
    certify_record.detail("reasons", verdict["reasons"])
    assert data["requested_device"] == certify_env.device


def _engine_pids(record: dict[str, Any]) -> set[int]:
    """The engine's process tree (SGLang's scheduler children hold the GPU memory, not the launcher)."""
    import psutil

    process = record.get("process") or {}
    if process.get("launcher") == "oci":
        import docker

        client = docker.from_env()
        try:
            top = int(client.containers.get(process["container_id"]).attrs["State"]["Pid"])
        finally:
            client.close()
    else:
        top = int(process["pid"])
    return {top, *(child.pid for child in psutil.Process(top).children(recursive=True))}


@check(
    "hardware.cuda.nvml_engine_memory",
    engines=("sglang",),
    devices=("cuda",),
    description="NVML lists the engine's processes holding memory on the leased GPU UUID and on no other GPU",
    summary=lambda d: f"NVML shows the engine's memory on GPU {d['gpu_uuid']} ({len(d['nvml_engine_processes'])} process(es))",
)
def test_cuda_engine_memory_only_on_the_leased_gpu(certify_env: CertifyEnv, certify_record: Any) -> None:
    record = _service_record(certify_env)
    uuid = record["allocation"]["gpu_uuid"]
    facts = NvmlGpuInventory().facts()
    assert facts.available, facts.reason
    held = processes_by_gpu(facts, _engine_pids(record))
    certify_record.detail("gpu_uuid", uuid)
    certify_record.detail("nvml_engine_processes", {u: [list(p) for p in procs] for u, procs in held.items() if procs})
    assert held.get(uuid), f"NVML lists no engine process on the leased GPU {uuid}"
    assert any(used is None or used > 0 for _, used in held[uuid]), "the engine holds no memory on its GPU"
    others = sorted(u for u, procs in held.items() if u != uuid and procs)
    assert not others, f"the engine also uses GPU(s) it was not leased: {others}"


@check(
    "hardware.cuda.kv_pool_and_graphs",
    devices=("cuda",),
    description="the engine's KV pool, memory fraction and CUDA graph settings are the lock's, and recorded",
    summary="the KV pool and CUDA graphs match the lock ({server_info[attention_backend]} attention)",
)
def test_cuda_kv_pool_and_graphs_are_the_locks(certify_env: CertifyEnv, certify_record: Any) -> None:
    lock = sealed_lock(certify_env.root, certify_env.run.inference_id)
    platform = lock.execution.platform
    assert isinstance(platform, CudaPlatformV1)
    info = _server_info(certify_env)
    keys = (
        "max_total_num_tokens",
        "mem_fraction_static",
        "disable_cuda_graph",
        "cuda_graph_max_bs_decode",
        "cuda_graph_backend_decode",
        "attention_backend",
    )
    certify_record.detail("server_info", {k: info.get(k) for k in keys})
    certify_record.detail("lock.cuda_graph", platform.cuda_graph)
    assert info.get("max_total_num_tokens") == lock.execution.max_total_tokens
    assert info.get("mem_fraction_static") == platform.mem_fraction_static
    if platform.cuda_graph == "enabled":
        assert not info.get("disable_cuda_graph"), "the lock enables CUDA graphs; the engine disabled them"
        assert info.get("cuda_graph_max_bs_decode") == lock.execution.max_running_requests
    else:
        assert info.get("cuda_graph_backend_decode") == "disabled"


@check(
    "hardware.cuda.concurrency_1_and_8",
    devices=("cuda",),
    description="chat requests through the gateway succeed at concurrency 1 and 8 (spec 15.3)",
    summary=lambda d: f"requests at concurrency 1 and 8 all answered ({d['rate_limited_retries']} rate-limited retries)",
)
def test_cuda_requests_at_concurrency_1_and_8(certify_env: CertifyEnv, certify_record: Any) -> None:
    import asyncio

    run = certify_env.run
    body = {"model": run.wire_model, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8}

    rate_limited = {1: 0, 8: 0}

    async def one(client: httpx.AsyncClient, concurrency: int) -> tuple[int, str | None]:
        # Beyond the lock's running + queued slots the gateway answers 429 with Retry-After (OpenAI's rate-limit
        # shape); a client honours it and is served in turn — every request must end served.
        for _ in range(600):
            r = await client.post(run.base_url + "/chat/completions", json=body, headers=run.headers(), timeout=600)
            if r.status_code != 429:
                break
            rate_limited[concurrency] += 1
            await asyncio.sleep(float(r.headers.get("Retry-After", "1")))
        choices = r.json().get("choices") if r.status_code == 200 else None
        return r.status_code, (choices[0].get("finish_reason") if choices else None)

    async def at(concurrency: int) -> list[tuple[int, str | None]]:
        async with httpx.AsyncClient() as client:
            return list(await asyncio.gather(*(one(client, concurrency) for _ in range(concurrency))))

    results = {c: asyncio.run(at(c)) for c in (1, 8)}
    certify_record.detail("results", {str(c): r for c, r in results.items()})
    certify_record.detail("rate_limited_retries", {str(c): n for c, n in rate_limited.items()})
    for concurrency, rows in results.items():
        assert [status for status, _ in rows] == [200] * concurrency, f"concurrency {concurrency}: {rows}"
        assert all(reason in ("stop", "length") for _, reason in rows), f"concurrency {concurrency}: {rows}"
