"""The QueerGen figure of a ``queergen`` run: its three scores per group (VADER, Perspective-style toxicity,
diversity), each a mean with QueerGen's 95% t-CI, in the project's figure conventions (groups differ by colour and
hatch so that grayscale prints stay readable; a group without a value gets the no-data look)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.lines import Line2D

__all__ = ["QUEERGEN_PANELS", "build_queergen_figure", "queergen_figure"]

QUEERGEN_PANELS: dict[str, str] = {
    "vader": "VADER of the word\n(−1…1, higher = more positive)",
    "perspective": "toxicity of unmarked sentence + word\n(0…1, higher = more toxic)",
    "diversity": "diversity % of the words\n(higher = more varied)",
}
"""The panels, in order: QueerGen's score key → y-axis label."""
PANEL_TITLES = {"vader": "VADER", "perspective": "Perspective (QueerGen's form)", "diversity": "Diversity"}


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


def build_queergen_figure(qg: dict[str, Any], title_run: str) -> plt.Figure:
    """One panel per QueerGen score present in ``qg`` (a run's ``scores.json["queergen"]``): a bar per group with
    its 95% t-CI; ``title_run`` names the model, config and k (the run label every figure carries)."""
    from queerbench.reporting.figures import NO_DATA_EDGE, NO_DATA_FACE, NO_DATA_HATCH, NO_DATA_LABEL, group_style

    panels = [m for m in QUEERGEN_PANELS if m in qg]
    if not panels:
        raise ValueError("no QueerGen scores to draw (the run scored no sentence)")
    groups = list(qg.get("groups") or qg[panels[0]])
    fig, axes = plt.subplots(1, len(panels), figsize=(3.3 * len(panels) + 1.6, 4.0), squeeze=False)
    handles: dict[str, Any] = {}
    missing = False
    for ax, metric in zip(axes[0], panels, strict=True):
        cells = qg[metric]
        values = [cells.get(g, {}).get("mean") for g in groups]
        finite = [abs(v) + abs(cells[g].get("ci") or 0) for g, v in zip(groups, values, strict=True) if _finite(v)]
        span = max([*finite, 1e-3])
        for i, (g, v) in enumerate(zip(groups, values, strict=True)):
            colour, hatch = group_style(g, i)
            if not _finite(v):
                missing = True
                ax.bar(i, span * 0.15, color=NO_DATA_FACE, edgecolor=NO_DATA_EDGE, hatch=NO_DATA_HATCH, linewidth=0.6)
                ax.text(i, span * 0.16, NO_DATA_LABEL, ha="center", va="bottom", fontsize=7)
                continue
            ci = cells[g].get("ci")
            err = ci if _finite(ci) and ci > 0 else None
            bar = ax.bar(i, v, yerr=err, capsize=4, color=colour, hatch=hatch, edgecolor="black", linewidth=0.8)
            handles.setdefault(g, bar)
            offset = (err or 0) + span * 0.03
            ax.text(i, v + offset if v >= 0 else v - offset, f"{v:.3f}" if metric != "diversity" else f"{v:.1f}",
                    ha="center", va="bottom" if v >= 0 else "top", fontsize=7)  # fmt: skip
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_xticks(range(len(groups)), [_tick(qg, g) for g in groups], fontsize=8)
        ax.set_ylabel(QUEERGEN_PANELS[metric], fontsize=8)
        low = min([0.0] + [v - (cells[g].get("ci") or 0) for g, v in zip(groups, values, strict=True) if _finite(v)])
        ax.set_ylim(low * 1.3 if low < 0 else 0, span * 1.3)
        ax.set_title(PANEL_TITLES[metric], fontsize=9)
    legend = [*handles.values()]
    labels = list(handles)
    legend.append(Line2D([], [], color="black", marker="_", markersize=12, linestyle="none"))
    labels.append("95% t-CI")
    if missing:
        from queerbench.reporting.figures import no_data_handle

        legend.append(no_data_handle())
        labels.append(NO_DATA_LABEL)
    fig.legend(
        legend, labels, title="group", fontsize=8, title_fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5)
    )
    fig.suptitle(f"QueerGen scores per group (mean, 95% t-CI)\n{title_run}", fontsize=11)
    fig.tight_layout()
    from queerbench.reporting.figures import SMALL_N_FOOTNOTE
    from queerbench.scoring.caveats import small_n

    if any(small_n(n) for n in (qg.get("n") or {}).values()):
        fig.text(0.01, -0.02, SMALL_N_FOOTNOTE, fontsize=8, ha="left", va="top")
    return fig


def _tick(qg: dict[str, Any], group: str) -> str:
    """A group's tick label with its n (``*`` after a small one)."""
    from queerbench.reporting.figures import n_label

    n = (qg.get("n") or {}).get(group)
    return f"{group}\n({'n=?' if n is None else n_label(int(n))})"


def queergen_figure(qg: dict[str, Any], title_run: str, path: Path) -> Path:
    """:func:`build_queergen_figure` written to ``path`` (PNG)."""
    from queerbench.reporting.figures import save_figure

    return save_figure(build_queergen_figure(qg, title_run), path)
