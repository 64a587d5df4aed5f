"""The certified model in words (:class:`CertificationModelV1`): name, architecture, parameters, license, source.

A model fixture's facts come from the committed catalog (``catalog/model_fixtures.toml``) when the model's
``model_id`` is a pinned fixture's; any other checkpoint is described from its store manifest and its
safetensors headers (the parameter count is the sum of the tensors' element counts, read without loading
any tensor). The support matrix and the run page show these facts beside the digest.
"""

from __future__ import annotations

from catalog.model_fixtures import fixture_for_model_id
from harness.app.inventory import model_manifest, parameter_count
from harness.contracts.certification import CertificationModelV1
from harness.contracts.model_fixture import FixtureBehaviour
from harness.paths import HitchRoot

__all__ = ["model_facts", "not_applicable"]


def not_applicable(model_id: str, behaviour: FixtureBehaviour) -> str | None:
    """The catalog's reason ``model_id`` (a pinned model fixture) cannot show ``behaviour``; None when it can
    or when the model is no fixture (a check then holds it to the behaviour)."""
    entry = fixture_for_model_id(model_id)
    return None if entry is None else entry.not_applicable.get(behaviour)


def model_facts(root: HitchRoot, model_id: str, model_ref: str) -> CertificationModelV1:
    """What ``model_id`` (imported in ``root`` and named ``model_ref`` by the session) is."""
    entry = fixture_for_model_id(model_id)
    if entry is not None:
        return CertificationModelV1(
            name=entry.name,
            architecture=entry.architecture,
            parameters=entry.parameter_count,
            license=entry.license,
            source=entry.source,
        )

    manifest = model_manifest(root, model_id)
    parameters = parameter_count(root, model_id)
    alias = model_ref.removeprefix("local/")
    provenance = manifest.provenance
    return CertificationModelV1(
        name=None if alias.startswith("sha256:") else alias,
        architecture=(manifest.architecture.architectures or [manifest.architecture.model_type])[0],
        parameters=parameters,
        license=provenance.license,
        source=f"a local checkpoint imported into the store (provenance: {provenance.source})",
    )
