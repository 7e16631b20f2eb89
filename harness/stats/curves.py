"""Numbers read off each run's per-epoch curve (its curve.json, carried in the run file), and
each of them over an arm's seeds: results.json's `arms.ARM.curve`.

Per run: test R@1 after the first epoch (epochs counted from 1, as the rerun article does),
at the peak of the test curve, at the last epoch; for the next-token arm also its validation
loss (on the val captions, every epoch: the lowest and the last) and R@1 at early stopping.
R@1 is measured only at evaluated epochs (the first, every `train.eval_every`-th and the last:
`prh.train.evaluated`), so a number chosen from the curve is chosen among those epochs, which
its entry lists (`evaluated_epochs`): early stopping is the evaluated epoch with the lowest
validation loss, not necessarily the epoch of the lowest loss.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.stats.estimators import seed_spread
from prh.config import CURVE_TEST

# what each entry is, in words (results.json carries them beside the numbers)
ENTRIES = {
    "epoch1": "test R@1 after the first epoch (epochs counted from 1)",
    "peak": "the highest test R@1 over the evaluated epochs: the checkpoint chosen on the test "
            "pairs themselves (the best-on-test checkpoint; optimistic, the same pairs score it)",
    "last": "test R@1 at the last epoch (the checkpoint the main metrics score)",
    "early_stop": "test R@1 at the evaluated epoch with the lowest validation loss (chosen on "
                  "the val captions, never on the test pairs)",
    "val_loss": "next-token loss (nats per token) on the first caption of each val photo "
                "(the fit pairs' captions), every epoch: its lowest value and epoch, and its "
                "last",
}
CHOSEN_AMONG = ("peak", "early_stop")  # entries chosen among the evaluated epochs


def _point(record: Mapping[str, Any]) -> dict[str, float]:
    return {"epoch": int(record["epoch"]), "r_at_1": float(record[CURVE_TEST])}


def run_curve(curve: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One run's curve-derived numbers (module docstring). A tie for the peak or the lowest
    loss goes to the earlier epoch; `epoch1` is left out when epoch 1 was not evaluated (a run
    from before epoch 1 was) and the loss entries when the curve has no `val_loss`."""
    evaluated = [r for r in curve if r.get(CURVE_TEST) is not None]
    if not evaluated:
        raise ValueError(f"the curve has no evaluated epoch (no {CURVE_TEST}); rerun its train "
                         "stage")
    epochs = [int(r["epoch"]) for r in evaluated]
    out: dict[str, Any] = {"evaluated_epochs": epochs}
    if epochs[0] == 1:
        out["epoch1"] = _point(evaluated[0])
    out["peak"] = _point(max(evaluated, key=lambda r: r[CURVE_TEST]))
    out["last"] = _point(evaluated[-1])
    losses = [r for r in curve if r.get("val_loss") is not None]
    if losses:
        low = min(losses, key=lambda r: r["val_loss"])
        out["val_loss"] = {"min": float(low["val_loss"]), "min_epoch": int(low["epoch"]),
                           "last": float(losses[-1]["val_loss"]),
                           "last_epoch": int(losses[-1]["epoch"])}
        scored = [r for r in evaluated if r.get("val_loss") is not None]
        if scored:
            stop = min(scored, key=lambda r: r["val_loss"])
            out["early_stop"] = {**_point(stop), "val_loss": float(stop["val_loss"])}
    return out


def arm_curve(runs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """An arm's entries over its seeds (`runs`: seed -> `run_curve`): per entry every run has, each
    number's seed spread (harness.stats.estimators.seed_spread), what the entry is (`what`) and, for
    an entry chosen among evaluated epochs, those epochs; `runs` keeps each seed's own."""
    if not runs:
        raise ValueError("arm_curve: no runs")
    first = next(iter(runs.values()))
    epochs = {tuple(r["evaluated_epochs"]) for r in runs.values()}
    if len(epochs) > 1:
        raise ValueError(f"the seeds' curves evaluate different epochs {sorted(epochs)}; rerun "
                         "them with one params.yaml")
    out: dict[str, Any] = {"evaluated_epochs": first["evaluated_epochs"], "runs": dict(runs)}
    for name, what in ENTRIES.items():
        if not all(name in r for r in runs.values()):
            continue
        entry: dict[str, Any] = {field: seed_spread({s: r[name][field] for s, r in runs.items()})
                                 for field in first[name]}
        entry["what"] = what
        if name in CHOSEN_AMONG:
            entry["evaluated_epochs"] = first["evaluated_epochs"]
        out[name] = entry
    return out
