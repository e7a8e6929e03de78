"""PFC on the controller's side, one package: the kernel's buffer accounting (:mod:`.accounting`:
loads ``controller/bpf/pfc.bpf.c``, attaches its classifiers and tracepoint programs, configures
its maps and delivers its XOFF/XON events) and the port manager around it (:mod:`.ports`:
priority queues on every port, the pauser that gates a link's upstream transmitter at XOFF and
reopens it at XON, the report, behind the REST API's ``/fabriclab/pfc`` requests). The pure
model (pause states, headroom, frames) is in :mod:`common.pfc`.
Importing this package imports none of its modules.
"""
