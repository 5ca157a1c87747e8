"""The capacity capability's step results (kafkaops.capacity.records) keep the JSON the steps wrote
before the types: to_dict(from_dict(x)) == x, and the typed fields read what the readers read."""
from __future__ import annotations

from kafkaops.capacity import skew
from kafkaops.capacity.records import HistoryAppended, ReportNote, ReportPaths, SkewResult


def test_the_history_result_round_trips() -> None:
    data = {"cluster_id": "c1", "points": 3}
    assert HistoryAppended.from_dict(data) == HistoryAppended("c1", 3) and HistoryAppended("c1", 3).to_dict() == data


def test_the_report_paths_round_trip_with_their_url() -> None:
    paths = ReportPaths("capacity/c1/r1/report.html", "capacity/c1/r1/review.json")
    assert paths.to_dict()["url"] == "/kafkaops/artifacts/capacity/c1/r1/report.html"
    assert ReportPaths.from_dict(paths.to_dict()) == paths
    assert "load_png" not in paths.to_dict()  # the shape reviews without a load window wrote before the plots
    loaded = ReportPaths("capacity/c1/r1/report.html", "capacity/c1/r1/review.json", "capacity/c1/r1/load.png")
    assert ReportPaths.from_dict(loaded.to_dict()) == loaded and loaded.to_dict()["load_png"].endswith("load.png")


def test_a_report_note_carries_the_load_plot_and_reads_notes_from_before_it() -> None:
    older = {"text": "capacity report", "url": "/kafkaops/artifacts/capacity/c1/r1/report.html",
             "report": {"html": "capacity/c1/r1/report.html", "json": "capacity/c1/r1/review.json"},
             "verdict": "enough", "findings": [], "recommendations": []}
    note = ReportNote.from_dict(older)
    assert note.load_png is None and note.load_caption is None and "load_caption" not in note.to_dict()
    paths = ReportPaths("capacity/c1/r1/report.html", "capacity/c1/r1/review.json", "capacity/c1/r1/load.png")
    note = ReportNote("capacity report", paths.html_url, paths.to_dict(), load_caption="the window")
    assert ReportNote.from_dict(note.to_dict()) == note
    assert note.load_png == "capacity/c1/r1/load.png" and note.to_dict()["load_caption"] == "the window"


def test_a_key_skew_result_reads_typed_and_writes_out_the_same_json() -> None:
    records = [(b"hot", b'{"user": "a"}', 0)] * 6 + [(b"k1", b'{"user": "b"}', 1), (None, b"{}", 1)]
    data = skew.analyze("orders", records, partitions=2, candidates=(1, 2, 4), candidate_field="user")
    data["sample"] = {"start": {"0": 0, "1": 0}, "end": {"0": 6, "1": 2}}  # as the Spark app adds it
    result = SkewResult.from_dict(data)
    assert (result.topic, result.partitions, result.records, result.keys, result.empty) == ("orders", 2, 8, 2, False)
    assert result.top_keys[0]["key"] == "hot" and result.candidate and result.candidate["field"] == "user"
    assert result.to_dict() == data and SkewResult.from_dict(result.to_dict()) == result
    plain = skew.analyze("orders", [], partitions=1)
    assert SkewResult.from_dict(plain).empty and SkewResult.from_dict(plain).to_dict() == plain  # no sample
