"""Pinned SGLang runtimes: the catalog (``catalog/runtimes.toml``) and installs under HITCH_ROOT."""

from __future__ import annotations

from harness.runtimes.catalog import (
    default_catalog_path,
    default_runtime,
    get_runtime,
    load_catalog,
    pinned_image,
    require_certifiable_pin,
    runtime_source_dir,
)
from harness.runtimes.install import (
    SERVER_MODULE,
    InstalledRuntime,
    InstallResult,
    install_runtime,
    installed_runtime,
    planned_runtime,
    record_manifest,
    require_installed,
    runtime_dir,
)

__all__ = [
    "SERVER_MODULE",
    "InstallResult",
    "InstalledRuntime",
    "default_catalog_path",
    "default_runtime",
    "get_runtime",
    "install_runtime",
    "installed_runtime",
    "load_catalog",
    "planned_runtime",
    "pinned_image",
    "record_manifest",
    "require_certifiable_pin",
    "require_installed",
    "runtime_dir",
    "runtime_source_dir",
]
