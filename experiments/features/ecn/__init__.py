"""ECN marking, one package: the marker this machine can run and the controller's plan
(:mod:`.plan`), the run loop's feature (:mod:`.feature`, registered in
experiments.features.registry), a round's results (:mod:`.summary`: ecn_counters.csv and
``summary["ecn"]``), its section of the results (:mod:`.report`, registered in
experiments.sections: its flow and host fields, the round summary, the rounds table) and its
marks on the queue plots and the K sweep (:mod:`.plots`). Only :mod:`.feature` and :mod:`.plan`
touch the live machine; the others read and write files."""
