"""Time and peak memory of mutual k-NN and recall@k at n = 1,000 and n = 30,000.

Widths are the paper's (image 768, text 384). Similarities are processed in row chunks
(`prh.metrics.CHUNK` rows at a time), so memory grows as CHUNK * n, never n^2.
Peak memory: tracemalloc's peak of numpy/Python allocations during the call, and the
process's peak RSS. Run: `OMP_NUM_THREADS=1 .venv/bin/python bench/metrics_bench.py`.
"""

from __future__ import annotations

import argparse
import resource
import time
import tracemalloc

import numpy as np

from prh import metrics


def bench(name: str, n: int, seed: int = 0) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    img = rng.standard_normal((n, 768)).astype(np.float32)
    txt = (img[:, :384] + rng.standard_normal((n, 384))).astype(np.float32)
    tracemalloc.start()
    start = time.perf_counter()
    if name == "mutual_knn":
        value = metrics.mutual_knn(img, txt, 10).mean()
    else:
        value = metrics.recall_at_k(img[:, :384], txt, 1).mean()
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"seconds": seconds, "peak_alloc_mb": peak / 2**20, "value": float(value),
            "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", default="1000,30000", help="comma-separated sizes")
    args = ap.parse_args()
    for n in (int(v) for v in args.n.split(",")):
        for name in ("mutual_knn", "recall_at_k"):
            r = bench(name, n)
            print(f"{name:<11} n={n:>6}: {r['seconds']:8.2f} s, peak numpy alloc "
                  f"{r['peak_alloc_mb']:7.1f} MB, process max RSS {r['max_rss_mb']:7.1f} MB "
                  f"(score {r['value']:.4f})", flush=True)


if __name__ == "__main__":
    main()
