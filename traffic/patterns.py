"""Pure traffic schedules (no sockets, no root)."""
from __future__ import annotations


def incast_senders(hosts_by_leaf: dict[str, list[str]], receiver: str, count: int) -> list[str]:
    """Pick ``count`` senders for an N:1 incast toward ``receiver``.

    Senders come from leaves other than the receiver's, round-robin over
    those leaves (so the fan-in crosses the spine layer), then from the
    receiver's own leaf if the other leaves run out.

    Args:
        hosts_by_leaf: ``{leaf: [host, ...]}`` in position order.
        receiver: the receiving host.
        count: number of senders wanted (>= 1).

    Raises:
        ValueError: fewer than ``count`` other hosts exist, or ``receiver`` is unknown.
    """
    own = next((leaf for leaf, hs in hosts_by_leaf.items() if receiver in hs), None)
    if own is None:
        raise ValueError(f"receiver {receiver!r} is on no leaf")
    others = [list(hs) for leaf, hs in hosts_by_leaf.items() if leaf != own]
    order = []
    while any(others):
        for hs in others:
            if hs:
                order.append(hs.pop(0))
    order += [h for h in hosts_by_leaf[own] if h != receiver]
    if count > len(order):
        raise ValueError(f"{count} senders requested but only {len(order)} other hosts exist")
    return order[:count]
