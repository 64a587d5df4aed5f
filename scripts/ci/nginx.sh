#!/usr/bin/env bash
# Debian's nginx-light, the overhead benchmark's native relay arm (certify/perf/nginx_relay.py). Idempotent;
# needs root to install. Nothing is started here: the benchmark runs its own nginx in the foreground.
set -euo pipefail
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
  exit 0
fi
if [ "$(id -u)" != "0" ]; then
  echo "nginx is missing and this is not root: install Debian's nginx-light package" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null || true
# no init system here, but a policy-rc.d refusal keeps the package from starting a server on port 80 anywhere
policy=/usr/sbin/policy-rc.d
made=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made=1
fi
apt-get install -y -qq --no-install-recommends nginx-light >/dev/null || { [ "$made" = 1 ] && rm -f "$policy"; exit 1; }
[ "$made" = 1 ] && rm -f "$policy"
/usr/sbin/nginx -v
