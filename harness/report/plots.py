"""Report figures as inline SVG strings: seed-spread dots, per-epoch curves, fit-size curve,
scores against the pool size, and the rows of small plots of what shakes a headline number.

Plots compute nothing (rliable's split: its `plot_utils` draw the estimates its library
computed and return the figure): they take the finished numbers
`harness.report.context.build_context` prepared and return SVG text. Output is deterministic: the
Agg backend, a fixed `svg.hashsalt`, no date in the metadata, and text as paths
(`svg.fonttype = "path"`), so WeasyPrint needs no font for the figures and cannot drop glyphs
from them (WeasyPrint issue #1345: matplotlib's SVG text broke in its renderer; #1810: a
missing glyph prints as nothing, with no error).
"""

from __future__ import annotations

import io
import re
import textwrap
from collections.abc import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator  # noqa: E402

ARM_COLOURS = {"good": "#1b7837", "bad": "#b2182b", "ntp": "#2166ac"}
PAPER_COLOUR = "#762a83"  # the paper's value, apart from the arms' colours and chance's red
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


def _log_x(ax: plt.Axes, xs: Sequence[float]) -> None:
    """Log x axis ticked at the data's own x values, thinned so that labels do not collide
    (neighbours at least a factor 1.8 apart; the largest is always labelled)."""
    values = sorted(set(xs), reverse=True)
    ticks = values[:1]
    for x in values[1:]:
        if ticks[-1] / x >= 1.8:
            ticks.append(x)
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_locator(NullLocator())


def _note(ax: plt.Axes, text: str) -> None:
    """A subplot with no data: its reason, wrapped to the subplot's width."""
    ax.text(0.5, 0.5, textwrap.fill(text, 24), transform=ax.transAxes, ha="center",
            va="center", fontsize=5.5, color="#333", bbox={"fc": "white", "ec": "none", "pad": 1})
    ax.set_xticks([])


def seed_dots(per_arm: Mapping[str, Mapping[str, float]], axis: str,
              means: Mapping[str, float], outliers: Mapping[str, Sequence[str]]) -> str:
    """One row of dots per arm (one dot per seed, labelled), a bar at the seed mean and
    outlier seeds drawn as open red circles; `axis` names the metric. `per_arm[arm][seed] =
    value`."""
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
        ax.set_xlabel(f"{axis} per seed (bar: seed mean; open red: outlier seed)")
        ax.grid(axis="x", lw=0.3)
        return _to_svg(fig)


def epoch_curves(curves: Mapping[str, Sequence[Mapping[str, float]]], key: str,
                 best: Mapping[str, Mapping[str, float]], axis: str) -> str:
    """`curves[label]` is a run's per-epoch records; plots `key` (labelled `axis`) against epoch
    and marks the best epoch (triangle) and the last epoch (square) of each run."""
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
        ax.set_ylabel(axis)
        ax.grid(lw=0.3)
        _legend(ax)
        return _to_svg(fig)


def fit_size_curves(curves: Mapping[str, Sequence[Mapping[str, float]]], axis: str) -> str:
    """Test R@1 (labelled `axis`) against the number of pairs the map was fitted on, one line
    per run."""
    with plt.rc_context(RC):
        fig, ax = plt.subplots(figsize=(5.4, 2.6))
        for i, (label, rows) in enumerate(curves.items()):
            ax.plot([r["n_fit"] for r in rows], [r["r_at_1"] for r in rows], marker="o", ms=3,
                    lw=1.2, label=label, **_style(label, i))
        ax.set_xlabel("pairs the map is fitted on (n_fit)")
        ax.set_ylabel(axis)
        ax.grid(lw=0.3)
        _legend(ax)
        return _to_svg(fig)


def pool_size_curves(panels: Mapping[str, Mapping]) -> str:
    """One small plot per metric, score against the number of photos in the pool (log x): one
    line per arm (seed mean, bars: std over seeds) and the chance level (dashed).
    `panels[metric] = {"label", "arms": {arm: {"n", "mean", "std"}}, "chance": {"n", "value"}}`
    (label: the metric table's words, the y axis)."""
    ncols = min(3, len(panels))
    nrows = -(-len(panels) // ncols)
    with plt.rc_context(RC):
        fig, axes = plt.subplots(nrows, ncols, figsize=(2.3 * ncols, 1.75 * nrows),
                                 squeeze=False)
        for ax, (metric, panel) in zip(axes.flat, panels.items(), strict=False):
            for i, (arm, line) in enumerate(panel["arms"].items()):
                err = [0.0 if s is None else s for s in line["std"]]
                ax.errorbar(line["n"], line["mean"], yerr=err, color=_colour(arm, i), lw=1.1,
                            marker="o", ms=2.5, capsize=1.5, label=arm)
            ax.plot(panel["chance"]["n"], panel["chance"]["value"], "--", color="#777", lw=0.9,
                    label="chance")
            _log_x(ax, panel["chance"]["n"])
            ax.set_title(metric, fontsize=7)
            ax.set_ylabel(panel["label"], fontsize=6)
            ax.tick_params(labelsize=6)
            ax.grid(lw=0.3)
        for ax in list(axes.flat)[len(panels):]:
            ax.set_visible(False)
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=7,
                   frameon=False, bbox_to_anchor=(0.5, 0.0))
        fig.supxlabel("photos in the pool (log scale)", fontsize=7, y=0.0, va="bottom")
        fig.tight_layout(rect=(0, 0.05, 1, 1))
        return _to_svg(fig)


def shake_row(subplots: Sequence[Mapping], key: str, arm: str, axis: str,
              paper: Mapping | None, chance: float | None) -> str:
    """One headline number against what may move it: a row of small plots sharing the y axis,
    with the paper's value (solid purple, labelled with its data set) and chance (dashed red)
    across every plot. Each subplot: `title`, and either `note` (drawn as text, no data) or
    `series` [{"x", "y", "label"?, "dots"?: one label per point}] with `xticks` (labels of
    positions 0..n-1) or `log_x`, an optional seed-mean bar `mean` and an optional `chance`
    curve {"x", "y"} that replaces the constant chance line. SVG ids: KEY-paper-I (the paper
    line of subplot I) and KEY-dot-LABEL (a labelled point)."""
    colour = _colour(arm, 0)
    with plt.rc_context(RC):
        fig, axes = plt.subplots(1, len(subplots), figsize=(1.45 * len(subplots), 1.55),
                                 sharey=True)
        for i, (ax, sub) in enumerate(zip(axes, subplots, strict=True)):
            ax.set_title(sub["title"], fontsize=6.5)
            ax.tick_params(labelsize=6)
            if paper is not None:
                ax.axhline(paper["value"], color=PAPER_COLOUR, lw=1.0, gid=f"{key}-paper-{i}",
                           label=f"{paper['label']}: {paper['printed']}")
            if sub.get("chance"):
                ax.plot(sub["chance"]["x"], sub["chance"]["y"], "--", color="#d6604d", lw=0.9)
            elif chance is not None:
                ax.axhline(chance, ls="--", color="#d6604d", lw=0.9, label="chance")
            if sub.get("note"):
                _note(ax, sub["note"])
                continue
            for j, s in enumerate(sub["series"]):
                if s.get("dots"):
                    for x, y, label in zip(s["x"], s["y"], s["dots"], strict=True):
                        ax.plot([x], [y], "o", ms=3.5, color=colour, gid=f"{key}-dot-{label}")
                else:
                    ax.plot(s["x"], s["y"], marker="o", ms=2.5, lw=1.0, color=colour,
                            linestyle=("-", "--", ":", "-.")[j % 4])
            if sub.get("mean") is not None:
                n = len(sub["series"][0]["x"])
                ax.plot([-0.3, n - 0.7], [sub["mean"]] * 2, "-", color="black", lw=0.8)
            if sub.get("xticks"):
                ax.set_xticks(range(len(sub["xticks"])), sub["xticks"])
                ax.set_xlim(-0.5, len(sub["xticks"]) - 0.5)
            if sub.get("log_x"):
                _log_x(ax, [x for s in sub["series"] for x in s["x"]])
            ax.grid(lw=0.3)
        axes[0].set_ylabel(f"{arm} {axis}", fontsize=7)
        handles, labels = axes[0].get_legend_handles_labels()
        if handles:
            fig.legend(handles, labels, loc="upper center", ncol=len(labels), fontsize=6.5,
                       frameon=False, bbox_to_anchor=(0.5, 0.0))
        fig.subplots_adjust(left=0.08, right=0.99, top=0.86, bottom=0.16, wspace=0.12)
        return _to_svg(fig)
