"""The inference lock (:class:`~harness.contracts.lock.InferenceLockV1`): built from profiles, validated, sealed.

``build.py`` turns a model, a runtime, a device and a profile into a draft lock and validates lock documents
strictly; ``sealed.py`` keeps the locks ``local prepare`` sealed in a root.
"""

from harness.lock.build import (
    CERTIFIED_QUANTIZATIONS,
    CPU_MEM_FRACTION_STATIC,
    DEFAULT_CONTEXT_TOKENS,
    PROFILES,
    SERVED_DEVICES,
    Device,
    ProfileShort,
    ServedDevice,
    build_lock,
    profile_name,
    resolve_dtype,
    served_device,
    validate_lock,
)
from harness.lock.sealed import load_sealed_lock, save_sealed_lock, sealed_for_draft

__all__ = [
    "CERTIFIED_QUANTIZATIONS",
    "CPU_MEM_FRACTION_STATIC",
    "DEFAULT_CONTEXT_TOKENS",
    "PROFILES",
    "SERVED_DEVICES",
    "Device",
    "ProfileShort",
    "ServedDevice",
    "build_lock",
    "load_sealed_lock",
    "profile_name",
    "resolve_dtype",
    "save_sealed_lock",
    "sealed_for_draft",
    "served_device",
    "validate_lock",
]
