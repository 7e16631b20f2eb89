"""The names a score travels under, from prh to the report, derived once from the config.

An outcome is a per-test-pair vector in the per-query file (`r_at_1_hit`: 1 when the pair's
caption is retrieved first; `mknn10`: the pair's mutual k-NN overlap); its metric is the mean
(`r_at_1`, `mknn10`). The mutual k-NN name carries k (prh.config.mknn_name), so `eval.k: 5`
gives `mknn5` everywhere. The paper and platonic-rep use k = 10 (`PAPER_K`): the registry's
claims are about `mknn10`, and a rerun at another k does not measure them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prh.config import metric_of, mknn_name
from prh.io import ContractError

PAPER_K = 10  # the paper's mutual k-NN (Huh et al. 2024's k = 10)
CONTROLS = ("control_random_map_r_at_1", "control_shuffled_r_at_1", "chance_r_at_1")


def mknn(k: int) -> str:
    """The mutual k-NN metric (and outcome) name at k: `mknn10`."""
    return mknn_name(k)


def chance(metric: str) -> str:
    """The control holding `metric`'s chance level: `chance_r_at_1`, `chance_mknn10`."""
    return f"chance_{metric}"


def outcome_of(metric: str, outcomes: Iterable[str]) -> str | None:
    """The outcome among `outcomes` whose mean is `metric`, None when there is none."""
    return next((o for o in outcomes if metric_of(o) == metric), None)


def headline(k: int) -> tuple[str, ...]:
    """The two metrics every section leads with: R@1 and the mutual k-NN."""
    return ("r_at_1", mknn(k))


def arm_metrics(k: int) -> tuple[str, ...]:
    """An arm's seed-mean metrics in DVC's flat views."""
    return ("r_at_1", "r_at_5", mknn(k))


def results_k(doc: Mapping[str, Any]) -> int:
    """The k a results.json or a run file was scored at (`eval.k`), as it records it; a file
    written before k was recorded is refused with the fix."""
    if not isinstance(doc.get("k"), int):
        raise ContractError("a results.json or run file without its mutual k-NN's k (written "
                            "before `k` was recorded); rerun its align and aggregate stages "
                            "(`dvc repro`)")
    return int(doc["k"])
