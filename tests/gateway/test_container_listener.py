"""The gateway's container-facing listener, hermetic: a second loopback address stands in
for the Docker bridge address. A binding registered for that listener answers only there, and the listener
serves no other binding; an address this host cannot bind is ``local_inference_topology_unsupported``."""

from __future__ import annotations

import httpx
import pytest

from harness.errors import HitchError
from tests.gateway.support import Engine, GatewayThread, make_lock, target_for, token_of

SECOND = "127.0.0.2"  # every 127/8 address is on lo: a listener address other than the gateway's own


def _models(url: str, token: str) -> httpx.Response:
    return httpx.get(f"{url}/models", headers={"Authorization": f"Bearer {token}"}, timeout=30, trust_env=False)


def test_a_container_binding_answers_only_on_its_listener(gateway: GatewayThread, engine: Engine) -> None:
    origin = gateway.run(gateway.gw.listen_on(SECOND))
    assert origin.startswith(f"http://{SECOND}:") and gateway.run(gateway.gw.listen_on(SECOND)) == origin
    lock = make_lock()
    host_run = gateway.register("host-run", target_for(engine, lock))
    container_run = gateway.register("container-run", target_for(engine, lock), listen_host=SECOND)
    assert container_run.base_url == f"{origin}/runs/{container_run.binding_id}/v1"
    assert host_run.base_url.startswith(gateway.gw.base_url)
    ok = _models(container_run.base_url, token_of(container_run))
    assert ok.status_code == 200 and ok.json()["data"][0]["id"] == engine.served
    assert _models(host_run.base_url, token_of(host_run)).status_code == 200
    # each binding, with its own valid token, on the other listener: refused like an unknown one
    on_loopback = container_run.base_url.replace(origin, gateway.gw.base_url)
    on_bridge = host_run.base_url.replace(gateway.gw.base_url, origin)
    for url, token in ((on_loopback, token_of(container_run)), (on_bridge, token_of(host_run))):
        refused = _models(url, token)
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "inference_token_invalid"
    gateway.run(gateway.gw.stop_listening(SECOND))
    with pytest.raises(httpx.ConnectError):
        _models(container_run.base_url, token_of(container_run))


def test_an_address_this_host_cannot_bind_is_an_unsupported_topology(gateway: GatewayThread, engine: Engine) -> None:
    with pytest.raises(HitchError) as err:
        gateway.run(gateway.gw.listen_on("192.0.2.1"))  # TEST-NET-1: on no interface of this host
    assert err.value.code == "local_inference_topology_unsupported"
    with pytest.raises(HitchError) as unknown:
        gateway.register("run", target_for(engine, make_lock()), listen_host="192.0.2.1")
    assert unknown.value.code == "internal_error"
