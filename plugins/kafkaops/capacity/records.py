"""The capacity capability's data contract: the report note a review writes into its record, as a
typed frozen value that the review's step writes and the record page reads.

    ReportNote   where the report is (a stored artifact), the verdict, findings and recommendations in
                 words, and the recommendations as values published for other capabilities
                 (:class:`kafkaops.platform.recommendations.Published`: a partition increase reads the
                 partition counts through :func:`kafkaops.platform.recommendations.latest_partition_recommendation`)

The review itself (:class:`kafkaops.capacity.review.Review`) and the report's paths
(:class:`kafkaops.capacity.report.ReportPaths`) are the step results that cross XCom.

Invariant: the stored JSON is the shape reviews wrote before this module (``report``, ``url``,
``verdict``, ``findings``, ``recommendations``, ``cluster_id``, ``recommended``); :meth:`ReportNote.from_dict`
reads any age of it, a report note from before the store too (only a ``url`` under ``/kafkaops/capacity/``).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kafkaops.platform.recommendations import Published


@dataclass(frozen=True)
class ReportNote:
    """A capacity review's report in its record (``ts`` set by the store: None until written)."""

    KEY: ClassVar[str] = "report"
    text: str
    url: str | None
    report: Mapping[str, str] = field(default_factory=dict)
    verdict: str | None = None
    findings: tuple[str, ...] = ()
    recommendations: tuple[str, ...] = ()
    published: Published = Published(None)
    ts: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "url": self.url, self.KEY: dict(self.report), "verdict": self.verdict,
                "findings": list(self.findings), "recommendations": list(self.recommendations),
                **self.published.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReportNote:
        return cls(text=str(data.get("text") or ""), url=data.get("url"), report=dict(data.get(cls.KEY) or {}),
                   verdict=data.get("verdict"), findings=tuple(data.get("findings") or ()),
                   recommendations=tuple(data.get("recommendations") or ()), published=Published.from_dict(data),
                   ts=data.get("ts"))

    @classmethod
    def in_note(cls, data: Mapping[str, Any]) -> bool:
        """A report note: one with the report's paths, or (before the store) a capacity report's URL."""
        return bool(data.get(cls.KEY) or (data.get("url") and "capacity" in str(data.get("url"))))
