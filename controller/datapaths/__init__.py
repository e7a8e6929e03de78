"""The switches' forwarding, behind one seam: :class:`controller.datapaths.base.Datapath`.

A datapath creates a fabric's switches and their ports, takes the routes and ECMP groups the
controller computed, says which processes forward (for CPU accounting), traces a flow's output
port, and removes its switches, in the run and in a clean-up after a crash (by recorded names).
Open vSwitch (its kernel and userspace datapaths) is the first implementation
(:mod:`controller.datapaths.ovs`); a second is one package plus one entry in
:mod:`controller.datapaths.registry`. Everything a port has whatever forwards to it (shaper,
FIFO, ECN marker, PFC gate, delay line, BPF hooks) is in :mod:`controller.dataplane`.
Importing this package imports none of its modules.
"""
