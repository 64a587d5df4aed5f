#!/usr/bin/env bash
# Install the pinned Codex CLI (npm @openai/codex, with its optional linux binary) into a project-local
# prefix. Idempotent: when the pinned version's binary is already there it only checks it.
# Never touches ~/.codex; the harness gives every run its own CODEX_HOME (harness/agents/codex_home.py).
# Facts behind the pin: shared/reference/codex-cli-local-provider.md (the binary is an optional dependency:
# `--omit=optional` leaves it out and the wrapper fails with "Missing optional dependency").
set -euo pipefail
cd "$(dirname "$0")/../.."

VERSION=${CODEX_VERSION:-0.171.0}   # keep equal to harness/agents/codex_install.py CODEX_VERSION
PREFIX=${CODEX_PREFIX:-.tools/codex}

installed_version() {
  local pj="$PREFIX/node_modules/@openai/codex/package.json"
  [[ -r $pj ]] && node -p "require('./$pj').version" 2>/dev/null || true
}

binary() {
  find "$PREFIX/node_modules/@openai" -path '*vendor*' -type f -name codex 2>/dev/null | head -n1
}

if [[ $(installed_version) == "$VERSION" ]] && [[ -n $(binary) ]]; then
  echo "install_codex: @openai/codex@$VERSION already in $PREFIX"
  exit 0
fi

if ! command -v npm >/dev/null 2>&1 && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
  echo "install_codex: npm is missing; installing Debian's nodejs and npm"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null \
    || { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null; }
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "install_codex: npm is missing (install nodejs/npm)" >&2
  exit 1
fi

tmp="$PREFIX.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
echo '{"name":"hitch-codex-pin","private":true}' > "$tmp/package.json"
npm install --prefix "$tmp" --no-audit --no-fund --include=optional --save-exact "@openai/codex@$VERSION" >/dev/null
rm -rf "$PREFIX"
mkdir -p "$(dirname "$PREFIX")"
mv "$tmp" "$PREFIX"
trap - EXIT
bin=$(binary)
if [[ -z $bin ]]; then
  echo "install_codex: the native binary (optional dependency) was not installed" >&2
  exit 1
fi
echo "install_codex: @openai/codex@$VERSION -> $bin ($("$bin" --version))"
