"""Mixed-parallel training (tensor x pipeline x data), one package: the run loop's workload
(:mod:`.workload`, registered in experiments.workloads.registry) and a round's ranks, link
accounting and results (:mod:`.run`); its ranks run through the collectives' agents and plan."""
