"""``hitch local doctor``: print the read-only DoctorReportV1 as JSON or a compact table.

The command never writes (not even the HITCH_ROOT directory) and exits 0 whatever the
verdicts; callers read ``devices.<name>.certifiable`` / ``selected``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

import typer

from harness.cli.output import COMMON, Common, cli_command, emit

if TYPE_CHECKING:  # imported where used: `hitch local --help` loads none of the doctor's probes
    from rich.console import Console
    from rich.table import Table

    from harness.devices.report import DoctorReportV1

__all__ = ["doctor", "render_human"]


DeviceOpt = Annotated[
    str,
    typer.Option("--device", help="auto | cpu | cuda: which device's verdict to show; auto shows both and selects one"),
]

_GIB = 1024**3
# --device is checked against auto|cpu|cuda before the command runs (harness.cli.options.check_inputs)
_DEVICES: dict[str, Literal["cpu", "cuda", "auto"]] = {"cpu": "cpu", "cuda": "cuda", "auto": "auto"}


def _gib(value: int | None) -> str:
    return "-" if value is None else f"{value / _GIB:.1f} GiB"


def _facts_table(report: DoctorReportV1) -> Table:
    from rich.table import Table

    cpu, cuda, docker = report.cpu, report.cuda, report.docker
    table = Table(title="hitch doctor (read-only)", show_header=False, title_justify="left")
    table.add_column("fact", style="bold")
    table.add_column("value")
    table.add_row("host", f"{report.host.hostname} {report.host.os}/{report.host.arch} kernel {report.host.kernel}")
    table.add_row("cpu", f"{cpu.vendor or '?'} {cpu.model_name or '?'}")
    table.add_row("isa", " ".join(cpu.isa_flags) or "-")
    table.add_row(
        "cores",
        f"{cpu.logical_cores} logical ({cpu.usable_cores} usable), {len(cpu.numa_nodes)} NUMA node(s), "
        f"{cpu.cores_per_node} per smallest node",
    )
    table.add_row(
        "memory",
        f"{_gib(cpu.memory_available_bytes)} free of {_gib(cpu.memory_total_bytes)}; /dev/shm {_gib(cpu.shm_total_bytes)}",
    )
    if cuda.available:
        table.add_row("nvidia", f"driver {cuda.driver_version} (CUDA {cuda.cuda_driver_version or '?'})")
        for gpu in cuda.gpus:
            table.add_row(
                f"gpu {gpu.index}",
                f"{gpu.name} sm {gpu.compute_capability} {_gib(gpu.memory_free_bytes)} free of "
                f"{_gib(gpu.memory_total_bytes)} {gpu.uuid}",
            )
    else:
        table.add_row("nvidia", cuda.reason or "unavailable")
    if docker.reachable:
        table.add_row(
            "docker",
            f"{docker.server_version} (API {docker.api_version}) {docker.os_type}/{docker.architecture} "
            f"runtimes: {', '.join(docker.runtimes) or '-'}; cgroup {docker.cgroup_driver} v{docker.cgroup_version}",
        )
        for limit in docker.limits:
            table.add_row("docker limit", limit)
    else:
        table.add_row("docker", docker.reason or "unreachable")
    return table


def _verdict_lines(report: DoctorReportV1) -> list[str]:
    lines: list[str] = []
    for name, verdict in report.devices.items():
        lines.append(f"{name}: {'certifiable' if verdict.certifiable else 'NOT certifiable'}")
        lines.extend(f"  - {reason}" for reason in verdict.reasons)
        lines.append(f"  can do: {'; '.join(verdict.can_do)}")
    lines.append(f"selected: {report.selected or 'none'} ({report.selected_reason})")
    given = [s for s in report.settings or [] if s.source == "environment"]
    lines.append("settings from the environment: " + (", ".join(f"{s.name}={s.value}" for s in given) or "none"))
    return lines


def render_human(report: DoctorReportV1, console: Console | None = None) -> None:
    from rich.console import Console

    console = console or Console(soft_wrap=False)
    console.print(_facts_table(report))
    for line in _verdict_lines(report):
        console.print(line, markup=False, highlight=False)


@cli_command
def doctor(device: DeviceOpt = "auto", common: Common = COMMON) -> None:
    """Report CPU/CUDA/Docker facts and whether each device is certifiable (writes nothing)."""
    from harness.devices.doctor import run_doctor
    from harness.devices.report import EffectiveSettingV1
    from harness.settings import effective_settings

    found = run_doctor(_DEVICES[device], root=common.root)
    report = found.model_copy(update={"settings": [EffectiveSettingV1(**s) for s in effective_settings()]})
    emit(common.as_json, report.to_json_dict(), lambda: render_human(report))
