"""The run loop, the analysis and the troubleshooter stay readable: no function in them longer
than 80 lines or with more than 25 branches (an if, loop, try, with, except, conditional
expression, comprehension or match counts one; an ``and``/``or`` chain one per extra operand)."""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: The modules the limits hold for.
MODULES = ("experiments/runner.py", "experiments/analysis.py", "experiments/troubleshooter.py",
           "experiments/diagnose.py")
MAX_LINES, MAX_BRANCHES = 80, 25
_BRANCHES = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.With, ast.AsyncWith, ast.IfExp,
             ast.ExceptHandler, ast.comprehension, ast.Match)


def branches(fn: ast.AST) -> int:
    """The branch count of a function (nested functions included), as the module docstring says."""
    n = 0
    for x in ast.walk(fn):
        if isinstance(x, _BRANCHES):
            n += 1
        elif isinstance(x, ast.BoolOp):
            n += len(x.values) - 1
    return n


def oversized(source: str) -> list[tuple[str, int, int]]:
    """``(function, lines, branches)`` of every function over a limit in ``source``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines, b = node.end_lineno - node.lineno + 1, branches(node)
            if lines > MAX_LINES or b > MAX_BRANCHES:
                out.append((node.name, lines, b))
    return out


def test_no_function_of_the_run_loop_the_analysis_or_the_troubleshooter_is_over_its_limits():
    found = {m: oversized((REPO / m).read_text()) for m in MODULES}
    assert not {m: f for m, f in found.items() if f}, found


def test_the_limits_can_fail():
    long_fn = "def f(x):\n" + "".join(f"    x += {i}\n" for i in range(85))
    branchy = "def g(x):\n" + "".join(f"    if x == {i}:\n        x += 1\n" for i in range(26))
    assert [name for name, *_ in oversized(long_fn + "\n" + branchy)] == ["f", "g"]
    assert oversized("def h(a, b, c):\n    return a and b or c\n") == []
