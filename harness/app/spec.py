"""The one record of which service a caller asks for, with the one table of defaults.

Every door that names a service builds a :class:`ServiceSpec`: the CLI's option groups are generated from it
(:mod:`harness.cli.options`), ``hitch run``'s ask extends it (:class:`harness.app.runs.RunAsk`), the certify
session resolves through it (``certify.options.choose_engine``), and the one rule,
:func:`harness.app.choice.resolve_choice`, takes it and returns the resolved :class:`~harness.app.choice.Choice`.
A field left ``None`` is the rule's to decide; nothing else picks an engine, a launcher or a runtime.

Example::

    spec = ServiceSpec.of(model="local/tiny", device="cpu", allow_uncertified=True)
    choice = resolve_choice(spec).require()      # device, engine, launcher, runtime, and why
    assert SERVICE_DEFAULTS["engine"] is None    # the rule picks, at every door
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from harness.contracts.base import Record, parse_record
from harness.contracts.service import EngineName, LauncherName
from harness.lock import GenerationSpec, ProfileShort

__all__ = ["SERVICE_DEFAULTS", "ServiceSpec"]


class ServiceSpec(Record):
    """Which model, device, engine, launcher, runtime, profile, image and permission a caller asks for; ``None``
    leaves the choice to the rule (:func:`harness.app.choice.resolve_choice`). :meth:`of` refuses a bad value
    with ``usage_error``."""

    model: str | None = Field(default=None, description="local/ALIAS or local/sha256:<hex>")
    device: str = Field(default="auto", description="auto | cpu | cuda (metal parses but is not served)")
    engine: EngineName | None = Field(default=None, description="sglang | fake; default: the rule's pick")
    launcher: LauncherName | None = Field(default=None, description="process | oci; default: the rule's pick")
    runtime: str | None = Field(default=None, description="catalog name or runtime_id; default: the rule's pick")
    profile: ProfileShort | None = Field(default=None, description="baseline | throughput; default baseline")
    image: str | None = Field(default=None, description="oci: image ID or digest; default the runtime's pin")
    allow_uncertified: bool = Field(default=False, description="the permission to run an uncertified backend")
    generation: GenerationSpec = None

    @classmethod
    def of(cls, **given: Any) -> ServiceSpec:
        """``given`` (a command's options) checked; a bad value is a ``usage_error`` naming the option."""
        return parse_record(cls, given, "usage_error")

    @property
    def profile_or_default(self) -> ProfileShort:
        return self.profile or "baseline"


# the one table of defaults: what every door gets when its caller leaves a field out
SERVICE_DEFAULTS: dict[str, Any] = {name: field.default for name, field in ServiceSpec.model_fields.items()}
