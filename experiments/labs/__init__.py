"""The coursework labs: one module each (experiments.labs.base.Lab), registered here by number.
Their sheets and answer templates are under labs/ (labs/README.md)."""
from experiments.labs.bandwidth import BandwidthLatency
from experiments.labs.base import Lab
from experiments.labs.collectives import Collectives
from experiments.labs.congestion import Congestion
from experiments.labs.optimisation import Optimisation
from experiments.labs.topology import Topology
from experiments.labs.troubleshooting import Troubleshooting

#: lab number -> its class (the sheet's folder is labs/<NN>-<slug>/)
LABS: dict[int, type[Lab]] = {cls.NUMBER: cls for cls in (BandwidthLatency, Topology, Collectives, Congestion,
                                                      Optimisation, Troubleshooting)}
