"""Wall time of the theory grid (20 worlds, 30 states, k = 4, 800 points + 20 tie rows) and
of the 300-world bound check, with their results.
Run: `OMP_NUM_THREADS=1 .venv/bin/python bench/theory_grid.py`.
"""

from __future__ import annotations

import time

from prh import theory


def main() -> None:
    for name, run in (("grid", theory.run_grid), ("bound", theory.run_bound_check)):
        start = time.perf_counter()
        res = run()
        seconds = time.perf_counter() - start
        print(theory.summary(name, res, seconds), flush=True)


if __name__ == "__main__":
    main()
