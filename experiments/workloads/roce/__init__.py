"""RoCEv2, one package: the run loop's workload (:mod:`.workload`, registered in
experiments.workloads.registry), the agents' jobs (:mod:`.jobs`), a round's results
(:mod:`.summary`), its section of the round summary and the rounds table (:mod:`.report`,
registered in experiments.sections) and its plot (:mod:`.plots`). Only :mod:`.workload` and
:mod:`.jobs` touch the live fabric; the others read and write files."""
