"""Where a live migration's write window went (kafkaops.rekey.records.LiveRecord.window_phases), from the
record's own times: the phases are in order and add up to the window."""
from __future__ import annotations

from typing import Any

import pytest

from kafkaops.rekey.records import (Action, ActionNote, FinalPassNote, GroupTranslation, LiveRecord, PassRow, Quiesced,
                                    QuiescedNote, SwitchDecision, SwitchObserved, SwitchObservedNote, TranslationNote)

T0 = 1_795_870_000.0


def at(note: Any, ts: float) -> dict[str, Any]:
    return {**note.to_dict(), "ts": ts}


def notes(*, window: float | None = 30.0, request: bool = True) -> list[dict[str, Any]]:
    """Last source write at T0; seen still at +4; final pass done at +14; offsets at +24; the switch asked for
    at +26; first target write at +30; the person confirmed the switch at +35, after the applications moved."""
    made = [at(QuiescedNote("producers quiesced", Quiesced("manual", T0 + 0.5, T0 + 4, {0: 9})), T0 + 4),
            at(FinalPassNote("final pass 3", PassRow(3, 6, 6, "direct", 10.0)), T0 + 14),
            at(TranslationNote("cut-over", {"g": GroupTranslation({"0": 9}, {"1": 9})}), T0 + 24)]
    if request:
        made.append(at(ActionNote("move the applications", Action.SWITCH), T0 + 26))
    made.append(at(SwitchDecision(True, "approver"), T0 + 35))
    made.append(at(SwitchObservedNote("switch observed", SwitchObserved(window, int(T0 * 1000),
                                                                       int((T0 + 30) * 1000), (1,))), T0 + 40))
    return made


def test_the_phases_are_in_order_and_add_up_to_the_window() -> None:
    live = LiveRecord.of(notes())
    assert live is not None
    phases = live.window_phases()
    assert [name for name, _ in phases] == ["until the source was seen still", "the final pass",
                                           "the integrity gate, the consumer groups and their offsets",
                                           "the request to switch", "the applications' switch (the request to "
                                           "the producers' first write to the target)"]
    assert [s for _, s in phases] == pytest.approx([4.0, 10.0, 10.0, 2.0, 4.0])
    assert sum(s for _, s in phases) == pytest.approx(30.0)


def test_a_record_without_a_switch_request_or_window_has_no_phases() -> None:
    assert LiveRecord.of(notes(request=False)).window_phases() == ()  # type: ignore[union-attr]
    assert LiveRecord.of(notes(window=None)).window_phases() == ()  # type: ignore[union-attr]
