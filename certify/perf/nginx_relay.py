"""nginx as the benchmark's native relay: the field's own reverse proxy between the load and the engine.

Owns :func:`started_nginx`: Debian's nginx (``nginx-light``, ``make nginx``) started in the foreground as one
process (``master_process off``: the process that relays is the one whose CPU is read), configured as the
measurement in ``reference/gateway-overhead-floor.md`` was: a keep-alive upstream pool, HTTP/1.1 to the
engine, ``proxy_buffering off`` (each event leaves as it arrives), no access log. It checks no token: the
caller's ``Authorization`` (the engine key, as the direct arm sends it) passes through, so no secret is
written into its configuration.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from certify.processes import stop_process
from harness.net import free_port
from harness.paths import ensure_private_dir

__all__ = ["NginxRelay", "nginx_binary", "started_nginx"]

_CONFIG = """daemon off;
master_process off;
worker_processes 1;
pid {work}/nginx.pid;
error_log {work}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {work}/body;
  proxy_temp_path {work}/proxy;
  client_max_body_size 16m;
  upstream engine {{ server {upstream}; keepalive 128; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://engine;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 600s;
    }}
  }}
}}
"""


@dataclass(frozen=True)
class NginxRelay:
    base_url: str  # http://127.0.0.1:PORT (the engine's paths below it)
    pid: int  # the one nginx process: it accepts and relays


def nginx_binary() -> str | None:
    """Debian's nginx, where installed (``/usr/sbin`` is not on every PATH)."""
    found = shutil.which("nginx")
    if found is None and Path("/usr/sbin/nginx").is_file():
        found = "/usr/sbin/nginx"
    return found


@contextmanager
def started_nginx(upstream_url: str, work: Path, binary: str | None = None, timeout_s: float = 15.0) -> Iterator[NginxRelay]:
    """nginx relaying ``127.0.0.1:PORT`` to ``upstream_url`` (the engine's origin) until the block ends."""
    exe = binary or nginx_binary()
    if exe is None:
        raise RuntimeError("nginx is not installed (make nginx: Debian's nginx-light)")
    folder = ensure_private_dir(work)
    upstream = urlsplit(upstream_url).netloc
    port = free_port()
    conf = folder / "nginx.conf"
    conf.write_text(_CONFIG.format(work=folder, upstream=upstream, port=port))
    proc = subprocess.Popen(
        [exe, "-p", str(folder), "-c", str(conf), "-e", str(folder / "error.log")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                log = (folder / "error.log").read_text(errors="replace")[-800:] if (folder / "error.log").is_file() else ""
                raise RuntimeError(f"nginx exited ({proc.returncode}) before it listened: {log}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"nginx did not listen on {port} within {timeout_s:.0f} s") from None
                time.sleep(0.05)
        yield NginxRelay(f"http://127.0.0.1:{port}", proc.pid)
    finally:
        stop_process(proc, 10)
