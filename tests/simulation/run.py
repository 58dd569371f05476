"""Standalone runner for many simulation seeds.

    .venv/bin/python -m tests.simulation.run --seeds 100000 [--start S] [--jobs 2]

Prints progress and every failing seed with its replay command; exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from tests.simulation.cluster import run_seed


def _run_range(bounds: tuple[int, int]) -> list[tuple[int, str]]:
    failures = []
    for seed in range(*bounds):
        try:
            run_seed(seed)
        except AssertionError as exc:
            failures.append((seed, str(exc)))
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=1000)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--chunk", type=int, default=500)
    args = parser.parse_args(argv)

    chunks = [
        (s, min(s + args.chunk, args.start + args.seeds))
        for s in range(args.start, args.start + args.seeds, args.chunk)
    ]
    began = time.monotonic()
    done = 0
    failed: list[tuple[int, str]] = []
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for (lo, hi), failures in zip(chunks, pool.map(_run_range, chunks), strict=True):
            done += hi - lo
            failed.extend(failures)
            for seed, message in failures:
                print(f"FAIL seed {seed}: {message}", flush=True)
            elapsed = time.monotonic() - began
            print(
                f"{done}/{args.seeds} seeds ({lo}..{hi - 1}) in {elapsed:.0f}s, {len(failed)} failed",
                flush=True,
            )
    if failed:
        print("failing seeds:", " ".join(str(s) for s, _ in failed))
        return 1
    print(f"all {args.seeds} seeds passed (start {args.start})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
