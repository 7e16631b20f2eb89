"""Benchmark: the pair-free aligner (prh.pairfree, Wasserstein Procrustes) against VecMap
(prh.vecmap) on planted problems, and the CPU cost of one fit as the pool grows.

Run: `.venv/bin/python bench/pairfree.py [--sizes 1000 2000 14500] [--clusters 30]`. Prints:
- the planted problem of tests/test_pairfree.py (2,000 rows, one side a rotated, noised copy of
  the other, rows shuffled): FOSCTTM on the true pairs for both aligners, and the wall time;
- a harder planted problem where the text pool holds *other* items (disjoint halves of 4,000:
  VecMap's sorted-similarity start has no shared rows to find) scored on 1,000 held-out pairs;
- per pool size (64 wide images, 48 wide texts, the same planted relation): the time of the
  initialisation (k-means + CKA matching, per restart), of the read-out and of one refinement
  round (its Hungarian timed on the scores of a random map, unstructured: the slow case),
  measured; and one seed's total at the config's S and R, *computed* from those
  (S restarts + read-out + R rounds), since a full fit at 14,500 a side runs for many minutes;
- with `--whole N`: one whole fit at N rows a side at the config's C, S, b, R (`--workers`
  processes for the restarts), on the flickr30k profile's widths (768-wide images as DINOv2
  ViT-B/14's, 384-wide texts as BERT-S's), measured end to end: its wall time, the rounds run,
  and its FOSCTTM and R@1 on 1,000 held-out pairs;
- with `--solvers` (needs the `lap` package, in the test extra): scipy's
  `linear_sum_assignment` on the scores (the benchmark's `hungarian_matching`), the same on
  `prh.pairfree.reduced_costs` (the fit's: the Hungarian row and column reduction first), and
  lap's Jonker-Volgenant `lapjv` (`lapjv_max` below; measured and not adopted,
  docs/sources.md), on square blocks of `--solver-sizes` rows (default 2,000, 5,000 and the
  benchmark's b = 10,000) of three kinds of scores: uniform random in [-1, 1];
  near-permutation (cosines of 64-wide unit rows against a shuffled copy with small noise, as
  in a late round of a fit whose pools share their items); clustered (the planted pools of
  `other_items` above, 768 -> 384 wide, disjoint items, scored at the planted map, as in a
  late round of Table 4's setting; only up to `--clustered-max` rows, default 5,000, as one
  10,000 block takes the three solvers about 2 minutes together). Per block: each solver's
  median wall time over up to `--repeats` runs (fewer once a block has used `--budget`
  seconds), its ratio to scipy's on the scores (above 1: faster than the benchmark's), the gap
  between the two optima on the scores and whether the pairs agree; and the CPU share the
  process got (a loaded machine reads as a slow solver). About 3 minutes on two cores at the
  defaults;
- with `--against PATH` (a checkout of dominik-schnaus/unpaired-rosetta, which this project does
  not ship; it needs torch): one whole fit by prh.pairfree and one by the benchmark's own
  `WassersteinProcrustes` on the same pools (`--whole` rows a side, 12,000 by default, so the
  rounds draw b of more rows and never stop early), at the same C, S, b, R and restart
  workers, the process pinned to the first `--cores` CPUs for both: each one's wall time, the
  CPU it got, and its FOSCTTM and R@1 on the same 1,000 held-out pairs.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_pairfree import foscttm_on_pairs, planted  # noqa: E402  (one planted problem)

from prh import align, pairfree, vecmap  # noqa: E402


def other_items(n: int, d: int, dy: int, noise: float, seed: int):
    """Images x and texts x W + noise of 2n items: pools from the two halves, test pairs
    drawn fresh."""
    rng = np.random.default_rng(seed)
    centres = 1.5 * rng.standard_normal((40, 16))
    mix = rng.standard_normal((16, d)) / 4

    def draw(m: int):
        x = (centres[rng.integers(0, 40, m)] + rng.standard_normal((m, 16))) @ mix
        x = x + 0.5 * rng.standard_normal((m, d))
        return x, x @ w + noise * rng.standard_normal((m, dy))

    w = align.random_orthonormal_map(d, dy, seed + 1)
    (xa, _), (_, yb), (xt, yt) = draw(n), draw(n), draw(1000)
    return xa, yb, xt, yt


def timed(f, *args, **kw):
    t = time.perf_counter()
    out = f(*args, **kw)
    return out, time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[1000, 2000, 5000, 14500])
    ap.add_argument("--clusters", type=int, default=30)
    ap.add_argument("--restarts", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--whole", type=int, default=0, help="rows a side of one whole fit (0: none)")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--solvers", action="store_true",
                    help="time the assignment solvers only (pip install lap)")
    ap.add_argument("--solver-sizes", type=int, nargs="*", default=[2000, 5000, 10000])
    ap.add_argument("--clustered-max", type=int, default=5000,
                    help="largest block of the clustered kind (its 10,000 takes ~110 s)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget", type=float, default=10.0,
                    help="seconds per block after which no further repeat starts")
    ap.add_argument("--against", type=Path, default=None,
                    help="a checkout of unpaired-rosetta: time its fit beside ours")
    ap.add_argument("--cores", type=int, default=0,
                    help="with --against: pin to the first N CPUs (0: all this process has)")
    a = ap.parse_args()
    if a.solvers:
        return solvers(a)
    if a.against:
        return against(a)
    if a.whole:
        return whole(a)
    cfg = pairfree.PairFreeConfig(clusters=a.clusters, restarts=a.restarts, rounds=a.rounds)
    world = pairfree.PairFreeConfig(clusters=10, restarts=5, rounds=20)  # the test's config

    x, y, _, perm = planted()
    y_true = y[np.argsort(perm)]
    ours, t_ours = timed(pairfree.fit_pairfree, x, y, seed=0, cfg=world)
    theirs, t_vm = timed(vecmap.fit_vecmap, x, y, seed=0)
    print("planted shuffled copy, 2,000 rows (FOSCTTM on the true pairs; chance .5):")
    print(f"  Wasserstein Procrustes C=10 S=5  {foscttm_on_pairs(ours, x, y_true):.5f}  "
          f"{t_ours:6.1f} s")
    print(f"  VecMap                           {foscttm_on_pairs(theirs, x, y_true):.5f}  "
          f"{t_vm:6.1f} s")
    for noise in (0.3, 0.6):
        xa, yb, xt, yt = other_items(1000, 64, 64, noise, 0)
        ours, t_ours = timed(pairfree.fit_pairfree, xa, yb, seed=0, cfg=world)
        theirs, t_vm = timed(vecmap.fit_vecmap, xa, yb, seed=0)
        print(f"other items, pools of 1,000, noise {noise} (FOSCTTM on 1,000 held-out pairs):")
        print(f"  Wasserstein Procrustes C=10 S=5  {foscttm_on_pairs(ours, xt, yt):.5f}  "
              f"{t_ours:6.1f} s")
        print(f"  VecMap                           {foscttm_on_pairs(theirs, xt, yt):.5f}  "
              f"{t_vm:6.1f} s")

    print(f"\ncost per phase, C={cfg.clusters} b={cfg.batch} (one core's share of this machine):")
    print(f"{'pool':>7} {'restart s':>10} {'read-out s':>11} {'round s':>8} "
          f"{f'one seed (S={cfg.restarts}, R={cfg.rounds}) s':>26}")
    for n in a.sizes:
        xa, yb, _, _ = other_items(n, 64, 48, 0.3, 1)
        one = pairfree.PairFreeConfig(clusters=cfg.clusters, restarts=1, batch=cfg.batch,
                                      rounds=0)
        _, t_init_readout = timed(pairfree.fit_pairfree, xa, yb, seed=0, cfg=one)
        rng = np.random.default_rng(0)
        xp = pairfree.prepare(xa, xa.mean(axis=0))
        zp = pairfree.prepare(yb, yb.mean(axis=0))
        _, t_restart = timed(pairfree.geometric_init, xp, zp, one, rng)
        bx, bz = rng.permutation(n)[:cfg.batch], rng.permutation(n)[:cfg.batch]
        w = align.random_orthonormal_map(64, 48, 0)
        f32 = np.float32  # the fit's score products
        _, t_round = timed(pairfree.hungarian_blocks, xp[bx].astype(f32) @ w.astype(f32),
                           zp[bz].astype(f32), cfg.batch)
        t_readout = max(t_init_readout - t_restart, 0.0)
        total = cfg.restarts * t_restart + t_readout + cfg.rounds * t_round
        print(f"{n:>7} {t_restart:>10.2f} {t_readout:>11.2f} {t_round:>8.2f} {total:>26.0f}")
    return 0


def whole(a: argparse.Namespace) -> int:
    """One whole fit at the benchmark's constants (or the flags'), timed end to end."""
    cfg = pairfree.PairFreeConfig(clusters=a.clusters, restarts=a.restarts, rounds=a.rounds,
                                  workers=a.workers)
    xa, yb, xt, yt = other_items(a.whole, 768, 384, 0.3, 1)
    print(f"one whole fit: {a.whole:,} a side, 768 -> 384 wide, C={cfg.clusters} "
          f"S={cfg.restarts} b={cfg.batch} R={cfg.rounds}, {cfg.workers} worker(s)", flush=True)
    pmap, t = timed(pairfree.fit_pairfree, xa, yb, seed=0, cfg=cfg)
    r1 = align.image_to_text_recall(pmap, xt, yt)[1].mean()
    print(f"  wall {t:,.0f} s ({t / 3600:.2f} h), {pmap.rounds} rounds; on 1,000 held-out pairs "
          f"FOSCTTM {foscttm_on_pairs(pmap, xt, yt):.4f}, R@1 {r1:.3f} (chance .001)")
    return 0


def against(a: argparse.Namespace) -> int:
    """prh.pairfree's fit and the benchmark's on the same pools, constants and cores."""
    import os

    if not (a.against / "unpaired_rosetta" / "wasserstein_procrustes.py").is_file():
        raise SystemExit(f"{a.against}: not a checkout of unpaired-rosetta (no "
                         "unpaired_rosetta/wasserstein_procrustes.py)")
    cores = sorted(os.sched_getaffinity(0))
    if a.cores:
        cores = cores[:a.cores]
        os.sched_setaffinity(0, cores)
    sys.path.insert(0, str(a.against.resolve()))
    import torch
    from unpaired_rosetta.wasserstein_procrustes import WassersteinProcrustes

    n = a.whole or 12_000
    cfg = pairfree.PairFreeConfig(clusters=a.clusters, restarts=a.restarts, rounds=a.rounds,
                                  workers=a.workers)
    xa, yb, xt, yt = other_items(n, 768, 384, 0.3, 1)
    print(f"one whole fit each: {n:,} a side, 768 -> 384 wide, C={cfg.clusters} "
          f"S={cfg.restarts} b={cfg.batch} R={cfg.rounds}, {cfg.workers} restart worker(s), "
          f"on {len(cores)} CPU(s) {cores}", flush=True)

    def theirs() -> align.ProcrustesMap:
        wp = WassersteinProcrustes(cfg.clusters, cfg.restarts, cfg.batch, cfg.rounds,
                                   num_workers=cfg.workers)
        wp.fit(torch.from_numpy(xa), torch.from_numpy(yb), randomness=0)
        as64 = lambda t: t.double().numpy()  # noqa: E731
        return align.ProcrustesMap(as64(wp.mean_x)[0], as64(wp.mean_y)[0], as64(wp.weight))

    fits = {"prh.pairfree": lambda: pairfree.fit_pairfree(xa, yb, seed=0, cfg=cfg),
            "unpaired-rosetta": theirs}
    walls = {}
    for name, fit in fits.items():
        cpu = time.process_time()
        pmap, walls[name] = timed(fit)
        share = (time.process_time() - cpu) / walls[name] / len(cores)
        r1 = align.image_to_text_recall(pmap, xt, yt)[1].mean()
        print(f"  {name:<17} wall {walls[name]:8.1f} s, {share:.2f} of its CPUs (child "
              f"processes not counted); FOSCTTM {foscttm_on_pairs(pmap, xt, yt):.4f}, "
              f"R@1 {r1:.3f} on 1,000 held-out pairs (chance .5, .001)", flush=True)
    print(f"  wall ratio prh.pairfree / unpaired-rosetta: "
          f"{walls['prh.pairfree'] / walls['unpaired-rosetta']:.2f} (below 1: ours faster)")
    return 0


def solver_scores(kind: str, n: int, seed: int) -> np.ndarray:
    """An n x n block of scores of one kind (`--solvers` in the module docstring)."""
    rng = np.random.default_rng(seed)
    if kind == "random":
        return rng.uniform(-1.0, 1.0, (n, n))
    if kind == "near":
        x = rng.standard_normal((n, 64))
        y = x[rng.permutation(n)] + 0.3 / 8 * rng.standard_normal((n, 64))
        return align.unit_or_zero(x) @ align.unit_or_zero(y).T
    xa, yb, _, _ = other_items(n, 768, 384, 0.3, seed)
    w = align.random_orthonormal_map(768, 384, seed + 1)  # other_items' planted map
    xp, zp = pairfree.prepare(xa, xa.mean(axis=0)), pairfree.prepare(yb, yb.mean(axis=0))
    return (xp @ w) @ zp.T


def lapjv_max(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, columns) of the one-to-one assignment of a square block of finite scores with the
    largest sum, by lap's `lapjv`, in the form of scipy's `linear_sum_assignment(s,
    maximize=True)` (one pair per row, rows ascending).

    lapjv minimises: it gets -s 2^-e with 2^(e-1) <= max|s| < 2^e, a negation and a power-of-two
    scale, both exact in floating point, so the same problem with costs in (-1, 1). That keeps
    lap's sentinel LARGE = 1e6 (its infinity among column prices) clear: a price moves by at most
    the length of a shortest augmenting path, under 2 (n + 1) (our reading; lap states no bound).
    """
    import lap

    s = np.asarray(scores, dtype=np.float64)
    n = len(s)
    top = max(float(s.max()), -float(s.min())) if s.size else 0.0
    if s.shape != (n, n) or n == 0 or not math.isfinite(top) or 2 * (n + 1) >= lap.LARGE:
        raise ValueError(f"lapjv_max takes a non-empty square block of finite scores with "
                         f"2 (n + 1) < {lap.LARGE:g}, got shape {s.shape}, max |s| {top}")
    cost = s * -math.ldexp(1.0, -math.frexp(top)[1])  # -s 2^-e: exact
    cols = lap.lapjv(cost, extend_cost=False, return_cost=False)[0]
    return np.arange(n), cols.astype(np.intp)


def solvers(a: argparse.Namespace) -> int:
    """scipy against lapjv on the same blocks: medians, ratio, the optima compared. On one BLAS
    thread throughout: idle BLAS threads spin after a product and would count as solver CPU."""
    try:
        import lap  # noqa: F401
    except ImportError:
        raise SystemExit("bench/pairfree.py --solvers needs the lap package: pip install lap") \
            from None
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        return _solvers(a)


def _solvers(a: argparse.Namespace) -> int:
    from scipy.optimize import linear_sum_assignment

    solve = {"scipy": lambda s: linear_sum_assignment(s, maximize=True),  # the benchmark's
             "reduced": lambda s: linear_sum_assignment(pairfree.reduced_costs(s)),  # the fit's
             "lapjv": lapjv_max}
    for f in solve.values():  # imports out of the timings
        f(np.eye(3))
    solve_wall = solve_cpu = 0.0
    print(f"assignment solvers, median wall s over up to {a.repeats} runs (fewer past "
          f"{a.budget:g} s a block): scipy = linear_sum_assignment on the scores (the "
          "benchmark's), reduced = the same on prh.pairfree.reduced_costs (the fit's), lapjv = "
          "lap's; ratio = scipy's time / the solver's (above 1: faster than the benchmark's); "
          "gap = scipy's optimum - the solver's, on the scores")
    print(f"{'rows':>7} {'scores':>10} {'scipy s':>8} " + " ".join(
        f"{name + ' s':>9} {'ratio':>6} {'gap':>8} {'same':>5}" for name in list(solve)[1:]))
    for n in a.solver_sizes:
        for kind in ("random", "near", "clustered"):
            if kind == "clustered" and n > a.clustered_max:
                continue
            s = solver_scores(kind, n, seed=n)
            times: dict[str, list[float]] = {name: [] for name in solve}
            cols: dict[str, np.ndarray] = {}
            spent = 0.0
            while len(times["scipy"]) < a.repeats and spent < a.budget:
                for name in times:  # alternated, so a load change hits all
                    cpu = time.process_time()
                    (_, c), t = timed(solve[name], s)
                    solve_cpu += time.process_time() - cpu
                    solve_wall += t
                    times[name].append(t)
                    cols[name] = c
                    spent += t
            obj = {name: float(s[np.arange(n), c].sum()) for name, c in cols.items()}
            med = {name: float(np.median(t)) for name, t in times.items()}
            print(f"{n:>7} {kind:>10} {med['scipy']:>8.3f} " + " ".join(
                f"{med[name]:>9.3f} {med['scipy'] / med[name]:>6.2f} "
                f"{obj['scipy'] - obj[name]:>8.1e} "
                f"{'yes' if (cols['scipy'] == cols[name]).all() else 'no':>5}"
                for name in list(solve)[1:]) + f"   ({len(times['scipy'])} runs)", flush=True)
    print(f"the solvers (one thread each) kept {solve_cpu / solve_wall:.2f} of a core over their "
          f"{solve_wall:.0f} s (below 1: the machine was busy, the times above inflated)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
