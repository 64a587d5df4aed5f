"""Translation of Docker SDK failures into :class:`HitchError` (one place, ``raise ... from exc``).

Tree of what the OCI launcher can report:

- engine unreachable (socket missing, daemon down, API timeout) → ``docker_unavailable``
- pinned image not present locally → ``inference_runtime_unavailable``
- the daemon refused to create or start the container → ``inference_process_exited`` (the engine never ran)

Messages carry the daemon's explanation (never argv or environment, which may hold secrets).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import docker
import docker.errors
import requests.exceptions

from harness.devices.docker_probe import docker_host, unix_socket_problem
from harness.errors import HitchError

__all__ = ["docker_client", "translate_docker_errors"]

_UNREACHABLE = (requests.exceptions.ConnectionError, requests.exceptions.Timeout)


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
