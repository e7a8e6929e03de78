"""PFC, one package: the plan the controller applies (:mod:`.plan`), the run loop's feature
(:mod:`.feature`, registered in experiments.features.registry), a round's results
(:mod:`.summary`: pauses.csv, pfc_occupancy.csv, ``summary["pfc"]``), its section of the round
summary and the rounds table (:mod:`.report`, registered in experiments.sections) and its plots
(:mod:`.plots`). Only :mod:`.feature` touches the live fabric; the others read and write files."""
