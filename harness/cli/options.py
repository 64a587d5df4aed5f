"""The options of the commands that name a model and start a service (``local lock``, ``local prepare``,
``local serve``, ``run``, ``eval harbor run``): each declared once, so the commands say the same thing the same
way.

Used as ``from harness.cli import options as opt`` and ``device: opt.Device = "auto"``. The ``Unset*`` forms
default to None where a sealed lock (``--inference``) supplies the value instead. The options a command
family always takes together are one dataclass (:class:`ServiceOptions`, :class:`RunServiceOptions`): the
command names it as one parameter and :func:`grouped` (applied by ``cli_command``) shows its fields to Typer
as the flags.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar, get_type_hints

import typer

from harness.errors import HitchError

__all__ = [
    "DEFAULT_RUN_SERVICE",
    "AllowUncertified",
    "Capture",
    "Context",
    "Device",
    "Engine",
    "Image",
    "Inference",
    "Launcher",
    "Model",
    "ModelArg",
    "Offline",
    "Profile",
    "RunServiceOptions",
    "Runtime",
    "ServiceOptions",
    "UnsetDevice",
    "UnsetProfile",
    "check_capture",
    "grouped",
]

R = TypeVar("R")

_MODEL_HELP = "local/ALIAS or local/sha256:<hex>"
_DEVICE_HELP = "auto | cpu | cuda (auto: certified CUDA, else certified CPU, else refused)"
_PROFILE_HELP = "baseline | throughput"

ModelArg = Annotated[str, typer.Argument(help=_MODEL_HELP)]
Model = Annotated[str | None, typer.Option("--model", help=_MODEL_HELP)]
Inference = Annotated[str | None, typer.Option("--inference", help="a prepared inference id sha256:<hex>")]
Device = Annotated[str, typer.Option("--device", help=_DEVICE_HELP)]
UnsetDevice = Annotated[str | None, typer.Option("--device", help=_DEVICE_HELP + "; default auto")]
AllowUncertified = Annotated[
    bool,
    typer.Option(
        "--allow-uncertified",
        help="allow a backend the doctor does not certify (the generic-CPU runtime); recorded in the lock",
    ),
]
Profile = Annotated[str, typer.Option("--profile", help=_PROFILE_HELP)]
UnsetProfile = Annotated[str | None, typer.Option("--profile", help=_PROFILE_HELP)]
Engine = Annotated[str, typer.Option("--engine", help="sglang | fake (contract runs)")]
Launcher = Annotated[str, typer.Option("--launcher", help="process | oci")]
Image = Annotated[str | None, typer.Option("--image", help="oci: image ID or digest (default: the runtime's pin)")]
Runtime = Annotated[str | None, typer.Option("--runtime", help="catalog name or runtime_id")]
Offline = Annotated[bool, typer.Option("--offline", help="never install or pull; fail with the commands to run")]
Context = Annotated[int | None, typer.Option("--context", help="context tokens per request")]
Capture = Annotated[str, typer.Option("--capture", help="off | metadata | full (payloads 0600 under the run)")]
_CAPTURE_MODES = ("off", "metadata", "full")


def check_capture(capture: str) -> None:
    """Refuse an unknown ``--capture`` mode with the error table's code before anything starts."""
    if capture not in _CAPTURE_MODES:
        raise HitchError("usage_error", "--capture is off|metadata|full", {"capture": capture})


@dataclass(frozen=True)
class ServiceOptions:
    """The service ``local prepare`` and ``local serve`` start."""

    model: ModelArg
    device: Device = "auto"
    allow_uncertified: AllowUncertified = False
    profile: Profile = "baseline"
    engine: Engine = "sglang"
    launcher: Launcher = "process"
    image: Image = None
    runtime: Runtime = None


@dataclass(frozen=True)
class RunServiceOptions:
    """How ``run`` and ``eval harbor run`` choose their service when no ``--inference`` lock pins it."""

    device: UnsetDevice = None
    allow_uncertified: AllowUncertified = False
    profile: UnsetProfile = None
    engine: Engine = "sglang"
    launcher: Launcher = "process"
    runtime: Runtime = None
    offline: Offline = False


# the default a command's signature names for the group (parameters after one with a default need one)
DEFAULT_RUN_SERVICE = RunServiceOptions()


def grouped(fn: Callable[..., R]) -> Callable[..., R]:
    """Let a Typer command take an options dataclass as one parameter: Typer sees the dataclass's fields (their
    ``Annotated`` option declarations and defaults) in its place, and the command gets them back as one object.
    :func:`harness.cli.output.cli_command` applies it to every command; one without such a parameter is returned
    as it is."""
    hints = get_type_hints(fn, include_extras=True)
    params: list[inspect.Parameter] = []
    groups: dict[str, tuple[type[Any], list[str]]] = {}
    for param in inspect.signature(fn).parameters.values():
        kind = hints.get(param.name, param.annotation)
        if not (isinstance(kind, type) and dataclasses.is_dataclass(kind)):
            params.append(param.replace(annotation=kind))
            continue
        field_hints = get_type_hints(kind, include_extras=True)
        fields = dataclasses.fields(kind)
        groups[param.name] = (kind, [f.name for f in fields])
        for f in fields:
            default = inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
            params.append(param.replace(name=f.name, annotation=field_hints[f.name], default=default))

    if not groups:
        return fn

    @functools.wraps(fn)
    def command(**kwargs: Any) -> R:
        for name, (kind, names) in groups.items():
            kwargs[name] = kind(**{n: kwargs.pop(n) for n in names})
        return fn(**kwargs)

    signature = inspect.signature(fn).replace(parameters=params)
    command.__signature__ = signature  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params} | {"return": hints.get("return")}
    return command
