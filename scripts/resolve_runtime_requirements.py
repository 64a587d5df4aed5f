#!/usr/bin/env python3.11
"""Re-resolve the hash-pinned lock of a python-env SGLang runtime of the catalog (stdlib only).

``python3.11 scripts/resolve_runtime_requirements.py NAME [--workdir DIR] [--verify]`` writes
``catalog/runtimes/NAME/requirements.in`` (the top-level inputs) and ``requirements.lock``
(``pip install --require-hashes --no-deps`` format) for one of :data:`RUNTIMES`:

``sglang-0.5.23-cpu-generic``
    SGLang's ``Requires-Dist`` minus the CUDA-only/optional packages of ``EXCLUDED`` (see
    shared/reference/sglang-on-generic-cpu.md), torch pinned to the local pair, ``sglang`` itself with
    ``--no-deps``; ``--verify`` imports the server with the ``sgl_kernel`` shim.
``sglang-0.5.23-cuda``
    SGLang with every unconditional dependency of its wheel — the real CUDA stack: ``sglang-kernel==0.4.10``,
    ``flashinfer_python[cu13]``, ``torch==2.14.1`` (the CUDA 13 build and its ``nvidia-*`` wheels), ... —
    resolved from the package index alone (no local wheel folder, no machine constraints: the lock must
    install on any GPU machine). ``--verify`` installs it into a fresh venv and imports the server (no GPU
    needed for the import).

How: in a throwaway Python 3.11 venv, ``pip install --dry-run --ignore-installed --only-binary :all:
--report`` the inputs (the report lists every package with the sha256 of the exact wheel pip chose; nothing
is installed), then write the lock from the report(s), sorted, one ``name==version --hash=sha256:...`` each.
The sizes of the wheels pip fetched to read their metadata are summed into ``lock-size.txt`` in the workdir.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

SGLANG = "sglang==0.5.23"
CATALOG = Path(__file__).resolve().parent.parent / "catalog" / "runtimes"


@dataclass(frozen=True)
class RuntimeSpec:
    name: str
    title: str
    torch: tuple[str, ...]
    excluded: frozenset[str] = frozenset()  # dropped from SGLang's Requires-Dist (cpu-generic only)
    added: tuple[str, ...] = ()
    extra_inputs: tuple[str, ...] = ()  # pins stated beside sglang (they must agree with its wheel)
    sglang_no_deps: bool = False  # True: sglang installed with --no-deps from its own report
    index_only: bool = False  # True: ignore this machine's pip configuration (find-links, constraints)
    verify_env: dict[str, str] = field(default_factory=dict)
    pythonpath: tuple[str, ...] = ()


RUNTIMES = {
    spec.name: spec
    for spec in (
        RuntimeSpec(
            name="sglang-0.5.23-cpu-generic",
            title="generic-CPU SGLang runtime",
            torch=("torch==2.14.1", "torchvision==0.29.1"),
            # Left out: CUDA-only kernels, audio/video/vision extras and hub clients a Llama text model never needs.
            excluded=frozenset(
                {
                    "torch",
                    "torchvision",  # replaced by the torch pair
                    "sglang-kernel",
                    "flashinfer-python",
                    "flash-attn-4",
                    "cuda-python",
                    "nvidia-cutlass-dsl",
                    "nvidia-mathdx",
                    "nvshmem4py-cu13",
                    "quack-kernels",
                    "sgl-deep-ep",
                    "sgl-deep-gemm",
                    "sgl-flash-mla",
                    "humming-kernels",
                    "tilelang",
                    "torch-memory-saver",
                    "torchaudio",
                    "torchcodec",
                    "timm",
                    "numba",
                    "kernels",
                    "modelscope",
                    "mistral-common",
                    "deepseek-recipe",
                    "tml-renderers",
                    "smg-grpc-servicer",
                }
            ),
            # Needed at import time on CPU (the wheel lists it too; kept explicit so it survives edits of excluded).
            added=("soundfile",),
            sglang_no_deps=True,
            verify_env={"SGLANG_USE_CPU_ENGINE": "1"},
            pythonpath=("shim",),
        ),
        RuntimeSpec(
            name="sglang-0.5.23-cuda",
            title="CUDA SGLang runtime",
            torch=("torch==2.14.1",),
            extra_inputs=("sglang-kernel==0.4.10", "flashinfer_python[cu13]==0.7.2"),
            index_only=True,
        ),
    )
}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def req_name(req: str) -> str:
    return norm(re.split(r"[\s<>=!~;\[(]", req, maxsplit=1)[0])


def run(cmd: list[str], env: dict[str, str] | None = None, log: Path | None = None) -> None:
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    if log is None:
        subprocess.run(cmd, check=True, env=env)
        return
    with log.open("a") as fh:
        subprocess.run(cmd, check=True, env=env, stdout=fh, stderr=subprocess.STDOUT)


def requires_dist(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]


def inputs_for(spec: RuntimeSpec, wheel: Path) -> list[str]:
    if not spec.sglang_no_deps:
        return [SGLANG, *spec.torch, *spec.extra_inputs]
    kept = [r for r in requires_dist(wheel) if "extra ==" not in r and req_name(r) not in spec.excluded]
    names = {req_name(r) for r in kept}
    kept += [a for a in spec.added if norm(a) not in names]
    return [*spec.torch, *sorted(kept, key=str.lower)]


def lock_lines(report: dict[str, object]) -> list[str]:
    lines = []
    for item in report["install"]:  # type: ignore[attr-defined]
        meta = item["metadata"]
        info = item["download_info"]
        sha = info.get("archive_info", {}).get("hashes", {}).get("sha256")
        if not sha:
            url = info["url"]
            if not url.startswith("file://"):
                raise SystemExit(f"no sha256 for {meta['name']} from {url}")
            sha = hashlib.sha256(Path(url[len("file://") :]).read_bytes()).hexdigest()
        lines.append(f"{norm(meta['name'])}=={meta['version']} \\\n    --hash=sha256:{sha}")
    return lines


_SIZE = re.compile(r"Downloading (\S+\.whl) \(([\d.]+) (kB|MB|GB|bytes)\)")
_UNIT = {"bytes": 1, "kB": 1e3, "MB": 1e6, "GB": 1e9}


def wheel_bytes(log: Path) -> int:
    """Sum of the wheel sizes pip printed while resolving (each wheel once)."""
    sizes = {m.group(1): float(m.group(2)) * _UNIT[m.group(3)] for m in _SIZE.finditer(log.read_text(errors="replace"))}
    return int(sum(sizes.values()))


def pip_env(spec: RuntimeSpec) -> dict[str, str]:
    env = dict(os.environ)
    if spec.index_only:
        env["PIP_CONFIG_FILE"] = os.devnull  # no find-links, extra indexes or constraints of this machine
        for key in ("PIP_FIND_LINKS", "PIP_CONSTRAINT", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL"):
            env.pop(key, None)
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("runtime", choices=sorted(RUNTIMES))
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--verify", action="store_true", help="install the lock into a fresh venv and import SGLang")
    args = ap.parse_args(argv)
    spec = RUNTIMES[args.runtime]
    here = CATALOG / spec.name
    work = args.workdir or Path(tempfile.mkdtemp(prefix="resolve-sglang-"))
    work.mkdir(parents=True, exist_ok=True)
    venv = work / "venv"
    if venv.exists():
        shutil.rmtree(venv)
    env = pip_env(spec)
    run([sys.executable, "-m", "venv", str(venv)])
    py = str(venv / "bin" / "python")
    pip = [py, "-m", "pip", "--disable-pip-version-check"]
    log = work / "pip.log"

    dl = work / "dl"
    run([*pip, "download", "--no-deps", SGLANG, "-d", str(dl)], env=env, log=log)
    wheel = next(dl.glob("sglang-*.whl"))
    inputs = inputs_for(spec, wheel)
    req_in = work / "requirements.in"
    req_in.write_text("\n".join(inputs) + "\n")
    constraints = work / "constraints.txt"
    constraints.write_text("\n".join(spec.torch) + "\n")

    resolve = [*pip, "install", "--dry-run", "--ignore-installed", "--only-binary", ":all:"]
    deps_report = work / "deps-report.json"
    run([*resolve, "--report", str(deps_report), "-r", str(req_in), "-c", str(constraints)], env=env, log=log)
    lines = lock_lines(json.loads(deps_report.read_text()))
    if spec.sglang_no_deps:
        sg_report = work / "sglang-report.json"
        run([*resolve, "--no-deps", "--report", str(sg_report), str(wheel)], env=env, log=log)
        # sglang was installed from the downloaded file: hash that file, record the index name/version
        sg_meta = json.loads(sg_report.read_text())["install"][0]["metadata"]
        sg_sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
        lines.append(f"{norm(sg_meta['name'])}=={sg_meta['version']} \\\n    --hash=sha256:{sg_sha}")
    lines.sort()
    how = "sglang and all its deps"
    if spec.sglang_no_deps:
        how = "sglang installed with --no-deps; CUDA-only/optional deps left out"
    header = [
        f"# Hash-pinned lock of the {spec.title} ({spec.name}).",
        f"# Generated by scripts/resolve_runtime_requirements.py {spec.name} for CPython 3.11 on manylinux x86_64; do not edit.",
        "# Install: pip install --require-hashes --no-deps -r requirements.lock",
        f"# Inputs: requirements.in ({how}).",
        "",
    ]
    here.mkdir(parents=True, exist_ok=True)
    note = f"# {SGLANG} itself is installed with --no-deps.\n" if spec.sglang_no_deps else ""
    (here / "requirements.in").write_text(
        f"# Top-level inputs of requirements.lock (written by scripts/resolve_runtime_requirements.py {spec.name}).\n"
        + note
        + req_in.read_text()
    )
    (here / "requirements.lock").write_text("\n".join(header + lines) + "\n")
    size = wheel_bytes(log)
    (work / "lock-size.txt").write_text(f"{len(lines)} packages, {size} bytes of wheels\n")
    print(f"wrote {here / 'requirements.lock'} ({len(lines)} packages, {size / 1e9:.2f} GB of wheels)", file=sys.stderr)

    if args.verify:
        check = work / "verify-venv"
        if check.exists():
            shutil.rmtree(check)
        run([sys.executable, "-m", "venv", str(check)])
        cpy = str(check / "bin" / "python")
        install = [cpy, "-m", "pip", "install", "--require-hashes", "--no-deps", "--only-binary", ":all:"]
        run([*install, "-r", str(here / "requirements.lock")], env=env)
        verify_env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", **spec.verify_env)
        if spec.pythonpath:
            verify_env["PYTHONPATH"] = os.pathsep.join(str(here / p) for p in spec.pythonpath)
        run([cpy, "-c", "import sglang.srt.entrypoints.http_server"], env=verify_env)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
