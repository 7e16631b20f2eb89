"""Report figures as inline SVG strings: seed-spread dots, per-epoch curves, fit-size curve.

Plots compute nothing (rliable's split: its `plot_utils` draw the estimates its library
computed and return the figure): they take the finished numbers
`harness.report.build_context` prepared and return SVG text. Output is deterministic: the Agg
backend, a fixed `svg.hashsalt`, no date in the metadata, and text as paths
(`svg.fonttype = "path"`), so WeasyPrint needs no font for the figures and cannot drop glyphs
from them (WeasyPrint issue #1345: matplotlib's SVG text broke in its renderer; #1810: a
missing glyph prints as nothing, with no error).
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

ARM_COLOURS = {"good": "#1b7837", "bad": "#b2182b", "ntp": "#2166ac"}
RC = {
    "svg.hashsalt": "prh-report",
    "svg.fonttype": "path",
    "font.family": "DejaVu Sans",
    "font.size": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
}


def _colour(arm: str, i: int) -> str:
    return ARM_COLOURS.get(arm, f"C{i % 10}")


def _style(label: str, i: int) -> dict[str, str]:
    """Colour by arm, line style by seed, for a run label `ARM-sSEED`."""
    arm, _, seed = label.rpartition("-s")
    k = int(seed) if seed.isdigit() else i
    return {"color": _colour(arm or label, i), "linestyle": ("-", "--", ":", "-.")[k % 4]}


def _legend(ax: plt.Axes) -> None:
    ax.legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _to_svg(fig: plt.Figure) -> str:
    """Serialise, then drop the XML prologue and the RDF metadata block (creator, date)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return re.sub(r"\s*<metadata>.*?</metadata>", "", text[text.index("<svg"):], flags=re.S)


def seed_dots(per_arm: Mapping[str, Mapping[str, float]], metric: str,
              means: Mapping[str, float], outliers: Mapping[str, Sequence[str]]) -> str:
    """One row of dots per arm (one dot per seed, labelled), a bar at the seed mean and
    outlier seeds drawn as open red circles. `per_arm[arm][seed] = value`."""
    arms = list(per_arm)
    with plt.rc_context(RC):
        fig, ax = plt.subplots(figsize=(6.0, 0.45 * len(arms) + 0.8))
        for i, arm in enumerate(arms):
            y = len(arms) - 1 - i
            for k, (seed, value) in enumerate(sorted(per_arm[arm].items())):
                is_out = seed in set(outliers.get(arm, ()))
                ax.plot([value], [y], "o", ms=6, mfc="none" if is_out else _colour(arm, i),
                        mec="#d6604d" if is_out else _colour(arm, i), mew=1.5)
                ax.annotate(f"s{seed}", (value, y), textcoords="offset points",
                            xytext=(0, 6 if k % 2 == 0 else -12), ha="center", fontsize=7)
            if arm in means:
                ax.plot([means[arm]] * 2, [y - 0.3, y + 0.3], "-", color="black", lw=1.2)
        ax.set_yticks(range(len(arms)), list(reversed(arms)))
        ax.set_ylim(-0.6, len(arms) - 0.4)
        ax.set_xlabel(f"{metric} per seed (bar: seed mean; open red: outlier seed)")
        ax.grid(axis="x", lw=0.3)
        return _to_svg(fig)


def epoch_curves(curves: Mapping[str, Sequence[Mapping[str, float]]], key: str,
                 best: Mapping[str, Mapping[str, float]]) -> str:
    """`curves[label]` is a run's per-epoch records; plots `key` against epoch and marks the
    best epoch (triangle) and the last epoch (square) of each run."""
    with plt.rc_context(RC):
        fig, ax = plt.subplots(figsize=(5.4, 2.6))
        for i, (label, rows) in enumerate(curves.items()):
            pts = [(r["epoch"], r[key]) for r in rows if r.get(key) is not None]
            if not pts:
                continue
            style = _style(label, i)
            colour = style["color"]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], lw=1.2, label=label, **style)
            if label in best:
                ax.plot([best[label]["epoch"]], [best[label]["value"]], "^", color=colour, ms=6)
            ax.plot([pts[-1][0]], [pts[-1][1]], "s", color=colour, ms=5)
        ax.set_xlabel("epoch (counted from 1; triangle: best epoch, square: last epoch)")
        ax.set_ylabel(key)
        ax.grid(lw=0.3)
        _legend(ax)
        return _to_svg(fig)


def fit_size_curves(curves: Mapping[str, Sequence[Mapping[str, float]]]) -> str:
    """Test R@1 against the number of pairs the map was fitted on, one line per run."""
    with plt.rc_context(RC):
        fig, ax = plt.subplots(figsize=(5.4, 2.6))
        for i, (label, rows) in enumerate(curves.items()):
            ax.plot([r["n_fit"] for r in rows], [r["r_at_1"] for r in rows], marker="o", ms=3,
                    lw=1.2, label=label, **_style(label, i))
        ax.set_xlabel("pairs the map is fitted on (n_fit)")
        ax.set_ylabel("test r_at_1")
        ax.grid(lw=0.3)
        _legend(ax)
        return _to_svg(fig)
