"""Open vSwitch as fabriclab's datapath: its kernel module where the kernel has it, else its
userspace datapath (``netdev``). The class is :class:`controller.datapaths.ovs.datapath.OvsDatapath`;
Open vSwitch's commands are in :mod:`controller.dataplane.ovsctl`."""
