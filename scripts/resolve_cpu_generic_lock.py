#!/usr/bin/env python3.11
"""Re-resolve the hash-pinned lock of the generic-CPU SGLang runtime (stdlib only).

Produces ``catalog/runtimes/sglang-0.5.23-cpu-generic/requirements.in`` (the top-level
inputs) and ``requirements.lock`` (``pip install --require-hashes --no-deps`` format).

How: in a throwaway Python 3.11 venv,

1. download the ``sglang==0.5.23`` wheel (no deps) and read its ``Requires-Dist``;
2. keep every unconditional requirement except the CUDA-only/optional packages in
   :data:`EXCLUDED` (see shared/reference/sglang-on-generic-cpu.md), replace SGLang's
   torch pin by the consistent local pair ``torch==2.14.1`` + ``torchvision==0.29.1``;
3. ``pip install --dry-run --ignore-installed --only-binary :all: --report`` those inputs (the
   report lists every package with the sha256 of the exact wheel pip chose; nothing is
   installed), then the same for ``sglang==0.5.23 --no-deps``;
4. write the lock from the two reports, sorted, one ``name==version --hash=sha256:...`` each;
5. with ``--verify``: build a second fresh venv from the lock alone with
   ``pip install --require-hashes --no-deps -r requirements.lock`` and import SGLang's server.

Usage: ``python3.11 scripts/resolve_cpu_generic_lock.py [--workdir DIR] [--verify]``.
It uses pip's configuration of this machine (find-links / extra index for the local torch pair).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

SGLANG = "sglang==0.5.23"
TORCH_PAIR = ["torch==2.14.1", "torchvision==0.29.1"]
# Left out: CUDA-only kernels, audio/video/vision extras and hub clients a Llama text model never needs.
EXCLUDED = {
    "torch",
    "torchvision",  # replaced by TORCH_PAIR
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
# Needed at import time on CPU (the wheel lists it too; kept explicit so it survives edits of EXCLUDED).
ADDED = ["soundfile"]

HERE = Path(__file__).resolve().parent.parent / "catalog" / "runtimes" / "sglang-0.5.23-cpu-generic"


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def run(cmd: list[str], **kw: object) -> None:
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, **kw)  # type: ignore[call-overload]


def requires_dist(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]


def inputs_from(reqs: list[str]) -> list[str]:
    kept: list[str] = []
    for req in reqs:
        if "extra ==" in req:
            continue
        name = norm(re.split(r"[\s<>=!~;\[(]", req, maxsplit=1)[0])
        if name in EXCLUDED:
            continue
        kept.append(req)
    names = {norm(re.split(r"[\s<>=!~;\[(]", r, maxsplit=1)[0]) for r in kept}
    kept += [a for a in ADDED if norm(a) not in names]
    return [*TORCH_PAIR, *sorted(kept, key=str.lower)]


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
            import hashlib

            sha = hashlib.sha256(Path(url[len("file://") :]).read_bytes()).hexdigest()
        lines.append(f"{norm(meta['name'])}=={meta['version']} \\\n    --hash=sha256:{sha}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--verify", action="store_true", help="install the lock into a fresh venv and import SGLang")
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="resolve-sglang-"))
    work.mkdir(parents=True, exist_ok=True)
    venv = work / "venv"
    if venv.exists():
        shutil.rmtree(venv)
    run([sys.executable, "-m", "venv", str(venv)])
    py = str(venv / "bin" / "python")
    pip = [py, "-m", "pip", "--disable-pip-version-check"]

    dl = work / "dl"
    run([*pip, "download", "--no-deps", SGLANG, "-d", str(dl)])
    wheel = next(dl.glob("sglang-*.whl"))
    inputs = inputs_from(requires_dist(wheel))
    req_in = work / "requirements.in"
    req_in.write_text("\n".join(inputs) + "\n")
    constraints = work / "constraints.txt"
    constraints.write_text("\n".join(TORCH_PAIR) + "\n")

    deps_report = work / "deps-report.json"
    resolve = [*pip, "install", "--dry-run", "--ignore-installed", "--only-binary", ":all:"]
    run([*resolve, "--report", str(deps_report), "-r", str(req_in), "-c", str(constraints)])
    sg_report = work / "sglang-report.json"
    run([*resolve, "--no-deps", "--report", str(sg_report), str(wheel)])

    lines = lock_lines(json.loads(deps_report.read_text()))
    sg = json.loads(sg_report.read_text())
    # the sglang wheel was installed from the downloaded file: hash that file, record the PyPI name/version
    import hashlib

    sg_sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    sg_meta = sg["install"][0]["metadata"]
    lines.append(f"{norm(sg_meta['name'])}=={sg_meta['version']} \\\n    --hash=sha256:{sg_sha}")
    lines.sort()
    header = [
        "# Hash-pinned lock of the generic-CPU SGLang runtime (sglang-0.5.23-cpu-generic).",
        "# Generated by scripts/resolve_cpu_generic_lock.py for CPython 3.11 on manylinux x86_64; do not edit by hand.",
        "# Install: pip install --require-hashes --no-deps -r requirements.lock",
        "# Inputs: requirements.in (sglang installed with --no-deps; CUDA-only/optional deps left out).",
        "",
    ]
    HERE.mkdir(parents=True, exist_ok=True)
    (HERE / "requirements.in").write_text(
        "# Top-level inputs of requirements.lock (written by scripts/resolve_cpu_generic_lock.py).\n"
        f"# {SGLANG} itself is installed with --no-deps.\n" + req_in.read_text()
    )
    (HERE / "requirements.lock").write_text("\n".join(header + lines) + "\n")
    print(f"wrote {HERE / 'requirements.lock'} ({len(lines)} packages)", file=sys.stderr)

    if args.verify:
        check = work / "verify-venv"
        if check.exists():
            shutil.rmtree(check)
        run([sys.executable, "-m", "venv", str(check)])
        cpy = str(check / "bin" / "python")
        run([cpy, "-m", "pip", "install", "--require-hashes", "--no-deps", "-r", str(HERE / "requirements.lock")])
        env = dict(os.environ, SGLANG_USE_CPU_ENGINE="1", PYTHONPATH=str(HERE / "shim"), PYTHONDONTWRITEBYTECODE="1")
        run([cpy, "-c", "import sglang.srt.entrypoints.http_server"], env=env)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
