"""Benchmark: 10,000 paired bootstrap resamples over 1,000 test pairs (target: under 1 s).

Run: `OMP_NUM_THREADS=1 .venv/bin/python bench/bootstrap_bench.py`. Prints the best of `--repeats`
timings of `harness.stats.estimators.paired_bootstrap_diff` on two arms' R@1 hits drawn at the rerun
article's rates (.243 and .140, section "Our rerun"), and the interval it produced.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from harness.stats.estimators import paired_bootstrap_diff

TARGET_S = 1.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="test pairs")
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    good = (rng.random(a.n) < 0.243).astype(np.float64)
    bad = (rng.random(a.n) < 0.140).astype(np.float64)
    times = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        diff, iv = paired_bootstrap_diff(good, bad, n_resamples=a.resamples, seed=0)
        times.append(time.perf_counter() - t0)
    best = min(times)
    print(f"paired bootstrap: {a.resamples} resamples x {a.n} pairs: best {best:.3f} s of "
          f"{a.repeats} (target < {TARGET_S:.0f} s: {'met' if best < TARGET_S else 'MISSED'})")
    print(f"diff {diff:+.4f}, {iv.label()}: [{iv.lo:+.4f}, {iv.hi:+.4f}]")
    return 0 if best < TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
