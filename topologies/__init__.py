"""Pure fabric builders: no tc, no sysctl, no root needed."""
from topologies.spineleaf import SpineLeaf, Fabric, Node, LinkSpec, MAX_IFNAME_LEN

__all__ = ["SpineLeaf", "Fabric", "Node", "LinkSpec", "MAX_IFNAME_LEN"]
