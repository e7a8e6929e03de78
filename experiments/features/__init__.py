"""Features: what the fabric does around a round's traffic, one module or package each.

The registry the run loop reads is :mod:`experiments.features.registry`; this package imports
nothing, so that a feature's pure half (its result section, its plots) can be imported without
the live half and its netlink, OVS and Mininet dependencies."""
