"""Workloads: what moves data in a round, one module or package each.

The registry the run loop reads is :mod:`experiments.workloads.registry`; this package imports
nothing, so that a workload's pure half (its result section, its plots) can be imported without
the live half."""
