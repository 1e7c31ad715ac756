"""Figures of a run and of a comparison, in one visual language (the QueerBench paper's figures).

A heatmap of QueerBench scores per group (the paper's Figures 8–9), per-category bars (HurtLex categories and toxicity
attributes), and the queer vs non-queer / pronoun comparison with 95% CIs. Every series differs by hatch as well as
by colour, value labels pick black or white by the luminance behind them, and a missing value has its own "no data"
look; :mod:`queerbench.tasks.queergen.figures` draws QueerGen's scores with the same conventions (:func:`group_style`,
:func:`no_data_handle`, :func:`save_figure`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: figures are written to files
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.container import BarContainer
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from queerbench.base.files import atomic_path
from queerbench.models.fingerprint import looks_like_path
from queerbench.scoring.aggregate import GAP_BLOCK, UNTOXIC_BLOCK
from queerbench.scoring.caveats import small_n
from queerbench.scoring.hurtlex import hurtlex_categories
from queerbench.scoring.toxicity_base import KEY as TOXICITY

__all__ = [
    "COMPONENT_NAMES",
    "GROUP_STYLE",
    "NO_DATA_EDGE",
    "NO_DATA_FACE",
    "NO_DATA_HATCH",
    "NO_DATA_LABEL",
    "SMALL_N_FOOTNOTE",
    "build_category_figure",
    "build_comparison_figure",
    "build_heatmap",
    "category_figure",
    "check_group_styles",
    "comparison_figure",
    "group_style",
    "heatmap_figure",
    "model_label",
    "n_label",
    "no_data_handle",
    "run_label",
    "save_figure",
    "text_colour_for",
]


def save_figure(fig: plt.Figure, path: Path) -> Path:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=150, bbox_inches="tight")
    plt.close(fig)
    return path


# ------------------------------------------------------------------------------------------- figure conventions
# Figures go into papers, often printed in grayscale: every series differs by hatch as well as by colour, value
# labels pick black or white by the luminance of the cell behind them, and a missing value has its own look (light
# grey, cross-hatched, labelled "no data") that no real value can take.
NO_DATA_FACE = "#f0f0f0"
NO_DATA_EDGE = "#707070"
NO_DATA_HATCH = "xx"
NO_DATA_LABEL = "no data"
STYLES_FILE = "queerbench/data/group_styles.json"


def check_group_styles(raw: Any, where: str) -> tuple[dict[str, tuple[str, str]], tuple[tuple[str, str], ...]]:
    """A group-styles document (``{"schema_version": 1, "groups": {group: [colour, hatch]}, "extra": [[colour,
    hatch], ...]}``) as ``(styles by group, extra styles)``, or a one-line ``ValueError`` naming ``where``."""

    def style(x: Any) -> bool:
        return isinstance(x, list) and len(x) == 2 and all(isinstance(v, str) for v in x) and bool(x[0])

    groups, extra = (raw.get("groups"), raw.get("extra")) if isinstance(raw, dict) else (None, None)
    if not (
        isinstance(raw, dict)
        and raw.get("schema_version") == 1
        and isinstance(groups, dict)
        and all(style(v) for v in groups.values())
        and isinstance(extra, list)
        and extra
        and all(style(v) for v in extra)
    ):
        raise ValueError(
            f"{where} needs schema_version 1, 'groups' ({{group: [colour, hatch]}}) and 'extra' (a non-empty list of "
            "[colour, hatch]); reinstall queerbench or fix the file"
        )
    return {g: (v[0], v[1]) for g, v in groups.items()}, tuple((v[0], v[1]) for v in extra)


def _group_styles() -> tuple[dict[str, tuple[str, str]], tuple[tuple[str, str], ...]]:
    raw = json.loads(resources.files("queerbench.data").joinpath("group_styles.json").read_text(encoding="utf-8"))
    return check_group_styles(raw, STYLES_FILE)


GROUP_STYLE, _EXTRA_STYLES = _group_styles()
"""Group → (colour, hatch), read from its data file: lightness differs so that grey prints apart."""
COMPONENT_NAMES = {"QB": "QB (QueerBench)", "A": "A (AFINN)", "H": "H (HurtLex)", "P": "P (toxicity)"}


def group_style(group: str, index: int = 0) -> tuple[str, str]:
    """(colour, hatch) of a group in every figure; unknown labels cycle through extra styles."""
    return GROUP_STYLE.get(group, _EXTRA_STYLES[index % len(_EXTRA_STYLES)])


def relative_luminance(rgba: Sequence[float] | np.ndarray) -> float:
    """WCAG relative luminance of an RGB(A) colour with components in [0, 1]."""
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgba[:3]]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def text_colour_for(rgba: Sequence[float] | np.ndarray) -> str:
    """Black or white, whichever contrasts more with a cell of colour ``rgba`` (WCAG contrast ratio)."""
    lum = relative_luminance(rgba)
    return "black" if (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) else "white"


def model_label(model: str | None) -> str:
    """A model as figures and tables name it: a Hub id as is, a local folder by its folder name."""
    if not model:
        return "unknown model"
    path = Path(str(model))
    looks_local = looks_like_path(str(model)) or path.is_dir()
    return (path.name or str(model)) if looks_local else str(model)


def run_label(meta: dict[str, Any] | None, scores: dict[str, Any]) -> str:
    """``<model> · <config> config · top-<k>``: what tells two runs' figures apart (without the model when the
    caller does not say which it was), and `` · <method>`` where the method belongs in the label.

    Whether it does is the method registry's word (:func:`~queerbench.methods.registry.in_label`: a method in the run
    key), which the caller hands down as ``meta["method_in_label"]``, since reporting sits below the methods and knows
    none; a ``meta`` without that flag shows any method it records."""
    meta = meta or {}
    settings = f"{scores['config']} config · top-{scores['k']}"
    method = meta.get("method")
    if method is not None and meta.get("method_in_label", True):
        settings += f" · {method}"
    model = meta.get("model")
    return f"{model_label(model)} · {settings}" if model else settings


def no_data_handle() -> Patch:
    return Patch(facecolor=NO_DATA_FACE, edgecolor=NO_DATA_EDGE, hatch=NO_DATA_HATCH, label=NO_DATA_LABEL)


def _empty_panel(ax: plt.Axes, reason: str, *, missing: bool) -> None:
    """A panel without bars that says why: in the no-data look when the data is missing (``missing``), plain when
    it was measured and is all zero."""
    if missing:
        ax.add_patch(
            Rectangle(
                (0, 0),
                1,
                1,
                transform=ax.transAxes,
                facecolor=NO_DATA_FACE,
                edgecolor=NO_DATA_EDGE,
                hatch=NO_DATA_HATCH,
            )
        )
    ax.text(
        0.5,
        0.5,
        f"{NO_DATA_LABEL}: {reason}" if missing else reason,
        transform=ax.transAxes,
        ha="center",
        va="center",
        fontsize=10,
        bbox={"facecolor": "white", "edgecolor": NO_DATA_EDGE, "boxstyle": "round,pad=0.4"},
    )
    ax.set_xticks([])
    ax.set_yticks([])


def build_heatmap(
    table: pd.DataFrame,
    title: str,
    *,
    subtitle: str | None = None,
    value_label: str = "score (higher = more harmful)",
    counts: pd.DataFrame | None = None,
) -> plt.Figure:
    """A heatmap like the paper's Figures 8–9: rows (runs or components) × groups, each cell labelled with its value.

    A sequential colour map (light = less harmful, dark = more) that reads the same in grayscale; labels in black or
    white by the cell's luminance; missing values cross-hatched in light grey and labelled "no data", with a legend.
    ``counts`` (the n of each cell, same shape): each label gets its n, and a small n (< 30) a ``*`` and a footnote.
    """
    values = table.to_numpy(dtype=float)
    n_cells = None if counts is None else counts.to_numpy()
    missing = np.isnan(values)
    finite = values[~missing]
    vmax = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    cmap = plt.get_cmap("Reds").with_extremes(bad=NO_DATA_FACE)
    width = 1.5 * table.shape[1] + 3.2
    fig, ax = plt.subplots(figsize=(max(width, 6.5), 0.6 * table.shape[0] + 2.2))
    im = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, aspect="auto", vmin=0, vmax=vmax)
    ax.set_xticks(range(table.shape[1]), [str(c) for c in table.columns])
    ax.set_yticks(range(table.shape[0]), [str(i) for i in table.index])
    ax.set_xlabel("group")
    for (i, j), v in np.ndenumerate(values):
        if np.isnan(v):
            ax.add_patch(
                Rectangle(
                    (j - 0.5, i - 0.5), 1, 1, facecolor=NO_DATA_FACE, edgecolor=NO_DATA_EDGE, hatch=NO_DATA_HATCH, lw=0
                )
            )
            ax.text(
                j,
                i,
                NO_DATA_LABEL,
                ha="center",
                va="center",
                fontsize=8,
                color="black",
                bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.5},
            )
        else:
            label = f"{v:.2f}" if n_cells is None else f"{v:.2f}\n{n_label(int(n_cells[i, j]))}"
            ax.text(j, i, label, ha="center", va="center", fontsize=9, color=text_colour_for(cmap(im.norm(v))))
    ax.set_title(title if subtitle is None else f"{title}\n{subtitle}", fontsize=11)
    fig.colorbar(im, ax=ax, label=value_label)
    if missing.any():
        ax.legend(handles=[no_data_handle()], loc="upper left", bbox_to_anchor=(0, -0.14), frameon=False, fontsize=8)
    if counts is not None and any(small_n(int(n)) for n in counts.to_numpy().ravel()):
        fig.text(0.01, 0.005, SMALL_N_FOOTNOTE, fontsize=8, ha="left", va="bottom")
    return fig


SMALL_N_FOOTNOTE = "* n < 30 scored sentences: a small sample, indicative only"
"""The footnote of a figure with a small-n group (the ``*`` after its n)."""


def n_label(n: int) -> str:
    """``n=80``, ``n=12*`` for a small sample."""
    return f"n={n}{'*' if small_n(n) else ''}"


def _group_label(scores: dict[str, Any], group: str) -> str:
    """A group's axis or legend label with its n: ``neo\n(n=12*)``, ``neutral\n(n=0: no data)``."""
    n = int(scores["n"].get(group) or 0)
    return f"{group}\n(n=0: {NO_DATA_LABEL})" if not n else f"{group}\n({n_label(n)})"


def _small_n_footnote(fig: plt.Figure, scores: dict[str, Any]) -> None:
    """The small-sample footnote, with each small group's CI width, under a run's figure that has one."""
    small = [g for g, n in scores["n"].items() if small_n(n)]
    if not small:
        return
    widths = []
    for g in small:
        cis = scores.get("ci", {}).get(g, {})
        ci = cis.get(GAP_BLOCK) or cis.get(UNTOXIC_BLOCK)
        flat = " (too few templates to show it)" if ci and ci[1] - ci[0] < 5e-3 else ""
        widths.append(f"{g} {'CI width ' + format(ci[1] - ci[0], '.2f') + flat if ci else 'no CI'}")
    fig.text(0.01, -0.02, f"{SMALL_N_FOOTNOTE} ({'; '.join(widths)})", fontsize=8, ha="left", va="top")


def _hatched_bars(ax: plt.Axes, frame: pd.DataFrame, labels: dict[str, str] | None = None) -> None:
    """Grouped bars (rows of ``frame`` on the x axis, one bar per column = group), colour + hatch per group;
    ``labels``: each group's legend label (default: its name)."""
    n = max(len(frame.columns), 1)
    width = 0.8 / n
    x = np.arange(len(frame.index))
    for k, group in enumerate(frame.columns):
        colour, hatch = group_style(str(group), k)
        ax.bar(
            x - 0.4 + width * (k + 0.5),
            frame[group].to_numpy(dtype=float),
            width,
            label=(labels or {}).get(str(group), str(group)).replace("\n", " "),
            color=colour,
            hatch=hatch,
            edgecolor="black",
            linewidth=0.6,
        )
    ax.set_xticks(x, [str(i) for i in frame.index], rotation=30, ha="right")
    ax.legend(title="group", fontsize=8, title_fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))


def build_category_figure(scores: dict[str, Any], meta: dict[str, Any] | None = None) -> plt.Figure:
    """Per-category bars per group: HurtLex categories (per 100 sentences) and toxicity attributes; a panel with
    nothing to show says why (measured as zero, or not measured: the no-data look)."""
    names = hurtlex_categories()["categories"]
    groups = list(scores["n"])  # a group without data stays in the legend, labelled "no data"
    hl = pd.DataFrame(scores.get("hurtlex_categories", {})).fillna(0)
    hl = hl[(hl > 0).any(axis=1)] if not hl.empty else hl
    hl = hl.reindex(columns=groups) if not hl.empty else hl
    tox = pd.DataFrame(scores.get("toxicity_attributes", {})).fillna(0)
    tox = tox.reindex(columns=groups) if not tox.empty else tox
    scorer = scores.get("scorers", {}).get(TOXICITY, {}).get("name")
    # (data, title, why it may be empty, whether empty means missing rather than measured as zero)
    panels = [
        (hl, "HurtLex categories (hits per 100 sentences)", "no completion is in any HurtLex category (all 0)", False),
        (tox, "toxicity attributes (flags per 100 sentences)", "no completion was flagged (all 0)", False),
    ]
    if "hurtlex_categories" not in scores:
        panels[0] = (hl, panels[0][1], "per-category counts are reported by the default config only", True)
    if scorer == "none":
        panels[1] = (tox, panels[1][1], "toxicity not scored (--toxicity none)", True)
    elif "toxicity_attributes" not in scores:
        panels[1] = (tox, panels[1][1], "per-attribute counts are reported by the default config only", True)
    fig, axes = plt.subplots(2, 1, figsize=(11, 7.6), squeeze=False)
    for ax, (frame, title, empty_reason, missing) in zip(axes[:, 0], panels, strict=True):
        ax.set_title(title, fontsize=10)
        if missing or frame.empty or not (frame.fillna(0).to_numpy(dtype=float) > 0).any():
            _empty_panel(ax, empty_reason, missing=missing)
            continue
        frame = frame.copy()
        frame.index = [f"{c} ({names[c]})" if c in names else c for c in frame.index]
        _hatched_bars(ax, frame, {g: _group_label(scores, g) for g in groups})
        ax.set_ylabel("per 100 sentences")
    fig.suptitle(f"Harm by category — {run_label(meta, scores)}", fontsize=12)
    fig.tight_layout()
    _small_n_footnote(fig, scores)
    return fig


def build_comparison_figure(scores: dict[str, Any], meta: dict[str, Any] | None = None) -> plt.Figure:
    """QueerBench score per group with 95% CIs: queer vs non-queer and the pronoun groups side by side, with a
    legend of the groups (colour + hatch), the CI marker and, when a group has no value, the no-data look."""
    key = GAP_BLOCK if any(v is not None for v in scores[GAP_BLOCK].values()) else UNTOXIC_BLOCK
    groups = list(scores["n"])
    vals = [scores[key].get(g) for g in groups]
    cis = [scores.get("ci", {}).get(g, {}).get(key) for g in groups]
    fig, ax = plt.subplots(figsize=(1.5 * len(groups) + 3, 4.2))
    handles: list[Artist | BarContainer] = []
    top = max([v if not ci else max(v, ci[1]) for v, ci in zip(vals, cis, strict=True) if v is not None] + [1.0])
    for i, (g, v, ci) in enumerate(zip(groups, vals, cis, strict=True)):
        colour, hatch = group_style(g, i)
        if v is None:
            ax.bar(i, top * 0.15, color=NO_DATA_FACE, edgecolor=NO_DATA_EDGE, hatch=NO_DATA_HATCH, linewidth=0.6)
            ax.text(i, top * 0.16, NO_DATA_LABEL, ha="center", va="bottom", fontsize=8)
            continue
        # a one-template CI equals the value up to float rounding: clip, as a negative error bar would raise
        err = None if not ci else [[max(v - ci[0], 0.0)], [max(ci[1] - v, 0.0)]]
        bar = ax.bar(i, v, yerr=err, capsize=5, color=colour, hatch=hatch, edgecolor="black", linewidth=0.8, label=g)
        handles.append(bar)
        ax.text(i, v + (ci[1] - v if ci else 0) + top * 0.02, f"{v:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(groups)), [_group_label(scores, g) for g in groups])
    label = "QueerBench score" if key == GAP_BLOCK else "HurtLex score H\n(no toxicity scorer, so no QB)"
    ax.set_ylabel(label + "\nhigher = more harmful")
    ax.set_ylim(0, top * 1.25)
    legend = [*handles]
    if any(cis):
        legend.append(Line2D([], [], color="black", marker="_", markersize=12, linestyle="none", label="95% CI"))
    if any(v is None for v in vals):
        legend.append(no_data_handle())
    ax.legend(handles=legend, title="group", fontsize=8, title_fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    what = "QueerBench score" if key == GAP_BLOCK else "HurtLex score"
    ax.set_title(f"{what} per group{' (95% CI)' if any(cis) else ''}\n{run_label(meta, scores)}", fontsize=11)
    _small_n_footnote(fig, scores)
    return fig


def heatmap_figure(
    table: pd.DataFrame,
    path: Path,
    title: str,
    *,
    subtitle: str | None = None,
    value_label: str = "score (higher = more harmful)",
    counts: pd.DataFrame | None = None,
) -> Path:
    """:func:`build_heatmap` written to ``path`` (PNG)."""
    return save_figure(build_heatmap(table, title, subtitle=subtitle, value_label=value_label, counts=counts), path)


def category_figure(scores: dict[str, Any], path: Path, meta: dict[str, Any] | None = None) -> Path:
    """:func:`build_category_figure` written to ``path`` (PNG)."""
    return save_figure(build_category_figure(scores, meta), path)


def comparison_figure(scores: dict[str, Any], path: Path, meta: dict[str, Any] | None = None) -> Path:
    """:func:`build_comparison_figure` written to ``path`` (PNG)."""
    return save_figure(build_comparison_figure(scores, meta), path)
