"""Host firewall rules for hitch's own Docker networks: a container there reaches only what hitch allows on
the host.

An ``internal`` Docker network has no egress, but the host still answers on its bridge address: every host
service listening on all interfaces (or on that address) is reachable from the containers (Docker's own
rules live in FORWARD; traffic to the host goes through INPUT, which Docker leaves alone). For one bridge
interface, :func:`guard_bridge` installs a chain ``HITCH-<id>`` jumped to from the top of INPUT for packets
arriving on that interface: replies to connections the host opened pass (the host reaches the engine), the
listed ``(address, tcp port)`` pairs pass (the gateway's listener on the eval network), every other TCP
connection is reset and anything else dropped. :func:`unguard_bridge` removes the jump and the chain.
Only hitch's chains on hitch's bridges are ever touched.

Needs root and ``iptables`` (Docker 20.10 with its iptables backend); without them
:func:`guard_unavailable` says why and the gap stays a stated limit (the doctor names it, from the same
function).
"""

from __future__ import annotations

import shutil
import subprocess

from harness.devices.docker_probe import host_rules_unavailable as guard_unavailable
from harness.errors import HitchError

__all__ = ["chain_for", "guard_bridge", "guard_unavailable", "guarded", "unguard_bridge"]

_TIMEOUT_S = 30


def chain_for(bridge: str) -> str:
    """``br-0123456789ab`` -> ``HITCH-0123456789ab`` (iptables chain names are at most 28 characters)."""
    if not bridge.startswith("br-") or not 3 < len(bridge) <= 15 or not bridge[3:].isalnum():
        raise HitchError("internal_error", f"not a Docker bridge interface name: {bridge!r}", {})
    return "HITCH-" + bridge[3:]


def _iptables(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("iptables") or "iptables"
    proc = subprocess.run([binary, "-w", *args], capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    if check and proc.returncode != 0:
        raise HitchError(
            "local_inference_topology_unsupported",
            f"iptables {' '.join(args[:2])} failed: {proc.stderr.strip()[:300]}",
            {"args": list(args)},
        )
    return proc


def guarded(bridge: str) -> bool:
    """Whether INPUT jumps to this bridge's chain."""
    chain = chain_for(bridge)
    return _iptables("-C", "INPUT", "-i", bridge, "-j", chain, check=False).returncode == 0


def guard_bridge(bridge: str, allow: list[tuple[str, int]]) -> None:
    """Install (or replace) this bridge's rules; idempotent."""
    why = guard_unavailable()
    if why is not None:
        raise HitchError("local_inference_topology_unsupported", why, {"bridge": bridge})
    chain = chain_for(bridge)
    if _iptables("-N", chain, check=False).returncode != 0:
        _iptables("-F", chain)  # it exists (a daemon before this one made it): rewrite it
    _iptables("-A", chain, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN")
    for address, port in allow:
        _iptables("-A", chain, "-p", "tcp", "-d", address, "--dport", str(port), "-j", "RETURN")
    _iptables("-A", chain, "-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset")
    _iptables("-A", chain, "-j", "DROP")
    if not guarded(bridge):
        _iptables("-I", "INPUT", "1", "-i", bridge, "-j", chain)


def unguard_bridge(bridge: str) -> None:
    """Remove the jump and the chain (absent is fine)."""
    if guard_unavailable() is not None:
        return
    chain = chain_for(bridge)
    while guarded(bridge):
        _iptables("-D", "INPUT", "-i", bridge, "-j", chain)
    if _iptables("-F", chain, check=False).returncode == 0:
        _iptables("-X", chain)
