"""Which upstreams a binding may have: loopback, or a container address an ``oci`` service record vouches for.

Hermetic (no Docker): the record's consistency rules of :class:`gateway.bindings.UpstreamTarget`. That Docker
really holds what the record says is checked against a real engine in
``tests/harness/service/test_integration_oci.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.bindings import UpstreamTarget
from harness.contracts.service import ProcessIdentityV1
from harness.errors import HitchError
from tests.gateway.support import make_lock

OCI = ProcessIdentityV1(
    launcher="oci", container_id="c" * 64, image_id="sha256:" + "a" * 64, network_id="n" * 64, network_subnet="172.30.5.0/24"
)


def _target(base_url: str, process: ProcessIdentityV1 | None) -> UpstreamTarget:
    lock = make_lock()
    return UpstreamTarget(
        base_url=base_url,
        engine_key="k",
        service_id="svc",
        inference_id=lock.inference_id,
        epoch=1,
        lock=lock,
        wire_model="tiny-wire",
        tokenizer_dir=Path("/nonexistent"),
        process=process,
    )


@pytest.mark.parametrize(
    ("base_url", "process"),
    [
        ("http://127.0.0.1:30000", None),
        ("http://[::1]:30000", None),
        ("http://127.0.0.1:30000", ProcessIdentityV1(launcher="process", pid=1, start_time=1.0)),
        ("http://172.30.5.2:30000", OCI),
        ("http://172.30.5.254:30000", OCI),
    ],
)
def test_loopback_or_the_container_address_of_an_oci_record_is_accepted(base_url: str, process: ProcessIdentityV1 | None) -> None:
    assert _target(base_url, process).origin == base_url


@pytest.mark.parametrize(
    ("base_url", "process"),
    [
        pytest.param("http://172.30.5.2:30000", None, id="container-address-without-record"),
        pytest.param(
            "http://172.30.5.2:30000",
            ProcessIdentityV1(launcher="process", pid=1, start_time=1.0, network_subnet="172.30.5.0/24"),
            id="non-oci-launcher",
        ),
        pytest.param("http://172.30.6.2:30000", OCI, id="address-outside-subnet"),
        pytest.param("http://172.30.5.0:30000", OCI, id="network-address"),
        pytest.param("http://172.30.5.255:30000", OCI, id="broadcast-address"),
        pytest.param("http://127.0.0.1:30000", OCI, id="loopback-with-oci-record"),
        pytest.param("http://localhost:30000", OCI, id="loopback-name-with-oci-record"),
        pytest.param("http://127.0.0.2:30000", OCI.model_copy(update={"network_subnet": "127.0.0.0/8"}), id="loopback-alias"),
        pytest.param("http://[::ffff:172.30.5.2]:30000", OCI, id="mapped-v6-alias"),
        pytest.param("http://169.254.1.2:30000", OCI.model_copy(update={"network_subnet": "169.254.0.0/16"}), id="link-local"),
        pytest.param("http://8.8.8.8:30000", OCI.model_copy(update={"network_subnet": "8.8.8.0/24"}), id="public-subnet"),
        pytest.param("http://engine.internal:30000", OCI, id="a-name-not-an-address"),
        pytest.param("http://172.30.5.2:30000", OCI.model_copy(update={"network_id": None}), id="no-network"),
        pytest.param("http://172.30.5.2:30000", OCI.model_copy(update={"container_id": None}), id="no-container"),
        pytest.param("http://172.30.5.2:30000", OCI.model_copy(update={"network_subnet": "172.30.5.1/24"}), id="bad-cidr"),
        pytest.param("http://172.30.5.2:30000", OCI.model_copy(update={"network_subnet": None}), id="no-subnet"),
        pytest.param("https://172.30.5.2:30000", OCI, id="not-http"),
        pytest.param("http://172.30.5.2", OCI, id="no-port"),
        pytest.param("http://172.30.5.2:30000/v1", OCI, id="a-path"),
        pytest.param("http://u:p@172.30.5.2:30000", OCI, id="credentials"),
    ],
)
def test_a_forged_or_inconsistent_route_is_refused(base_url: str, process: ProcessIdentityV1 | None) -> None:
    with pytest.raises(HitchError) as caught:
        _target(base_url, process)
    assert caught.value.code == "inference_route_unavailable"
