"""A tiny offline python-env runtime for install tests: a hand-built wheel that provides
``torch``, ``sglang`` and ``sglang.srt.entrypoints.http_server`` (which imports sgl_kernel the
way SGLang does), a hash-pinned lock for it, and a catalog naming it beside the real shim."""

from __future__ import annotations

import base64
import hashlib
import shutil
import zipfile
from pathlib import Path

from harness.runtimes import runtime_source_dir
from tests.harness.runtimes.conftest import GENERIC

NAME = "fake-sglang-cpu"

SERVER_OK = "import sgl_kernel\nfrom sgl_kernel.flash_attn import flash_attn_varlen_func\nREADY = True\n"
SERVER_BROKEN = "raise ImportError('no server here')\n"


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(folder: Path, server_source: str) -> Path:
    files = {
        "torch/__init__.py": "__version__ = '0.0.fake'\n",
        "sglang/__init__.py": "__version__ = '0.0.fake'\n",
        "sglang/srt/__init__.py": "",
        "sglang/srt/entrypoints/__init__.py": "",
        "sglang/srt/entrypoints/http_server.py": server_source,
        "fakesgl-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: fakesgl\nVersion: 0.1\n",
        "fakesgl-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{p},{_record_hash(c.encode())},{len(c.encode())}\n" for p, c in files.items())
    files["fakesgl-0.1.dist-info/RECORD"] = record + "fakesgl-0.1.dist-info/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / "fakesgl-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, content in files.items():
            zf.writestr(zipfile.ZipInfo(path, (2020, 1, 1, 0, 0, 0)), content)
    return wheel


def make_catalog(base: Path, server_source: str = SERVER_OK) -> Path:
    """``base/catalog/runtimes.toml`` with one python-env runtime; wheels in ``base/wheels``."""
    wheel = build_wheel(base / "wheels", server_source)
    folder = base / "catalog" / "runtimes" / NAME
    shutil.copytree(runtime_source_dir(GENERIC) / "shim", folder / "shim", ignore=shutil.ignore_patterns("__pycache__"))
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (folder / "requirements.lock").write_text(f"fakesgl==0.1 \\\n    --hash=sha256:{sha}\n")
    toml = base / "catalog" / "runtimes.toml"
    toml.write_text(
        f"""schema_version = "1"

[[runtime]]
name = "{NAME}"
engine_version = "0.0.fake"
backend = "cpu"
cpu_feature_requirement = "none"
certifiable = false
launch_env = {{ SGLANG_USE_CPU_ENGINE = "1" }}

[runtime.package]
kind = "python-env"
python = "3.11"
lock_file = "requirements.lock"
files = ["shim/sgl_kernel/__init__.py"]
pythonpath = ["shim"]

[[runtime]]
name = "fake-oci-pinned"
engine_version = "0.0.fake"
backend = "cuda"
certifiable = true
engine_commit = "{"c" * 40}"

[runtime.package]
kind = "oci"
image = "example.invalid/sglang"
digest = "sha256:{"d" * 64}"
"""
    )
    return toml
