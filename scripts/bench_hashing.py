"""Benchmark: the store's streaming sha256 (harness.store.hashing.hash_file) vs `sha256sum`.

Creates a 1 GiB file of random bytes in /tmp (or --dir), hashes it 5 times with each,
prints both medians and the ratio ours/sha256sum. Both read from the page cache after the
first run, so this measures hashing throughput, not the disk.

    .venv/bin/python scripts/bench_hashing.py [--size-mib 1024] [--runs 5] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from harness.store.hashing import hash_file


def _make_file(directory: Path, size_mib: int) -> Path:
    fd, name = tempfile.mkstemp(prefix="bench-hash-", suffix=".bin", dir=directory)
    block = os.urandom(1024 * 1024)
    with os.fdopen(fd, "wb") as fh:
        for i in range(size_mib):
            fh.write(block[i % 251 :] + block[: i % 251])  # distinct blocks, cheap to make
    return Path(name)


def _time(fn: object) -> float:
    start = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=Path("/tmp"))
    args = parser.parse_args()
    path = _make_file(args.dir, args.size_mib)
    try:
        ours_hex = hash_file(path).sha256_hex
        theirs_hex = subprocess.run(["sha256sum", str(path)], check=True, capture_output=True, text=True).stdout.split()[0]
        assert ours_hex == theirs_hex, "digests differ"
        ours, theirs = [], []
        for _ in range(args.runs):  # interleaved so both see the same cache and machine load
            ours.append(_time(lambda: hash_file(path)))
            theirs.append(_time(lambda: subprocess.run(["sha256sum", str(path)], check=True, capture_output=True)))
        mib = args.size_mib
        ours_med, theirs_med = statistics.median(ours), statistics.median(theirs)
        print(f"file: {mib} MiB, runs: {args.runs} each, digest {ours_hex[:16]}... (both agree)")
        print(f"hitch hash_file : median {ours_med:.3f} s  ({mib / ours_med:.0f} MiB/s)  runs {[round(t, 3) for t in ours]}")
        print(
            f"sha256sum       : median {theirs_med:.3f} s  ({mib / theirs_med:.0f} MiB/s)  runs {[round(t, 3) for t in theirs]}"
        )
        print(f"ratio hitch/sha256sum: {ours_med / theirs_med:.3f}")
        if shutil.which("openssl"):  # reference ceiling: the same OpenSSL sha256 hashlib uses, in C
            openssl = ["openssl", "dgst", "-sha256", str(path)]
            ref = [_time(lambda: subprocess.run(openssl, check=True, capture_output=True)) for _ in range(2)]
            ref_med = statistics.median(ref)
            print(f"openssl dgst    : median {ref_med:.3f} s  ({mib / ref_med:.0f} MiB/s)  (reference, 2 runs)")
    finally:
        path.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
