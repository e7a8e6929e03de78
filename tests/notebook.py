"""docs/notebooks.md's analyses as code: the component tier runs them on a synthetic folder, the
live tier on the default experiment's results."""
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def notebook_blocks() -> list[str]:
    """The python blocks of docs/notebooks.md, in order."""
    return re.findall(r"```python\n(.*?)```", (REPO / "docs" / "notebooks.md").read_text(), re.S)


def run_notebook_blocks(blocks: list[str], folder: Path, cwd: Path) -> dict:
    """Run the blocks one after another in one namespace with ``folder`` set, in the directory
    ``cwd`` (where a block's figure goes); return the namespace."""
    import os

    import matplotlib
    matplotlib.use("Agg")
    g = {"folder": str(folder)}
    here = os.getcwd()
    os.chdir(cwd)
    try:
        for b in blocks:
            exec(compile(b, "docs/notebooks.md", "exec"), g)
    finally:
        os.chdir(here)
    return g
