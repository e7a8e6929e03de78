"""ECN marking on the controller's side, one package: the marking policy (:mod:`.policy`, pure:
the per-packet decision, the virtual queue and RED's average, the BPF marker's reference in the
unit tests), the BPF marker that does it in the kernel (:mod:`.marker`: loads
``controller/bpf/ecn_marker.bpf.c`` and reads and writes its maps) and the port manager that
applies an ECN plan's profiles to the switch ports (:mod:`.ports`, behind the REST API's
``/fabriclab/ecn`` requests). The profiles themselves are in :mod:`common.ecn`.
Importing this package imports none of its modules.
"""
