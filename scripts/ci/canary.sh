#!/usr/bin/env bash
# CI hardware canary (issue 6, item 7): certify this machine's GPU, then compare the new signed entry with
# the last signed entry of the same runtime × model × profile × device (python -m certify.canary).
#
# Usage: scripts/ci/canary.sh [extra pytest args]      (run from anywhere; uses the checkout's .venv)
#
# Environment (all optional):
#   CANARY_DEVICE        cuda (default) | cpu
#   CANARY_PROFILE       baseline (default) | throughput
#   CANARY_MODEL         fixture:tiny (default) | local/ALIAS | PATH
#   CANARY_REPORT_DIR    where pytest writes results, the signed entry and pages (default reports/out/canary-<UTC stamp>)
#   CANARY_HISTORY_DIR   earlier signed entries, kept between runs (default $HITCH_ROOT/canary/history)
#   CANARY_ARTIFACTS_DIR where the report dir, the entry and the verdict are copied (default artifacts/canary)
#   CANARY_SIGN_KEY      Ed25519 private key file; default: the development key under HITCH_ROOT. Its public
#                        half (<key dir>/public) is trusted for the comparison, as are catalog/keys and
#                        $HITCH_ROOT/keys/public.
#   CANARY_RECORD=always add the new entry to the history even when it regressed (default: only when the
#                        canary passed, so a regression keeps failing until fixed or accepted by hand).
#   CANARY_MIN_P95_DELTA_MS  noise floor for the p95 comparison (default 0).
#
# Exit status: 0 no regression (or no earlier entry and a level other than failed), 1 regression (a failed
# level always is one), 2 no usable entry was produced.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
py="${PY:-$repo/.venv/bin/python}"
export HITCH_ROOT="${HITCH_ROOT:-$HOME/.local/share/hitch}"
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
device="${CANARY_DEVICE:-cuda}"
profile="${CANARY_PROFILE:-baseline}"
model="${CANARY_MODEL:-fixture:tiny}"
report_dir="${CANARY_REPORT_DIR:-$repo/reports/out/canary-$stamp}"
history_dir="${CANARY_HISTORY_DIR:-$HITCH_ROOT/canary/history}"
artifacts_dir="${CANARY_ARTIFACTS_DIR:-$repo/artifacts/canary}"
mkdir -p "$report_dir" "$history_dir" "$artifacts_dir"

sign_args=()
keys_args=(--keys "$repo/catalog/keys" --keys "$HITCH_ROOT/keys/public")
if [[ -n "${CANARY_SIGN_KEY:-}" ]]; then
  sign_args=(--sign-key "$CANARY_SIGN_KEY")
  # export the public half next to the key (<key dir>/public/<keyid>.pub.pem) so the comparison trusts it
  "$py" -c 'import sys; from pathlib import Path; from catalog.signing import describe_key; describe_key(Path(sys.argv[1]))' \
    "$CANARY_SIGN_KEY" >/dev/null
  keys_args+=(--keys "$(dirname "$CANARY_SIGN_KEY")/public")
fi

set +e
"$py" -m pytest certify --device "$device" --canary --profile "$profile" --model "$model" \
  --report-dir "$report_dir" ${sign_args[@]+"${sign_args[@]}"} -p no:cacheprovider -rfE "$@" 2>&1 | tee "$report_dir/pytest.log"
pytest_rc=${PIPESTATUS[0]}
set -e
echo "pytest certify exit status: $pytest_rc (a failing level is judged by the comparison below)"

shopt -s nullglob
entries=("$report_dir"/*.dsse.json)
shopt -u nullglob
if [[ ${#entries[@]} -ne 1 ]]; then
  echo "canary: expected one signed entry in $report_dir, found ${#entries[@]}" >&2
  cp -r "$report_dir" "$artifacts_dir/" || true
  exit 2
fi
entry="${entries[0]}"

set +e
"$py" -m certify.canary --entry "$entry" --history "$history_dir" "${keys_args[@]}" \
  --min-p95-delta-ms "${CANARY_MIN_P95_DELTA_MS:-0}" --out "$report_dir/canary.json"
canary_rc=$?
set -e

cp -r "$report_dir" "$artifacts_dir/"
cp "$entry" "$artifacts_dir/"
if [[ $canary_rc -eq 0 || "${CANARY_RECORD:-}" == "always" ]]; then
  cp "$entry" "$history_dir/"
  echo "canary: entry added to the history $history_dir"
fi
echo "canary: artifacts in $artifacts_dir (exit $canary_rc)"
exit "$canary_rc"
