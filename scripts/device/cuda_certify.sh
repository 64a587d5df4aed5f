#!/usr/bin/env bash
# Certify this GPU machine (issue 18): `pytest certify --device cuda` on the real CUDA runtime, from a fresh
# checkout, in one go. Meant for a fresh NVIDIA machine (root, the package index reachable, no Docker needed);
# budget: under 10 minutes on one H200 (most of it the ~4.4 GB runtime install).
#
#   scripts/device/cuda_certify.sh [--dry-run] [extra pytest args]
#
# Steps (each timed): the project's venv (.venv, `pip install -e .`) → `hitch local doctor --device cuda`
# (NVML facts; stops here when the doctor refuses the GPU) → `hitch runtime install sglang-0.5.23-cuda`
# (private venv under HITCH_ROOT from the committed hash-pinned requirements; install time and size printed) →
# `pytest certify --device cuda --model $MODEL` (the session builds the model fixture, drafts and seals the
# lock) → the level, the failing checks and the paths of the entry and the pages.
#
# --dry-run goes through the same steps on any machine, with or without a GPU, and stops before anything is
# installed or an engine starts: the doctor (without an NVIDIA driver: on a simulated NVML holding one H200,
# said so), the runtime's install plan (`hitch runtime plan`: every pinned wheel and its size as the package
# index lists it; nothing downloaded), the model imported into HITCH_ROOT, the draft CUDA lock (`hitch local
# lock`), the engine command line of its first start (`hitch local argv --probe`, read by SGLang's own parser
# and resolution when a runtime with the same SGLang is installed under SGLANG_PARSER_ROOT) and the pytest
# command; then it says where it stopped.
#
# Environment (all optional):
#   PYTHON          interpreter for the project venv (default: python3.11; the runtime's lock needs 3.11)
#   HITCH_ROOT      default: a fresh directory under /tmp (nothing of an earlier run is reused)
#   REPORT_DIR      default: reports/out/cuda-<UTC stamp>
#   MODEL           what is certified (default: fixture:smollm2); a dry run takes fixture:tiny, fixture:smollm2,
#                   a checkpoint directory or local/ALIAS of HITCH_ROOT
#   CERTIFY_ARGS    extra arguments for pytest (also accepted as this script's arguments)
#   SGLANG_PARSER_ROOT  dry run: the HITCH_ROOT holding a runtime with the CUDA runtime's SGLang (default:
#                   ~/.local/share/hitch, where `make runtime` installs the generic-CPU one)
#
# Exit status: pytest's (0 only when the level is not failed); 2 when a step before pytest failed. A dry run:
# 0 when every step went through, 2 when one failed.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
dry_run=0
pytest_args=()
for arg in "$@"; do
  if [[ "$arg" == "--dry-run" ]]; then dry_run=1; else pytest_args+=("$arg"); fi
done
set -- "${pytest_args[@]+"${pytest_args[@]}"}"
export PYTHONUNBUFFERED=1
python="${PYTHON:-python3.11}"
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
export HITCH_ROOT="${HITCH_ROOT:-$(mktemp -d /tmp/hitch-cuda-XXXXXX)}"
report_dir="${REPORT_DIR:-$repo/reports/out/cuda-$stamp}"
runtime="sglang-0.5.23-cuda"
model="${MODEL:-fixture:smollm2}"
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

# The doctor's JSON verdict into the report folder; true when NVML sees a driver and GPUs.
cuda_available() {
  "$hitch" local doctor --device cuda --json >"$report_dir/doctor.json" 2>/dev/null
  .venv/bin/python -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d["cuda"]["available"] else 1)' \
    "$report_dir/doctor.json"
}

step "doctor (cuda)"
if ((dry_run)) && [[ -z "${HITCH_SIMULATED_NVML:-}" ]] && ! cuda_available; then
  export HITCH_SIMULATED_NVML="$report_dir/simulated-nvml.json"
  echo '{"gpus": [{"uuid": "GPU-00000000-0000-4000-8000-0000000000d1"}]}' >"$HITCH_SIMULATED_NVML"
  echo "dry run: NVML sees no NVIDIA driver here; the inventory below comes from a simulated NVML ($HITCH_SIMULATED_NVML)"
fi
"$hitch" local doctor --device cuda || echo "(the doctor's verdict is above; pytest certify records it too)"
if ! cuda_available; then
  die "NVML sees no usable NVIDIA driver/GPU: nothing to certify on cuda (see the doctor above)"
fi
if [[ -n "${HITCH_SIMULATED_NVML:-}" ]]; then
  echo "NVML inventory: simulated ($HITCH_SIMULATED_NVML): tests only, never certifiable"
fi

if ((dry_run)); then
  step "CUDA runtime $runtime: install plan (nothing downloaded)"
  "$hitch" runtime plan "$runtime" || die "the install plan of $runtime does not resolve (see above)"

  step "model $model (imported into HITCH_ROOT)"
  src="$HITCH_ROOT/dry-run/model"
  case "$model" in
    fixture:tiny) alias=certify-tiny; "$hitch" fixtures checkpoint "$src" >/dev/null || die "building $model failed" ;;
    fixture:smollm2) alias=certify-smollm2; "$hitch" fixtures smollm2 "$src" >/dev/null || die "building $model failed" ;;
    fixture:*) die "a dry run builds fixture:tiny or fixture:smollm2, not $model" ;;
    local/*) alias="${model#local/}"; src="" ;;
    *) alias=certify-model; src="$model" ;;
  esac
  if [[ -n "$src" ]]; then
    "$hitch" models add "$src" --name "$alias" --force || die "importing $model failed"  # the alias names this run's model
  fi

  step "lock (draft: device cuda, runtime $runtime)"
  "$hitch" local lock "local/$alias" --device cuda --runtime "$runtime" --json >"$report_dir/lock.json" \
    || die "drafting the CUDA lock failed"
  .venv/bin/python - "$report_dir/lock.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
lock = d["lock"]
ex = lock["execution"]
print(f"inference_id {d['inference_id']}  runtime {d['runtime']}  profile {lock['profile']}  model {lock['model_id']}")
print(f"platform {json.dumps(ex['platform'], sort_keys=True)}")
print(f"attention {ex['attention_backend']}  sampling {ex['sampling_backend']}  context {ex['context_tokens_per_request']}"
      f"  max_running {ex['max_running_requests']}  tool-call parser {lock['protocol']['tool_call_parser']}")
EOF

  step "engine command line of the first (probe) start"
  parser_root="${SGLANG_PARSER_ROOT:-${XDG_DATA_HOME:-$HOME/.local/share}/hitch}"
  check=()
  if "$hitch" runtime list --json --root "$parser_root" 2>/dev/null | .venv/bin/python -c '
import json, sys
d = json.load(sys.stdin)
versions = {r["name"]: r["engine_version"] for r in d["runtimes"]}
sys.exit(0 if any(versions[name] == versions[sys.argv[1]] for name in d["installed"]) else 1)' "$runtime"; then
    check=(--check --parser-root "$parser_root")
  else
    echo "(not read by SGLang's own parser: no runtime with the SGLang of $runtime is installed under $parser_root)"
  fi
  "$hitch" local argv "$report_dir/lock.json" --probe "${check[@]+"${check[@]}"}" \
    || die "SGLang does not read the CUDA command line as the lock means it (see above)"

  step "pytest certify --device cuda --model $model (not run)"
  # shellcheck disable=SC2086  # CERTIFY_ARGS is a list of words on purpose
  printf 'would run:'
  printf ' %q' .venv/bin/python -m pytest certify --device cuda --model "$model" --report-dir "$report_dir" \
    -p no:cacheprovider -rfE ${CERTIFY_ARGS:-} "$@"
  printf '\n'

  step "dry run: stopped before installing $runtime and starting the engine (nothing installed, no GPU used)"
  echo "without --dry-run this machine installs $runtime (the plan above) and runs the pytest command above"
  exit 0
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
