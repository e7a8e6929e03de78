"""The Linux side of every switch port and host: one module per subject, each raising
:class:`common.errors.SetupError` with the kernel's or the tool's own message (cases L1, L2).

- :mod:`~controller.dataplane.netlink`: namespaces, interface lookup, tc handles, running a command.
- :mod:`~controller.dataplane.tcqdisc`: a port's HTB shaper, FIFO or RED leaf, delay lines, reading
  and deleting qdisc trees (RED's parameters: :mod:`common.redparams`).
- :mod:`~controller.dataplane.pausegate`: PFC's priority classes and pause gates.
- :mod:`~controller.dataplane.counters`: interface counters.
- :mod:`~controller.dataplane.bpfhook`: a BPF classifier on a port's clsact hook.
- :mod:`~controller.dataplane.hostknobs`: sysctls, offloads, IPv6, RCU, link state, root links.
- :mod:`~controller.dataplane.ovsctl`: Open vSwitch's own commands and sockets.

Which switch forwards the frames between those ports is the datapath's business
(:mod:`controller.datapaths`). Importing this package imports none of its modules.
"""
