#!/usr/bin/env bash
# Certify this GPU machine (issue 18): `pytest certify --device cuda` on the real CUDA runtime, from a fresh
# checkout, in one go. Meant for a fresh NVIDIA machine (root, the package index reachable, no Docker needed);
# budget: under 10 minutes on one H200 (most of it the ~4.4 GB runtime install).
#
#   scripts/device/cuda_certify.sh [extra pytest args]
#
# Steps (each timed): the project's venv (.venv, `pip install -e .`) → `hitch local doctor --device cuda`
# (NVML facts; stops here when the doctor refuses the GPU) → `hitch runtime install sglang-0.5.23-cuda`
# (private venv under HITCH_ROOT from the committed hash-pinned lock; install time and size printed) →
# the model: the real fixture (`hitch fixtures smollm2`) when that command exists, else fixture:tiny →
# `pytest certify --device cuda` → the level, the failing checks and the paths of the entry and the pages.
#
# Environment (all optional):
#   PYTHON          interpreter for the project venv (default: python3.11; the runtime's lock needs 3.11)
#   HITCH_ROOT      default: a fresh directory under /tmp (nothing of an earlier run is reused)
#   REPORT_DIR      default: reports/out/cuda-<UTC stamp>
#   CERTIFY_ARGS    extra arguments for pytest (also accepted as this script's arguments)
#
# Exit status: pytest's (0 only when the level is not failed); 2 when a step before pytest failed.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
export PYTHONUNBUFFERED=1
python="${PYTHON:-python3.11}"
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
export HITCH_ROOT="${HITCH_ROOT:-$(mktemp -d /tmp/hitch-cuda-XXXXXX)}"
report_dir="${REPORT_DIR:-$repo/reports/out/cuda-$stamp}"
runtime="sglang-0.5.23-cuda"
started=$SECONDS
mkdir -p "$report_dir"

step() { printf '\n== [%4ds] %s\n' "$((SECONDS - started))" "$*"; }
die() { printf '\ncuda_certify: %s (after %ds)\n' "$*" "$((SECONDS - started))" >&2; exit 2; }

step "machine"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=index,uuid,name,driver_version,memory.total,memory.used --format=csv
command -v "$python" >/dev/null || die "$python not found (the CUDA runtime's lock is for CPython 3.11; set PYTHON)"
echo "python: $("$python" --version 2>&1)  HITCH_ROOT: $HITCH_ROOT  report: $report_dir"

step "project venv"
if [[ ! -x .venv/bin/hitch ]]; then
  "$python" -m venv .venv || die "cannot create .venv"
  .venv/bin/python -m pip install -q --upgrade pip || die "pip upgrade failed"
  .venv/bin/python -m pip install -q -e '.[dev]' || die "installing the project failed"
fi
hitch=.venv/bin/hitch

step "doctor (cuda)"
"$hitch" local doctor --device cuda || echo "(the doctor's verdict is above; pytest certify records it too)"
"$hitch" local doctor --device cuda --json >"$report_dir/doctor.json" 2>/dev/null
if ! .venv/bin/python -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d["cuda"]["available"] else 1)' \
  "$report_dir/doctor.json"; then
  die "NVML sees no usable NVIDIA driver/GPU: nothing to certify on cuda (see the doctor above)"
fi

step "CUDA runtime $runtime (hash-checked install)"
t0=$SECONDS
"$hitch" runtime install "$runtime" --json >"$report_dir/runtime-install.json" || die "installing $runtime failed"
.venv/bin/python - "$report_dir/runtime-install.json" "$((SECONDS - t0))" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
size = d.get("venv_bytes") or 0
print(f"runtime {d['name']}: {'already installed' if d['already_installed'] else 'installed'} in {sys.argv[2]} s, "
      f"venv {size / 1e9:.2f} GB at {d['install_dir']}; versions {d.get('versions')}")
EOF

step "model"
model="fixture:tiny"
if "$hitch" fixtures smollm2 --help >/dev/null 2>&1; then
  "$hitch" fixtures smollm2 || die "building the smollm2 fixture failed"
  model="local/smollm2"
else
  echo "no 'hitch fixtures smollm2' in this checkout: the tiny checkpoint (fixture:tiny), built by the session"
fi

step "pytest certify --device cuda --model $model"
# shellcheck disable=SC2086  # CERTIFY_ARGS is a list of words on purpose
.venv/bin/python -m pytest certify --device cuda --model "$model" --report-dir "$report_dir" -p no:cacheprovider -rfE \
  ${CERTIFY_ARGS:-} "$@" 2>&1 | tee "$report_dir/pytest.log"
rc=${PIPESTATUS[0]}

step "result (pytest exit $rc)"
.venv/bin/python - "$report_dir" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
results = out / "results.json"
if not results.is_file():
    print(f"no results.json in {out}: the session wrote no outputs (see pytest.log)")
    sys.exit(0)
r = json.loads(results.read_text())
print(f"level: {r['level']}  runtime: {r.get('runtime_name')}  model: {r.get('model_id')}")
for reason in r.get("reasons", [])[:10]:
    print(f"  reason: {reason}")
failing = [c for c in r.get("checks", []) if c.get("status") != "passed" and c.get("required")]
print(f"failing required checks: {len(failing)}")
for c in failing:
    print(f"  {c['id']}: {c['status']} {str((c.get('details') or {}).get('reason', ''))[:200]}")
for gpu in (r.get("hardware", {}).get("cuda") or {}).get("gpus", []):
    print(f"gpu: {gpu['uuid']} {gpu['name']} cc {gpu['compute_capability']}")
for entry in sorted(out.glob("*.dsse.json")):
    print(f"signed entry: {entry}")
for page in ("run.html", "matrix.html"):
    if (out / page).is_file():
        print(f"page: {out / page}")
print(f"results: {results}")
EOF
echo "total: $((SECONDS - started)) s"
exit "$rc"
