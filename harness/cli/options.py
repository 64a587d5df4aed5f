"""The options of the commands that name a model and start a service (``local prepare``, ``local serve``,
``run``, ``eval harbor run``): each declared once, so the commands say the same thing the same way.

Used as ``from harness.cli import options as opt`` and ``device: opt.Device = "auto"``. The ``Unset*`` forms
default to None where a sealed lock (``--inference``) supplies the value instead.
"""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = [
    "AllowUncertified",
    "Device",
    "Engine",
    "Image",
    "Inference",
    "Launcher",
    "Model",
    "ModelArg",
    "Offline",
    "Profile",
    "Runtime",
    "UnsetDevice",
    "UnsetProfile",
]

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
