"""ECN marking, one package: the marker this machine can run and the controller's plan
(:mod:`.plan`), the run loop's feature (:mod:`.feature`, registered in
experiments.features.registry), a round's results (:mod:`.summary`: ecn_counters.csv and
``summary["ecn"]``) and its section of the round summary and the rounds table (:mod:`.report`,
registered in experiments.sections). Only :mod:`.feature` and :mod:`.plan` touch the live
machine; the others read and write files."""
