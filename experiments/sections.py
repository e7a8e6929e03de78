"""The result-section registry: the mechanisms whose sections a round's summary can hold, in
the order their lines, columns and plots appear (experiments.section.ResultSection). Adding one
is a ``report`` module in the mechanism's package, plus its import and an entry here."""
from __future__ import annotations

from experiments.features.ecn.report import SECTION as ECN
from experiments.features.pfc.report import SECTION as PFC
from experiments.section import ResultSection
from experiments.workloads.roce.report import SECTION as ROCE

#: Registered result sections, in order (ECN's line first, then PFC's, then RoCE's).
SECTIONS: tuple[ResultSection, ...] = (ECN, PFC, ROCE)

__all__ = ["SECTIONS", "ResultSection"]
