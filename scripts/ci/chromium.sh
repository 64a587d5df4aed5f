#!/usr/bin/env bash
# Debian's headless Chromium, used by the report DOM tests (tests/reports). Idempotent; needs root to install.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != "0" ]; then
  echo "chromium is missing and this is not root: install Debian's chromium package" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null || true
apt-get install -y -qq --no-install-recommends chromium >/dev/null
chromium --version
