"""Fabric builders (pure: no tc, no sysctl, no root) and their registry.

A topology is one module with one frozen dataclass subclassing :class:`topologies.base.Topology`
(which checks its keys and gives ``from_mn_args``), registered in :data:`TOPOLOGIES` by its
``KIND``. The scenario schema, ``python -m experiments draw`` and ``mn --custom
topologies/mn_custom.py`` read the registry, so a new topology is its module plus one entry here.
What a registered class provides (SpineLeaf, FatTree and Dragonfly are the examples):

- ``KIND`` (the scenario's ``topology.kind``), ``TITLE`` (for plots), ``LAYERS`` (node layers from
  top to bottom, ``"host"`` last; ECN's ``layers`` keys are the switch layers);
- ``PARAMS``: ``{key: common.params.F}``, the ``topology`` keys it takes with type, range and default;
  a key two kinds share must be declared the same (a unit test checks);
- ``MN_ARGS``: the ``mn --topo KIND,...`` form (the base's ``from_mn_args`` reads the numbers in
  that order; override it when the form differs); ``check()`` for rules across keys;
- the constructor (keyword arguments = PARAMS keys; ScenarioError naming ``topology.<key>``),
  ``n_hosts``, ``n_links``, ``n_groups`` (host groups whose traffic between them crosses the top layer: the
  permutation pattern needs two) and ``build() -> Fabric``.
"""
from topologies.dragonfly import Dragonfly
from topologies.fattree import FatTree
from topologies.rail import RailOptimized
from topologies.base import MAX_IFNAME_LEN, Fabric, LinkSpec, Node
from topologies.spineleaf import SpineLeaf

#: kind -> builder class.
TOPOLOGIES = {cls.KIND: cls for cls in (SpineLeaf, FatTree, Dragonfly, RailOptimized)}

__all__ = ["TOPOLOGIES", "SpineLeaf", "FatTree", "Dragonfly", "RailOptimized", "Fabric", "Node", "LinkSpec", "MAX_IFNAME_LEN"]
