"""The core internals the suites test directly, named once: the one door from the suites to the core below the
application layer (an import contract in ``pyproject.toml`` holds every other certify module to
:mod:`harness.app`; the kit's other modules reach the core for their own helpers).

White-box on purpose: the fault checks start an engine exactly as the supervisor does, issue its keys and verify
what it loaded (:mod:`harness.engine`), run it in a container (:mod:`harness.launch`); readiness is driven step
by step; the hardware checks read the GPUs as the doctor does (:mod:`harness.devices`); the evaluation containers'
network is inspected by its labels. Each name here is the core's own object, not a copy.

Example::

    from certify.kit.white_box import EngineKeys, verify_server_info
"""

from __future__ import annotations

from harness.devices import run_doctor
from harness.devices.docker_probe import probe_docker
from harness.devices.gpu_inventory import NvmlGpuInventory, processes_by_gpu
from harness.engine import EngineKeys, EngineProgram, load_keys, prepare_launch, wait_ready
from harness.engine.readiness import ReadinessReport, flush_when_idle, probe_tool_call
from harness.engine.verify import expected_server_info, server_info_mismatches, verify_server_info
from harness.launch.eval_network import LABEL_ROLE, EvalNetwork, probe_network
from harness.launch.oci import OciLauncher
from harness.launch.oci_config import LABEL_ROOT, root_label
from harness.service.isolation import service_key

__all__ = [
    "LABEL_ROLE",
    "LABEL_ROOT",
    "EngineKeys",
    "EngineProgram",
    "EvalNetwork",
    "NvmlGpuInventory",
    "OciLauncher",
    "ReadinessReport",
    "expected_server_info",
    "flush_when_idle",
    "load_keys",
    "prepare_launch",
    "probe_docker",
    "probe_network",
    "probe_tool_call",
    "processes_by_gpu",
    "root_label",
    "run_doctor",
    "server_info_mismatches",
    "service_key",
    "verify_server_info",
    "wait_ready",
]
