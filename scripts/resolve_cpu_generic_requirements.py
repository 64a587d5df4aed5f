#!/usr/bin/env python3.11
"""Re-resolve the generic-CPU runtime's lock: ``scripts/resolve_runtime_requirements.py sglang-0.5.23-cpu-generic [...]``."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from resolve_runtime_requirements import main

if __name__ == "__main__":
    raise SystemExit(main(["sglang-0.5.23-cpu-generic", *sys.argv[1:]]))
