"""The local Docker engine: where it is, whether its socket answers, a client that has answered a ping, and the
translation of Docker SDK failures into :class:`HitchError` (one place, ``raise ... from exc``).

It sits below every layer that talks to Docker (the doctor's probe, pulling and pinning runtime images, the OCI
launcher, the eval network). Tree of what a Docker call can report:

- engine unreachable (socket missing, daemon down, API timeout) → ``docker_unavailable``
- pinned image not present locally → ``inference_runtime_unavailable``
- the daemon refused to create or start the container → ``inference_process_exited`` (the engine never ran)

Messages carry the daemon's explanation (never argv or environment, which may hold secrets).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import docker
import docker.errors
import requests.exceptions

from harness.errors import HitchError
from harness.settings import settings

__all__ = [
    "DEFAULT_DOCKER_HOST",
    "DOCKER_TIMEOUT_S",
    "docker_client",
    "docker_host",
    "one_line",
    "translate_docker_errors",
    "unix_socket_problem",
]

DOCKER_TIMEOUT_S = 5
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"

_UNREACHABLE = (requests.exceptions.ConnectionError, requests.exceptions.Timeout)


def docker_host() -> str:
    """The engine the SDK's ``from_env`` talks to: ``DOCKER_HOST``, or the default socket."""
    return settings().docker_host or DEFAULT_DOCKER_HOST


def unix_socket_problem(host: str) -> str | None:
    """Why a ``unix://`` host cannot be reached, checked with our own socket first.

    docker-py leaks the socket when a unix connect fails (its ``connect`` does not close
    it), so a missing or refusing socket is answered here without the SDK.
    """
    if not host.startswith("unix://"):
        return None
    path = host[len("unix://") :]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(DOCKER_TIMEOUT_S)
        try:
            sock.connect(path)
        except OSError as exc:
            return one_line(exc)
    return None


def one_line(exc: BaseException) -> str:
    """An exception as one line: its type and its text with the whitespace folded."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def docker_client(factory: Callable[[], docker.DockerClient] = docker.from_env) -> docker.DockerClient:
    """A client that has answered a ping; ``docker_unavailable`` otherwise.

    With the SDK's own factory, a ``unix://`` engine that is missing or refuses is answered with our own socket
    first: docker-py leaves the socket of a failed unix connect open (a ``ResourceWarning`` at some later
    garbage collection)."""
    if factory is docker.from_env:
        problem = unix_socket_problem(docker_host())
        if problem is not None:
            raise HitchError("docker_unavailable", f"the Docker engine is not reachable: {problem}")
    try:
        client = factory()
        client.ping()
    except (docker.errors.DockerException, *_UNREACHABLE) as exc:
        raise HitchError("docker_unavailable", f"the Docker engine is not reachable: {_short(exc)}") from exc
    return client


@contextmanager
def translate_docker_errors(action: str, *, api_error_code: str = "inference_process_exited") -> Iterator[None]:
    """Map SDK exceptions raised inside the block; ``action`` names what was attempted."""
    try:
        yield
    except HitchError:
        raise
    except _UNREACHABLE as exc:
        raise HitchError("docker_unavailable", f"{action}: the Docker engine did not answer: {_short(exc)}") from exc
    except docker.errors.ImageNotFound as exc:
        raise HitchError("inference_runtime_unavailable", f"{action}: image not present locally") from exc
    except docker.errors.APIError as exc:
        raise HitchError(api_error_code, f"{action}: {_short(exc)}", {"status": exc.status_code}) from exc
    except docker.errors.DockerException as exc:
        raise HitchError("docker_unavailable", f"{action}: {_short(exc)}") from exc


def _short(exc: BaseException) -> str:
    text = str(exc.explanation) if isinstance(exc, docker.errors.APIError) and exc.explanation else str(exc) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."
