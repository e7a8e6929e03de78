"""What every plot of a results folder shares: matplotlib without a display, writing a PNG with
its caption (experiments.pagekit.Caption, stored in the file for the report), the legend under
the axes, and reading a result CSV. experiments.plot and each mechanism's plots (e.g.
experiments.features.pfc.plots) draw with these; they read result files only."""
from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from experiments.pagekit import Caption  # noqa: E402

__all__ = ["plt", "read_csv", "save_with_legend", "write_png"]


def write_png(fig, path: Path, caption: Caption) -> Path:
    """Write ``fig`` to ``path`` (PNG, 110 dpi) with ``caption`` in the file (what a report shows
    beside the plot: experiments.pagekit), close the figure. Returns ``path``."""
    fig.savefig(path, dpi=110, metadata=caption.metadata())
    plt.close(fig)
    return Path(path)


def save_with_legend(fig, ax, path: Path, legend_cols: int, caption: Caption) -> Path:
    """Legend under the axes in ``legend_cols`` columns, light grid, then :func:`write_png`."""
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), fontsize=7, ncol=legend_cols, frameon=False)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return write_png(fig, path, caption)


def read_csv(path: Path) -> list[dict]:
    """The rows of a result CSV as dicts of strings (header -> cell)."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))
