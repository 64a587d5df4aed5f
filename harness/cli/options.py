"""The options of the commands that name a model and start a service (``local lock``, ``local prepare``,
``local serve``, ``run``, ``eval harbor run``): each declared once, so the commands say the same thing the same
way.

Used as ``from harness.cli import options as opt`` and ``device: opt.Device = "auto"``. The ``Unset*`` forms
default to None where a sealed lock (``--inference``) supplies the value instead. The service flags every
service-starting command takes are one dataclass, :class:`ServiceOptions`: the command names it as one
parameter and :func:`grouped` (applied by ``cli_command``) shows its fields to Typer as the flags.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar, get_type_hints

import typer

from harness.errors import HitchError

__all__ = [
    "DEFAULT_SERVICE",
    "AllowUncertified",
    "BenchEngine",
    "Capture",
    "Context",
    "Device",
    "Engine",
    "Generation",
    "Image",
    "Inference",
    "Launcher",
    "Model",
    "ModelArg",
    "Offline",
    "Profile",
    "Runtime",
    "ServiceOptions",
    "UnsetProfile",
    "check_capture",
    "check_choice",
    "check_inputs",
    "check_path",
    "grouped",
]

R = TypeVar("R")

_MODEL_HELP = "local/ALIAS or local/sha256:<hex>"
_DEVICE_HELP = "auto | cpu | cuda; default auto: certified CUDA, else certified CPU, else refused"
_PROFILE_HELP = "baseline | throughput"

ModelArg = Annotated[str, typer.Argument(help=_MODEL_HELP)]
Model = Annotated[str | None, typer.Option("--model", help=_MODEL_HELP)]
Inference = Annotated[str | None, typer.Option("--inference", help="a prepared inference id sha256:<hex>")]
Device = Annotated[str, typer.Option("--device", help=_DEVICE_HELP)]
AllowUncertified = Annotated[
    bool,
    typer.Option(
        "--allow-uncertified",
        help="allow a backend the doctor does not certify (the generic-CPU runtime); recorded in the lock",
    ),
]
Profile = Annotated[str, typer.Option("--profile", help=_PROFILE_HELP)]
UnsetProfile = Annotated[str | None, typer.Option("--profile", help=_PROFILE_HELP)]
Engine = Annotated[
    str | None,
    typer.Option(
        "--engine",
        help="sglang | fake (contract runs); default sglang, by the device rule (fake only where no SGLang runtime exists)",
    ),
]
Launcher = Annotated[
    str | None,
    typer.Option(
        "--launcher",
        help="process | oci; default by the device rule: oci on a certifiable platform with Docker and a pinned image, "
        "else process",
    ),
]
BenchEngine = Annotated[str, typer.Option("--engine", help="sglang | fake (the engine the benchmark drives); default sglang")]
Image = Annotated[str | None, typer.Option("--image", help="oci: image ID or digest (default: the runtime's pin)")]
Runtime = Annotated[str | None, typer.Option("--runtime", help="catalog name or runtime_id")]
Offline = Annotated[bool, typer.Option("--offline", help="never install or pull; fail with the commands to run")]
Context = Annotated[int | None, typer.Option("--context", help="context tokens per request")]
Generation = Annotated[
    str | None,
    typer.Option(
        "--generation",
        help="the lock's sampling: a built-in profile (greedy | balanced | creative; default greedy) or a JSON file "
        "of temperature, top_p, top_k, min_p, repetition_penalty, seed; requests must omit these or send the lock's",
    ),
]
Capture = Annotated[str, typer.Option("--capture", help="off | metadata | full (payloads 0600 under the run)")]
# options more than one command takes, written once
RunIdArg = Annotated[str, typer.Argument(help="the run id")]
NewRunId = Annotated[str | None, typer.Option("--run-id", help="the new run's id (default: random)")]
EvaluationIdArg = Annotated[str, typer.Argument(help="the evaluation id (evals/<id>/)")]
FakeFault = Annotated[
    list[str] | None,
    typer.Option("--fake-fault", hidden=True, help="--engine fake only: start the fake with this --fault"),
]
_KEYS_HELP = "trusted public-key dir of <keyid>.pub.pem files (repeatable; default catalog/keys)"
TrustedKeys = Annotated[list[Path] | None, typer.Option("--keys", help=_KEYS_HELP)]
_CAPTURE_MODES = ("off", "metadata", "full")

# The option values every command checks the same way, by parameter name, before it does anything
# (:func:`check_inputs`, applied by ``cli_command``): the flag as the user types it and its choices. The
# choices are the contracts' (tests/harness/cli/test_input_errors.py holds them equal); a catalog serves no
# metal runtime in this version, so ``--device`` never offers it.
CHOICES: dict[str, tuple[str, tuple[str, ...]]] = {
    "device": ("--device", ("auto", "cpu", "cuda")),
    "engine": ("--engine", ("sglang", "fake")),
    "launcher": ("--launcher", ("process", "oci")),
    "profile": ("--profile", ("baseline", "throughput")),
    "capture": ("--capture", _CAPTURE_MODES),
    "harness": ("--harness", ("model-call", "codex")),
}
# Numbers that must be at least 1 (counts, tokens, bytes) or above 0 (seconds).
AT_LEAST_ONE: dict[str, str] = {
    "max_output_tokens": "--max-output-tokens",
    "context": "--context",
    "capture_max_bytes": "--capture-max-bytes",
}
ABOVE_ZERO: dict[str, str] = {"deadline_s": "--deadline-s"}
# what people type for a choice by another name
_SYNONYMS = {"gpu": "cuda", "nvidia": "cuda", "docker": "oci", "container": "oci", "real": "sglang"}


def check_choice(flag: str, value: str, choices: tuple[str, ...]) -> None:
    """Refuse ``value`` unless it is one of ``choices``: ``usage_error`` naming them, with a did-you-mean."""
    if value in choices:
        return
    close = [_SYNONYMS[value.lower()]] if _SYNONYMS.get(value.lower()) in choices else []
    close = close or difflib.get_close_matches(value.lower(), choices, n=1, cutoff=0.5)
    why = f"{flag} {value}: not served by this version" if value == "metal" else f"{flag} {value} is not known"
    message = f"{why}; choose {'|'.join(choices)}" + (f" (did you mean {close[0]}?)" if close else "")
    details: dict[str, Any] = {"option": flag, "value": value, "choices": list(choices)}
    if close:
        details["did_you_mean"] = close[0]
    raise HitchError("usage_error", message, details)


def check_inputs(given: dict[str, Any]) -> None:
    """Check the option values a command was given (by parameter name: :data:`CHOICES`, :data:`AT_LEAST_ONE`,
    :data:`ABOVE_ZERO`) before it admits or starts anything; a bad one is ``usage_error`` naming the flag."""
    for name, (flag, choices) in CHOICES.items():
        value = given.get(name)
        if isinstance(value, str):
            check_choice(flag, value, choices)
    for name, flag in AT_LEAST_ONE.items():
        number = given.get(name)
        if isinstance(number, int) and not isinstance(number, bool) and number < 1:
            raise HitchError("usage_error", f"{flag} {number}: must be at least 1", {"option": flag, "value": number})
    for name, flag in ABOVE_ZERO.items():
        seconds = given.get(name)
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and not seconds > 0:
            raise HitchError("usage_error", f"{flag} {seconds}: must be above 0", {"option": flag, "value": seconds})


def check_path(path: Path, what: str = "file") -> Path:
    """``path``, or ``usage_error`` "no such file: PATH" before anything reads it (never a signature, lock or disk
    error for a file that is simply not there)."""
    if not path.exists():
        raise HitchError("usage_error", f"no such {what}: {path}", {"path": str(path)})
    return path


def check_capture(capture: str) -> None:
    """Refuse an unknown ``--capture`` mode with the error table's code before anything starts."""
    flag, choices = CHOICES["capture"]
    check_choice(flag, capture, choices)


@dataclass(frozen=True)
class ServiceOptions:
    """The service flags of every command that starts one (``local prepare``, ``local serve``, ``run``, ``eval
    harbor run``): the fields of :class:`harness.app.spec.ServiceSpec` but the model (an argument or ``--model``),
    with its defaults (``tests/harness/cli/test_options_grouped.py`` holds them equal)."""

    device: Device = "auto"
    allow_uncertified: AllowUncertified = False
    profile: UnsetProfile = None
    engine: Engine = None
    launcher: Launcher = None
    image: Image = None
    runtime: Runtime = None
    generation: Generation = None


# the default a command's signature names for the group (parameters after one with a default need one)
DEFAULT_SERVICE = ServiceOptions()


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
