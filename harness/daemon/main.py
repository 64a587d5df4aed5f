"""The daemon process: ``python -m harness.daemon --root R`` (started detached by ``hitch daemon start``).

Order of its life: take its mutex, ``daemon.lock`` (one daemon per root; held means another one runs) →
recovery (:func:`~harness.service.recovery.recover`) before anything is served → the gateway
(:mod:`harness.daemon.runs`, loopback, a free port) → a fresh random token
(0600) → the API on the unix socket (created under umask 077, then chmod 0600) → ``daemon.json`` →
serve until SIGTERM/SIGINT or ``POST /v1/shutdown`` → stop every service (drain, confirmed stop) →
remove the socket, token and ``daemon.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import secrets
import signal
import sys
import time

import filelock
import psutil
import uvloop
from aiohttp import web

from harness.app.daemon_client import EXIT_ALREADY_RUNNING
from harness.daemon.core import DaemonConfig, DaemonCore
from harness.daemon.runs import RunService
from harness.daemon.server import build_app
from harness.devices.gpu_inventory import NvmlGpuInventory
from harness.paths import DaemonPaths, HitchRoot, atomic_write_json, ensure_private_dir, write_secret
from harness.service.gpu_leases import GpuDeviceProvider
from harness.service.ledger import Capacity
from harness.settings import env_name

__all__ = ["StaticGpuProvider", "main", "parse_args"]

_log = logging.getLogger("hitch.daemon")


class StaticGpuProvider:
    """A fixed GPU inventory (``--fake-gpu UUID``, tests only): GPU leasing without NVML.

    Without ``--fake-gpu`` the inventory is NVML's (:class:`~harness.devices.gpu_inventory.NvmlGpuInventory`).
    """

    def __init__(self, uuids: list[str]) -> None:
        self.uuids = list(uuids)

    def gpu_uuids(self) -> list[str]:
        return list(self.uuids)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m harness.daemon")
    p.add_argument("--root", required=True)
    p.add_argument("--idle-ttl-ms", type=int, default=None)
    p.add_argument("--monitor-interval-s", type=float, default=2.0)
    p.add_argument("--stop-timeout-s", type=float, default=30.0)
    p.add_argument("--fake-gpu", action="append", default=[], help="fake GPU UUID (tests: GPU leasing without a GPU)")
    p.add_argument("--gpu-lease-dir", default=None)
    p.add_argument("--capacity-cpu", type=int, default=None)
    p.add_argument("--capacity-memory", type=int, default=None)
    p.add_argument("--recover-docker", action="store_true")
    return p.parse_args(argv)


def config_from(args: argparse.Namespace, root: HitchRoot) -> DaemonConfig:
    provider: GpuDeviceProvider = StaticGpuProvider(args.fake_gpu) if args.fake_gpu else NvmlGpuInventory()
    capacity = None
    if args.capacity_cpu is not None or args.capacity_memory is not None:
        machine = Capacity.from_machine(root.path, len(provider.gpu_uuids()))
        capacity = Capacity.of_cores(
            args.capacity_cpu if args.capacity_cpu is not None else machine.cpu_cores,
            args.capacity_memory if args.capacity_memory is not None else machine.memory_bytes,
            machine.gpu_count,
            machine.disk_bytes,
        )
    return DaemonConfig(
        idle_ttl_ms=args.idle_ttl_ms,
        monitor_interval_s=args.monitor_interval_s,
        capacity=capacity,
        gpu_provider=provider,
        gpu_lease_dir=args.gpu_lease_dir,
        stop_timeout_s=args.stop_timeout_s,
        recover_docker=args.recover_docker,
    )


async def serve(root: HitchRoot, config: DaemonConfig) -> None:
    paths = DaemonPaths(root)
    # What a killed daemon left (we hold daemon.lock, so no live daemon uses them): until the new socket
    # exists, clients must see "not running", never a stale token.
    for stale in (paths.socket, paths.token, paths.info):
        with contextlib.suppress(FileNotFoundError):
            stale.unlink()
    core = DaemonCore(root, config)
    outcomes = await core.recover()
    for o in outcomes:
        _log.info("recovery: %s %s (%s)", o.service_id, o.action, o.reason)
    runs = RunService(core)
    core.event_hooks.append(runs.on_event)
    await runs.start()
    token = secrets.token_hex(32)
    write_secret(paths.token, token)
    done = asyncio.Event()
    force = {"value": True}
    stopped_by: dict[str, str | None] = {"by": None}

    def shutdown(forced: bool, by: str | None = None) -> None:
        force["value"] = forced
        stopped_by["by"] = by
        done.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, shutdown, True, None)
    runner = web.AppRunner(build_app(core, token, shutdown, runs), access_log=None)
    await runner.setup()
    sock = paths.socket
    ensure_private_dir(sock.parent)
    old = os.umask(0o177)
    try:
        await web.UnixSite(runner, str(sock)).start()
    finally:
        os.umask(old)
    os.chmod(sock, 0o600)
    me = psutil.Process()
    atomic_write_json(
        paths.info,
        {"pid": me.pid, "start_time": me.create_time(), "socket": str(sock), "root": str(root.path), "started_at": time.time()},
        mode=0o600,
    )
    _log.info("daemon %d serving %s on %s", me.pid, root.path, sock)
    try:
        await done.wait()
        _log.info("daemon stopping: draining every service")
        await runs.stop(by=stopped_by["by"])
        await core.manager.close(force=force["value"])
    finally:
        await runner.cleanup()
        for path in (sock, paths.info, paths.token):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    _log.info("daemon stopped")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    root = HitchRoot.at(args.root)
    os.environ[env_name("root")] = str(root.path)  # catalog loading applies this root's operator pins
    paths = DaemonPaths(root)
    paths.ensure()
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    mutex = filelock.FileLock(str(paths.mutex), timeout=0)
    try:
        mutex.acquire()
    except filelock.Timeout:
        _log.error("another daemon already runs for %s", root.path)
        return EXIT_ALREADY_RUNNING
    try:
        uvloop.run(serve(root, config_from(args, root)))  # the gateway's relay runs on this loop: uvloop's is the cheaper
    finally:
        mutex.release()
    return 0
