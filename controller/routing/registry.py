"""The routing strategies by name: the scenario's ``routing.mode``, the controller's ``--routing``.

A new strategy is one module in ``controller/routing/`` (a subclass of
:class:`controller.routing.base.RoutingStrategy`) and one line here: the schema, the controller's
options, the flow tables it installs, the fluid models and the run's record take it from
:data:`STRATEGIES`.
"""
from __future__ import annotations

from controller.routing.base import RoutingStrategy
from controller.routing.ecmp import Ecmp
from controller.routing.single import Single
from controller.routing.valiant import Valiant

#: ``{name: strategy class}``, the default first.
STRATEGIES: dict[str, type[RoutingStrategy]] = {}


def register(cls: type[RoutingStrategy]) -> type[RoutingStrategy]:
    """Add ``cls`` under its ``NAME`` (returns it, so it can decorate a class).

    Raises:
        ValueError: no ``NAME``, or a name already taken by another class.
    """
    if not cls.NAME:
        raise ValueError(f"{cls.__name__} has no NAME")
    if STRATEGIES.get(cls.NAME, cls) is not cls:
        raise ValueError(f"routing mode {cls.NAME!r} is taken by {STRATEGIES[cls.NAME].__name__}")
    STRATEGIES[cls.NAME] = cls
    return cls


register(Ecmp)
register(Single)
register(Valiant)


def names() -> tuple[str, ...]:
    """Every registered routing mode, the default (``ecmp``) first."""
    return tuple(STRATEGIES)


def strategy_class(mode: str) -> type[RoutingStrategy]:
    """The strategy registered as ``mode``.

    Raises:
        ValueError: no strategy of that name (the message lists them).
    """
    try:
        return STRATEGIES[mode]
    except KeyError:
        raise ValueError(f"routing mode must be one of {', '.join(STRATEGIES)}; got {mode!r}") from None


def strategy_for(fabric_map: dict, mode: str = "ecmp") -> RoutingStrategy:
    """Strategy ``mode`` on ``fabric_map``: its routes, flow tables and path model.

    Raises:
        ValueError: an unknown mode, or one that cannot route this fabric (its ``refuse``).
    """
    return strategy_class(mode)(fabric_map)
