"""The inference lock (:class:`~harness.contracts.lock.InferenceLockV1`): built from profiles, validated, sealed.

``generation.py`` holds the generation profiles (``--generation NAME|FILE``); ``build.py`` turns a model, a
runtime, a device and a profile into a draft lock and validates lock documents strictly; ``sealed.py`` keeps the
locks ``local prepare`` sealed in a root.
"""

from harness.lock.build import (
    ABORT_CONFIRM_TIMEOUT_MS,
    CERTIFIED_QUANTIZATIONS,
    CPU_MEM_FRACTION_STATIC,
    DEFAULT_CONTEXT_TOKENS,
    PROFILES,
    SERVED_DEVICES,
    STREAM_IDLE_TIMEOUT_MS,
    Device,
    ProfileShort,
    ServedDevice,
    build_lock,
    claims_parallel_tool_calls,
    profile_name,
    resolve_dtype,
    served_device,
    validate_lock,
)
from harness.lock.generation import (
    DEFAULT_GENERATION,
    GENERATION_PROFILES,
    GenerationProfile,
    GenerationSpec,
    describe_sampling,
    generation_profile,
)
from harness.lock.sealed import load_sealed_lock, save_sealed_lock, sealed_for_draft

__all__ = [
    "ABORT_CONFIRM_TIMEOUT_MS",
    "CERTIFIED_QUANTIZATIONS",
    "CPU_MEM_FRACTION_STATIC",
    "DEFAULT_CONTEXT_TOKENS",
    "DEFAULT_GENERATION",
    "GENERATION_PROFILES",
    "PROFILES",
    "SERVED_DEVICES",
    "STREAM_IDLE_TIMEOUT_MS",
    "Device",
    "GenerationProfile",
    "GenerationSpec",
    "ProfileShort",
    "ServedDevice",
    "build_lock",
    "claims_parallel_tool_calls",
    "describe_sampling",
    "generation_profile",
    "load_sealed_lock",
    "profile_name",
    "resolve_dtype",
    "save_sealed_lock",
    "sealed_for_draft",
    "served_device",
    "validate_lock",
]
