"""Training iterations, one package: the run loop's workload (:mod:`.workload`, registered in
experiments.workloads.registry) and a round's ranks and results (:mod:`.run`); its ranks run
through the collectives' agents and plan (experiments.workloads.collective)."""
