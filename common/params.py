"""Scenario fields: one declared key with its type, range and default (pure; raises ScenarioError
naming the key). Every registered topology and traffic pattern declares its own keys with these;
the typed scenario (experiments.model.field_of) turns them into pydantic fields."""
from __future__ import annotations

import math
import re
import reprlib
from dataclasses import dataclass
from typing import Any

from common.errors import ScenarioError

_REQUIRED = object()

_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxlevel = 60, 60, 4, 4, 2


def quote(value: Any) -> str:
    """A short ``repr`` of ``value`` for an error message (long strings and lists abbreviated)."""
    return _SHORT.repr(value)


@dataclass(frozen=True)
class F:
    """One scalar field of the schema.

    Attributes:
        types: accepted Python types (bool is never accepted as a number).
        default: value used when the key is absent; ``_REQUIRED`` if mandatory,
            None if the key is optional and has no value.
        lo, hi: inclusive numeric range, if any.
        choices: accepted values, if restricted.
        pattern: regular expression a string must match in full.
    """

    types: tuple
    default: Any = None
    lo: float | None = None
    hi: float | None = None
    choices: tuple | None = None
    pattern: str | None = None

    def check(self, key: str, value: Any) -> Any:
        """Return ``value`` if valid for this field, else raise ScenarioError naming ``key``."""
        if value is None and self.default is None:
            return None
        if isinstance(value, bool) and bool not in self.types:
            raise ScenarioError(key, f"expected {self._tname()}, got a boolean")
        if not isinstance(value, self.types):
            raise ScenarioError(key, f"expected {self._tname()}, got {type(value).__name__} {quote(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ScenarioError(key, f"expected a finite number, got {value}")
        if self.choices is not None and value not in self.choices:
            raise ScenarioError(key, f"must be one of {', '.join(map(str, self.choices))}; got {quote(value)}")
        if self.lo is not None and value < self.lo:
            raise ScenarioError(key, f"must be >= {self.lo}, got {quote(value)}")
        if self.hi is not None and value > self.hi:
            raise ScenarioError(key, f"must be <= {self.hi}, got {quote(value)}")
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            raise ScenarioError(key, f"must match {self.pattern}, got {quote(value)}")
        return value

    def _tname(self) -> str:
        return " or ".join(t.__name__ for t in self.types)


def check_params(obj: Any, params: dict, prefix: str) -> None:
    """Check the attribute of ``obj`` named by every key of ``params`` against its field.

    Args:
        params: ``{key: F}`` (a registry entry's declared keys).
        prefix: the section the keys sit in, e.g. ``topology``.

    Raises:
        ScenarioError: the first value out of its field, naming ``<prefix>.<key>``.
    """
    for key, spec in params.items():
        spec.check(f"{prefix}.{key}", getattr(obj, key))
