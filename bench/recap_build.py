"""The web-text subset's build and feed at growing corpus sizes: rows/s, peak RSS of the largest
process, the CPU share it got; the build of this checkout (prh.recap_subset: datatrove steps,
one task per shard) beside an older commit's (default 3b9ff96: first N rows, one process), and
the feed's memory per rank (prh.stream: the tokens memory-mapped, the epoch order a file).

The corpus is synthetic and Recap-shaped (assumed: the research note's generator): string keys,
3% of rows repeating an earlier key, 0.1% without a key (--null-keys), an alt-text (20% null)
and a recaption (5% null) drawn from a pool of 50,000 generated texts; shards of --shard-rows.
Each build runs in its own process; its peak RSS is the largest RSS any one process of its
tree reached, sampled every 50 ms by psutil (getrusage's ru_maxrss cannot say it: Linux keeps
the parent's high-water mark across fork and exec), and its CPU share is the tree's CPU
seconds (getrusage of the children waited for) over the wall seconds. The new build's chosen
keys are checked against an md5 selection written here (pyarrow + hashlib, one process). The
older commit reads only the first N rows and refuses a null key, so it runs on a copy without
null keys (--old-rows caps its size).

    python bench/recap_build.py --rows 300000 1000000 --workers 2
    python bench/recap_build.py --rows 3000000 9000000 30000000 --workers 32 --old-rows 3000000
    python bench/recap_build.py --feed 1000000 4000000 16000000 47000000   # feed only

Projections: the build's seconds are fitted as lines through the sizes (seconds = a + b x
rows), the one-task steps (select, tokenizer: datatrove's time_stats in the work folder's logs)
apart from the rest, and extrapolated to 2.24M, 50M and 940M corpus rows (the subset is the
bottom N of the whole corpus, so the build reads every row it is given) on one node of
--node-cores cores and on --nodes nodes: the per-shard steps divided by the cores (assumed:
tasks are independent; not measured beyond this machine's), the one-task steps not divided.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TARGETS = (2_240_000, 50_000_000, 940_000_000)


def write_corpus(folder: Path, rows: int, shard_rows: int, null_keys: float, seed: int = 0
                 ) -> Path:
    """The synthetic corpus (module docstring) as parquet shards under folder/raw."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(20_000)]
    p = 1 / np.arange(1, len(words) + 1)
    p /= p.sum()
    pool = pa.array([" ".join(words[i] for i in rng.choice(len(words), n, p=p))
                     for n in rng.integers(4, 40, 50_000)])
    raw = folder / "raw"
    raw.mkdir(parents=True)
    for start in range(0, rows, shard_rows):
        n = min(shard_rows, rows - start)
        ids = np.arange(start, start + n)
        again = rng.random(n) < 0.03
        ids[again] = rng.integers(0, max(start + 1, 1), int(again.sum()))  # an earlier key
        keys = pa.array([f"{i:012d}" for i in ids.tolist()], pa.string())
        keys = pc.if_else(pa.array(rng.random(n) < null_keys), pa.scalar(None, pa.string()),
                                  keys)
        alt = pool.take(pa.array(rng.integers(0, len(pool), n)))
        alt = pc.if_else(pa.array(rng.random(n) < 0.2), pa.scalar(None, pa.string()), alt)
        recap = pool.take(pa.array(rng.integers(0, len(pool), n)))
        recap = pc.if_else(pa.array(rng.random(n) < 0.05), pa.scalar(None, pa.string()),
                                   recap)
        pq.write_table(pa.table({"key": keys, "org_caption": alt, "re_caption": recap}),
                       raw / f"part-{start // shard_rows:05d}.parquet", row_group_size=65_536)
    return raw


def md5_bottom(raw: Path, n: int, seed: int = 0) -> set[str]:
    """The N distinct keys of smallest md5(f"{seed}:{key}") among rows with a text: the
    subset's definition, computed without the project's code."""
    import pyarrow.parquet as pq

    keys: set[str] = set()
    for path in sorted(raw.rglob("*.parquet")):
        t = pq.read_table(path).to_pydict()
        for k, a, r in zip(t["key"], t["org_caption"], t["re_caption"], strict=True):
            if k is not None and ((a or "").strip() or (r or "").strip()):
                keys.add(k)
    return set(sorted(keys, key=lambda k: hashlib.md5(f"{seed}:{k}".encode()).digest())[:n])


def measured(cmd: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT) -> dict:
    """Run `cmd` in `cwd` (its code: `python -c` imports from there first) in a process that
    reports its descendants' peak RSS and CPU seconds."""
    probe = ("import resource, subprocess, sys, time, json, psutil\n"
             "t = time.perf_counter()\n"
             "p = subprocess.Popen(sys.argv[1:])\n"
             "peak = 0\n"
             "while p.poll() is None:\n"
             "    try:\n"
             "        tree = [psutil.Process(p.pid), *psutil.Process(p.pid).children(True)]\n"
             "        peak = max([peak] + [q.memory_info().rss for q in tree])\n"
             "    except psutil.Error:\n"
             "        pass\n"
             "    time.sleep(0.05)\n"
             "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
             "print(json.dumps({'rc': p.returncode, 'wall_s': time.perf_counter() - t,"
             " 'cpu_s': u.ru_utime + u.ru_stime, 'peak_mib': peak / 2**20}))")
    out = subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True,
                         env={**os.environ, **(env or {})}, cwd=cwd)
    if out.returncode != 0 or not out.stdout.strip():
        raise SystemExit(f"{cmd[:4]} failed:\n{out.stderr[-3000:]}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    if r["rc"] != 0:
        raise SystemExit(f"{cmd[:4]} exited {r['rc']}:\n{out.stderr[-3000:]}")
    r["cpu_share"] = r["cpu_s"] / r["wall_s"]
    return r


NEW = """
import sys, json
from pathlib import Path
from prh.recap import RecapConfig
from prh.recap_subset import build_subset
raw, out, n, workers = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
out.mkdir(parents=True)
cfg = RecapConfig.from_dict({"data": str(raw), "images": n, "vocab_size": 30522,
    "tokenizer_sample": 100000, "sources": {"alt": ["org_caption"], "recap": ["re_caption"]}})
if __name__ == "__main__":
    build_subset(cfg, out, 62, out.parent / (out.name + ".work"), workers)
"""

OLD = """
import sys, inspect
from pathlib import Path
from prh.recap import RecapConfig
from harness.stages.recap import write_subset
import prh.recap
assert "old-tree" in prh.recap.__file__, prh.recap.__file__  # the older commit's code
raw, out, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
out.mkdir(parents=True)
cfg = RecapConfig.from_dict({"data": str(raw), "images": n, "vocab_size": 30522,
    "tokenizer_sample": 100000, "sources": {"alt": ["org_caption"], "recap": ["re_caption"]}})
write_subset(cfg, out, *([62] if len(inspect.signature(write_subset).parameters) > 2 else []))
"""

FEED = """
import sys, json, time
import numpy as np
from pathlib import Path
from prh.stream import EpochOrder, StreamData
subset, orders, batch = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
t = time.perf_counter()
data = StreamData.open(subset, ["alt"])
order = EpochOrder(orders, data.available)
for s in range(50):  # a rank's reads: 50 steps of the global batch at spread positions
    rows = order.rows(s * (data.available // 50), batch)
    data.sample_texts(rows)
status = {line.split(":")[0]: int(line.split()[1]) / 1024 for line in open("/proc/self/status")
          if line.startswith(("VmHWM", "RssAnon", "RssFile"))}
# VmHWM: this process's own peak (ru_maxrss keeps the parent's); RssAnon: the memory it holds
# itself; RssFile: pages of the memory-mapped files it touched (the page cache, shared by the
# node's ranks and given back under pressure)
print(json.dumps({"available": data.available, "s": time.perf_counter() - t,
                  "peak_mib": status["VmHWM"], "anon_mib": status["RssAnon"],
                  "file_mib": status["RssFile"]}))
"""


def feed_subset(folder: Path, rows: int, per_file: int = 1_000_000) -> Path:
    """A tokens folder of `rows` images, each with one alt-text of 8 token ids (uint16), in
    Arrow files of `per_file` rows as the build writes one per shard, plus an empty summary
    (the fingerprint reads it)."""
    import pyarrow as pa

    subset = folder / "subset"
    (subset / "tokens").mkdir(parents=True)
    (subset / "summary.json").write_text("{}")
    for i, start in enumerate(range(0, rows, per_file)):
        n = min(per_file, rows - start)
        inner = pa.ListArray.from_arrays(pa.array(np.arange(0, 8 * n + 1, 8, dtype=np.int32)),
                                         pa.array(np.full(8 * n, 7, np.uint16)))
        outer = pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32)), inner)
        table = pa.table({"alt": outer})
        with pa.OSFile(str(subset / "tokens" / f"{i:05d}.arrow"), "wb") as sink, \
                pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)
    return subset


def one_task_seconds(work: Path) -> float:
    """The select and tokenizer steps' seconds (datatrove's time_stats of their one task)."""
    return sum(json.loads((work / "logs" / step / "stats.json").read_text())[0]["time_stats"]
               ["total"] for step in ("select", "tokenizer"))


def fit(sizes: list[int], seconds: list[float]) -> tuple[float, float]:
    """(intercept s, slope s/row) by least squares, neither below 0 (a step whose time does
    not grow with the rows, as the tokenizer's fixed sample, can fit a slope of -1 us by
    noise); one size: no intercept."""
    if len(sizes) == 1:
        return 0.0, seconds[0] / sizes[0]
    b, a = np.polyfit(np.array(sizes, float), np.array(seconds, float), 1)
    if b < 0:
        return float(np.mean(seconds)), 0.0
    return max(float(a), 0.0), float(b)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="*", default=[300_000, 1_000_000])
    parser.add_argument("--shard-rows", type=int, default=250_000)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--null-keys", type=float, default=0.001)
    parser.add_argument("--old", default="3b9ff96", help="the commit to compare with ('' off)")
    parser.add_argument("--old-rows", type=int, default=300_000,
                        help="the largest corpus the old build runs on")
    parser.add_argument("--feed", type=int, nargs="*", default=[1_000_000, 4_000_000])
    parser.add_argument("--node-cores", type=int, default=32)
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it")
    a = parser.parse_args()
    tmp = a.keep or Path(tempfile.mkdtemp(prefix="recap-build-"))
    print(f"machine: {os.cpu_count()} cores; workers {a.workers}; work in {tmp}", flush=True)
    new_rows, new_s, serial_s, rows_out = [], [], [], []
    old_tree = None
    if a.old and any(r <= a.old_rows for r in a.rows):
        old_tree = tmp / "old-tree"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(old_tree), a.old],
                       cwd=ROOT, check=True)
    try:
        for rows in a.rows:
            folder = tmp / f"rows-{rows}"
            raw = write_corpus(folder, rows, a.shard_rows, a.null_keys)
            n = int(rows * 0.9)
            r = measured([sys.executable, "-c", NEW, str(raw), str(folder / "new"), str(n),
                          str(a.workers)], {"PYTHONPATH": str(ROOT)})
            import pyarrow.parquet as pq

            chosen = {k for f in (folder / "new").glob("texts-*.parquet")
                      for k in pq.read_table(f, columns=["key"]).column(0).to_pylist()}
            same = chosen == md5_bottom(raw, n)
            row = {"build": "new", "rows": rows, "images": n, **r, "rows_per_s": rows / r["wall_s"],
                   "keys_equal_md5_bottom_n": same}
            rows_out.append(row)
            print(json.dumps(row), flush=True)
            new_rows.append(rows)
            serial_s.append(one_task_seconds(folder / "new.work"))
            new_s.append(r["wall_s"] - serial_s[-1])
            if old_tree is not None and rows <= a.old_rows:
                clean = folder / "clean"
                clean_raw = write_corpus(clean, rows, a.shard_rows, 0.0)
                for what, code, tree in (("new", NEW, ROOT), ("old", OLD, old_tree)):
                    extra = [str(a.workers)] if what == "new" else []
                    r = measured([sys.executable, "-c", code, str(clean_raw),
                                  str(clean / what), str(n), *extra], {"PYTHONPATH": str(tree)},
                                 tree)
                    row = {"build": f"{what} (no null keys)", "rows": rows, "images": n, **r,
                           "rows_per_s": rows / r["wall_s"],
                           "commit": a.old if what == "old" else "this checkout"}
                    rows_out.append(row)
                    print(json.dumps(row), flush=True)
                pair = [x for x in rows_out if x["rows"] == rows and "no null" in x["build"]]
                print(f"speed-up at {rows:,} rows (same corpus, {a.workers} workers new, 1 old): "
                      f"{pair[1]['wall_s'] / pair[0]['wall_s']:.1f}x", flush=True)
        if new_rows:
            icpt, slope = fit(new_rows, new_s)
            s_icpt, s_slope = fit(new_rows, serial_s)
            scale = a.node_cores / max(a.workers, 1)
            print(f"fit: per-shard steps {icpt:.1f} s + {slope * 1e6:.2f} us x rows on "
                  f"{a.workers} workers; one-task steps {s_icpt:.1f} s + {s_slope * 1e6:.2f} us "
                  "x rows")
            for target in TARGETS:
                serial = s_icpt + s_slope * target
                one = (icpt + slope * target) / scale + serial
                many = (icpt + slope * target) / scale / a.nodes + serial
                print(f"projection {target:,} rows: {one / 3600:.2f} h on one {a.node_cores}-core "
                      f"node, {many / 3600:.2f} h on {a.nodes} (of which one-task steps "
                      f"{serial / 3600:.2f} h; assumed scaling, not measured)")
        for rows in a.feed:
            folder = tmp / f"feed-{rows}"
            subset = feed_subset(folder, rows)
            from prh.stream import EpochOrder, StreamData

            t = time.perf_counter()
            EpochOrder.write(folder / "order", 0, StreamData.open(subset, ["alt"]), rows)
            written = time.perf_counter() - t
            out = subprocess.run([sys.executable, "-c", FEED, str(subset), str(folder / "order"),
                                  "256"], capture_output=True, text=True, cwd=ROOT,
                                 env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(json.dumps({"feed_rows": rows, "rank_peak_mib": r["peak_mib"],
                              "rank_anon_mib": r["anon_mib"], "rank_file_mib": r["file_mib"],
                              "rank_open_and_50_steps_s": r["s"],
                              "order_write_s (rank 0, once)": written}), flush=True)
    finally:
        if old_tree is not None:
            subprocess.run(["git", "worktree", "remove", "--force", str(old_tree)], cwd=ROOT)
        if a.keep is None:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    print(f"peak of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} "
          "MiB (corpus writing, the md5 check)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
