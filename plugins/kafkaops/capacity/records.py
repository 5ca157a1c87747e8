"""The capacity capability's data contract: the step results that cross XCom and the report note a
review writes into its record, as typed frozen values that the review's steps write and read back.

Step results (:meth:`to_dict` is what crosses XCom; :meth:`from_dict` reads it back):

    HistoryAppended  the history after this run's point was appended (its cluster, its points)
    SkewResult       the key-skew Spark app's result (``spark_apps/key_skew.py``, worded by
                     :func:`kafkaops.capacity.skew.summarize`), read by the review and the report
    ReportPaths      where the report's page, data and load plots are in the kafkaops store

Audit notes:

    ReportNote   where the report is (a stored artifact), the verdict, findings and recommendations in
                 words, and the recommendations as values published for other capabilities
                 (:class:`kafkaops.platform.recommendations.Published`: a partition increase reads the
                 partition counts through :func:`kafkaops.platform.recommendations.latest_partition_recommendation`)

The review itself crosses XCom as :class:`kafkaops.capacity.review.Review` (its own to_dict/from_dict,
beside the algorithm that makes it).

Invariant: each value's JSON is the shape the steps wrote before these types (keys and values alike);
the stored JSON of a note is the shape reviews wrote before this module (``report``, ``url``,
``verdict``, ``findings``, ``recommendations``, ``cluster_id``, ``recommended``; ``load_caption`` and the
report's ``load_png`` only when the review had a load window); :meth:`ReportNote.from_dict`
reads any age of it, a report note from before the store too (only a ``url`` under ``/kafkaops/capacity/``).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kafkaops.platform.recommendations import Published


@dataclass(frozen=True)
class HistoryAppended:
    """The review history of ``cluster_id`` after this run's point was appended: ``points`` in all."""

    cluster_id: str
    points: int

    def to_dict(self) -> dict[str, Any]:
        return {"cluster_id": self.cluster_id, "points": self.points}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HistoryAppended:
        return cls(cluster_id=str(data["cluster_id"]), points=int(data["points"]))


@dataclass(frozen=True)
class SkewResult:
    """The key skew of a topic sample: ``records`` (``bytes``) sampled over ``keys`` keys, the hottest
    keys (``top_keys``: key, records, bytes, share), the records of the busiest keys (``key_histogram``),
    the load per partition now and under each candidate count (``now``, ``what_if``: per_partition, max,
    mean, max_mean_ratio, max_share), the candidate key field's (``candidate``, None without one) and
    the sampled offsets (``sample``, None when the result was not made by the Spark app).

    Invariant: ``empty`` is ``records == 0``; :meth:`to_dict` gives back the JSON read."""

    topic: str
    partitions: int
    records: int
    bytes: int
    keys: int
    null_key_records: int = 0
    empty: bool = False
    top_keys: tuple[Mapping[str, Any], ...] = ()
    key_histogram: tuple[int, ...] = ()
    now: Mapping[str, Any] = field(default_factory=dict)
    what_if: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    candidate: Mapping[str, Any] | None = None
    sample: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"topic": self.topic, "partitions": self.partitions, "records": self.records, "bytes": self.bytes,
               "keys": self.keys, "null_key_records": self.null_key_records, "empty": self.empty,
               "top_keys": [dict(k) for k in self.top_keys], "key_histogram": list(self.key_histogram),
               "now": dict(self.now), "what_if": {n: dict(w) for n, w in self.what_if.items()},
               "candidate": None if self.candidate is None else dict(self.candidate)}
        if self.sample is not None:
            out["sample"] = dict(self.sample)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SkewResult:
        records = int(data.get("records") or 0)
        return cls(topic=str(data["topic"]), partitions=int(data["partitions"]), records=records,
                   bytes=int(data.get("bytes") or 0), keys=int(data.get("keys") or 0),
                   null_key_records=int(data.get("null_key_records") or 0), empty=bool(data.get("empty", records == 0)),
                   top_keys=tuple(data.get("top_keys") or ()), key_histogram=tuple(data.get("key_histogram") or ()),
                   now=dict(data.get("now") or {}), what_if=dict(data.get("what_if") or {}),
                   candidate=data.get("candidate"), sample=data.get("sample"))


@dataclass(frozen=True)
class ReportPaths:
    """Artifact paths in the kafkaops store (served under ``/kafkaops/artifacts/``): the report's page
    (``html``), the review as data (``json``, which the page links) and the load plots (``load_png``, None
    for a review without a load window; the record page shows it)."""

    html: str
    json: str
    load_png: str | None = None

    @property
    def html_url(self) -> str:
        """The page as the Airflow webserver serves it (the record page links it)."""
        return f"/kafkaops/artifacts/{self.html}"

    def to_dict(self) -> dict[str, str]:
        out = {"html": self.html, "json": self.json, "url": self.html_url}
        if self.load_png is not None:
            out["load_png"] = self.load_png
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReportPaths:
        load_png = data.get("load_png")
        return cls(html=str(data["html"]), json=str(data["json"]), load_png=None if load_png is None else str(load_png))


@dataclass(frozen=True)
class ReportNote:
    """A capacity review's report in its record (``ts`` set by the store: None until written). The load plots'
    artifact is ``report["load_png"]`` (:class:`ReportPaths`), ``load_caption`` what they show (the window in
    UTC, the limits); both absent from notes of reviews without a load window, and from older notes."""

    KEY: ClassVar[str] = "report"
    text: str
    url: str | None
    report: Mapping[str, str] = field(default_factory=dict)
    verdict: str | None = None
    findings: tuple[str, ...] = ()
    recommendations: tuple[str, ...] = ()
    published: Published = Published(None)
    ts: float | None = None
    load_caption: str | None = None

    @property
    def load_png(self) -> str | None:
        """The load plots' artifact path, None without one."""
        return self.report.get("load_png") or None

    def to_dict(self) -> dict[str, Any]:
        out = {"text": self.text, "url": self.url, self.KEY: dict(self.report), "verdict": self.verdict,
               "findings": list(self.findings), "recommendations": list(self.recommendations),
               **self.published.to_dict()}
        if self.load_caption is not None:
            out["load_caption"] = self.load_caption
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReportNote:
        return cls(text=str(data.get("text") or ""), url=data.get("url"), report=dict(data.get(cls.KEY) or {}),
                   verdict=data.get("verdict"), findings=tuple(data.get("findings") or ()),
                   recommendations=tuple(data.get("recommendations") or ()), published=Published.from_dict(data),
                   ts=data.get("ts"), load_caption=data.get("load_caption"))

    @classmethod
    def in_note(cls, data: Mapping[str, Any]) -> bool:
        """A report note: one with the report's paths, or (before the store) a capacity report's URL."""
        return bool(data.get(cls.KEY) or (data.get("url") and "capacity" in str(data.get("url"))))
