"""Engine secrets: the random engine API key and admin key of one service epoch (spec §9.1 step 4, §11.2).

Both keys are fresh for every epoch and live only in the service's private directory
(``inference/private/<service-id>/``, 0700) as 0600 files:

- ``engine-api-key`` and ``admin-api-key``: the bare keys, for the gateway and the supervisor;
- ``engine-config.yaml``: the same two keys as an SGLang ``--config`` file. SGLang 0.5.23 reads
  ``--config FILE.yaml`` (``server_args_config_parser.ConfigArgumentMerger``) and merges its keys into its
  own argument list *in memory*, so the engine gets ``--api-key``/``--admin-api-key`` without the keys ever
  appearing on its command line (``/proc/<pid>/cmdline`` shows only ``--config <path>``).

:class:`EngineKeys` never prints its values (``repr`` is redacted), so a key cannot leak through a log line,
an error message or a state file by accident.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import HitchError
from harness.paths import HitchRoot, write_secret

__all__ = ["ADMIN_KEY_FILE", "API_KEY_FILE", "CONFIG_FILE", "EngineKeys", "KeyFiles", "issue_keys", "load_keys"]

API_KEY_FILE = "engine-api-key"
ADMIN_KEY_FILE = "admin-api-key"
CONFIG_FILE = "engine-config.yaml"


@dataclass(frozen=True)
class EngineKeys:
    """The two engine secrets; ``repr``/``str`` never show them."""

    api_key: str = field(repr=False)
    admin_key: str = field(repr=False)

    def values(self) -> tuple[str, str]:
        return (self.api_key, self.admin_key)

    def __str__(self) -> str:
        return "EngineKeys(<redacted>)"


@dataclass(frozen=True)
class KeyFiles:
    """Where one service's secrets lie (all 0600 inside a 0700 directory)."""

    api_key: Path
    admin_key: Path
    config: Path


def _key_files(root: HitchRoot, service_id: str) -> KeyFiles:
    private = root.private_dir(service_id)
    return KeyFiles(private / API_KEY_FILE, private / ADMIN_KEY_FILE, private / CONFIG_FILE)


def _new_key(prefix: str) -> str:
    # Hex only: safe unquoted in YAML, in an HTTP header and in a regex-free log redaction.
    return f"{prefix}-{secrets.token_hex(24)}"


def issue_keys(root: HitchRoot, service_id: str) -> tuple[EngineKeys, KeyFiles]:
    """Fresh keys for a new epoch, written atomically (old keys of the service stop working at its restart)."""
    keys = EngineKeys(_new_key("hek"), _new_key("hak"))
    files = _key_files(root, service_id)
    write_secret(files.api_key, keys.api_key)
    write_secret(files.admin_key, keys.admin_key)
    # Dashed keys: SGLang turns a YAML key K into the flag ``--K`` verbatim.
    config = (
        "# hitch: engine secrets of this service epoch (0600); read by the engine through --config\n"
        f'api-key: "{keys.api_key}"\n'
        f'admin-api-key: "{keys.admin_key}"\n'
    )
    write_secret(files.config, config)
    return keys, files


def load_keys(root: HitchRoot, service_id: str) -> EngineKeys:
    """The current keys of a service (for the gateway or a restarted supervisor)."""
    files = _key_files(root, service_id)
    try:
        return EngineKeys(files.api_key.read_text().strip(), files.admin_key.read_text().strip())
    except OSError as exc:
        raise HitchError(
            "inference_route_unavailable", f"service {service_id} has no engine keys", {"service_id": service_id}
        ) from exc
