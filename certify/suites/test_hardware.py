"""hardware: the engine really runs on the requested device, and the machine is recorded.

A CPU run must hold no GPU (no allocation in the service record, no CUDA device visible to the engine); a
CUDA run records the GPU UUID from the service's device lease and NVML, and a run that asked for cuda on a
machine without one fails closed (the session never gets an engine, so every check fails).
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from certify.registry import check
from certify.session import CertifyEnv


def _server_info(env: CertifyEnv) -> dict[str, Any]:
    r = httpx.get(env.engine_url + "/server_info", headers=env.engine_headers(), timeout=30)
    assert r.status_code == 200, r.text[:300]
    info = r.json()
    assert isinstance(info, dict)
    return info


def _service_record(env: CertifyEnv) -> dict[str, Any]:
    from harness.service.state_store import ServiceStateStore

    record = ServiceStateStore(env.root, env.run.service_id).read()
    assert record is not None, "the service has no record"
    return record.model_dump(mode="json")


@check("hardware.server_info.device", description="the engine's own /server_info names the requested device")
def test_server_info_device(certify_env: CertifyEnv, certify_record: Any) -> None:
    info = _server_info(certify_env)
    certify_record.detail("server_info.device", info.get("device"))
    assert info.get("device") == certify_env.device


@check("hardware.service.allocation", description="the service record's device allocation matches the request")
def test_service_allocation(certify_env: CertifyEnv, certify_record: Any) -> None:
    record = _service_record(certify_env)
    allocation = record["allocation"]
    certify_record.detail("allocation", allocation)
    assert allocation["device"] == certify_env.device
    if certify_env.device == "cpu":
        assert allocation["gpu_uuid"] is None
    else:
        assert isinstance(allocation["gpu_uuid"], str) and allocation["gpu_uuid"].startswith("GPU-")


@check("hardware.cpu.no_gpu_visible", devices=("cpu",), description="a CPU engine sees no CUDA device")
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


@check("hardware.cuda.gpu_recorded", devices=("cuda",), description="GPU UUID in the lease matches NVML")
def test_cuda_gpu_recorded(certify_env: CertifyEnv, certify_record: Any) -> None:
    from harness.devices import run_doctor

    record = _service_record(certify_env)
    uuid = record["allocation"]["gpu_uuid"]
    gpus = [g.get("uuid") for g in run_doctor("cuda").cuda.model_dump(mode="json").get("gpus", [])]
    info = _server_info(certify_env)
    certify_record.detail("gpu_uuid", uuid)
    certify_record.detail("server_info", {k: info.get(k) for k in ("device", "mem_fraction_static", "attention_backend")})
    assert uuid in gpus


@check("hardware.doctor.fingerprint", description="doctor facts recorded as evidence")
def test_doctor_fingerprint(certify_env: CertifyEnv, certify_record: Any) -> None:
    from harness.devices import run_doctor

    report = run_doctor(certify_env.device)  # type: ignore[arg-type]
    data = report.model_dump(mode="json")
    certify_record.evidence("doctor.json", json.dumps(data, sort_keys=True).encode())
    verdict = data["devices"][certify_env.device]
    certify_record.detail("certifiable", verdict["certifiable"])
    certify_record.detail("reasons", verdict["reasons"])
    assert data["requested_device"] == certify_env.device
