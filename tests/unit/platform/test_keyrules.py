"""kafkaops.platform.keyrules, the Python side of docs/key-rules.md: the shared vectors (the JVM side,
jvm/spark-udf KeyRule, is held to the same file by KeyRuleTest), the rule syntax, and properties
against json itself."""
from __future__ import annotations

import json
import re
import struct
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkaops.errors import ConfigError
from kafkaops.platform import keyrules
from kafkaops.platform.keyrules import KeyResult, KeyRule, KeyRuleError, extract, extract_key
from tests.unit.rekey.key_rule_vectors import VECTORS as VECTORS_FILE
from tests.unit.rekey.key_rule_vectors import Vector, load

VECTORS = load()


@pytest.mark.parametrize("v", VECTORS, ids=[f"{i}:{v.note[:60]}" for i, v in enumerate(VECTORS)])
def test_each_vector_gives_its_key_or_code(v: Vector) -> None:
    assert KeyRule(v.rule).steps == v.steps
    got = extract(v.record_key, v.value, v.rule)
    assert (got.key, got.code) == (v.key, v.code), got.detail
    assert (got.key is None) == (got.detail is not None) == (got.code is not None)


def test_the_vectors_cover_every_code_and_the_limits_they_assume() -> None:
    data = json.loads(VECTORS_FILE.read_text())
    assert (data["max_depth"], data["max_number_length"]) == (keyrules.MAX_DEPTH, keyrules.MAX_NUMBER_LENGTH)
    codes = Counter(v.code for v in VECTORS if v.code)
    assert set(codes) == set(keyrules.CODES), codes
    assert len(VECTORS) > 200


@pytest.mark.parametrize("rule, steps", [
    ("record_key", ()), ("window_key", ()), ("session_key", ()), ("field:account_id", ("account_id",)), ("field:odd name.x", ("odd name.x",)),
    ("jsonpath:$.customer.id", ("customer", "id")), ("jsonpath:$.items[1].sku", ("items", 1, "sku")),
    ("jsonpath:$['it\\'s'][0]", ("it's", 0)), ('jsonpath:$["say \\"hi\\""]', ('say "hi"',)),
    ("jsonpath: $.a ", ("a",)), ("jsonpath:$['']", ("",)),
])
def test_rule_syntax(rule: str, steps: tuple) -> None:
    assert KeyRule(rule).steps == steps
    assert KeyRule(rule).needs_value == (rule not in ("record_key", "window_key", "session_key"))
    assert KeyRule(rule).is_record_key == (rule == "record_key")
    assert KeyRule(rule).reads == ("value" if KeyRule(rule).needs_value else "key")
    assert KeyRule(rule).keeps_record_key == (not KeyRule(rule).needs_value)


def test_the_written_key_and_the_placement_key_of_each_kind_of_rule() -> None:
    """record_key and the store rules write the record's own key (the store rules place it by the store key);
    a value rule writes and places by its new key."""
    from kafkaops.platform.keyrules import placement_key, written_key

    changelog = b"sensor-1" + struct.pack(">qi", 60_000, 3)
    assert written_key(changelog, b"sensor-1", "window_key") == changelog
    assert placement_key(changelog, "window_key") == b"sensor-1"
    assert placement_key(b"sensor-1" + struct.pack(">qq", 9, 5), "session_key") == b"sensor-1"
    assert written_key(b"short", None, "window_key") == b"short"  # a dead letter keeps its key too
    assert placement_key(b"short", "window_key") is None  # no store key: placed nowhere
    assert written_key(b"r1", b"r1", "record_key") == placement_key(b"r1", "record_key") == b"r1"
    assert written_key(b"r1", b"acct-7", "field:account") == placement_key(b"acct-7", "field:account") == b"acct-7"
    assert written_key(b"r1", None, "field:account") is None and placement_key(None, "window_key") is None
    # placed by the whole changelog key, as record_key would: not where window_key puts it
    assert placement_key(changelog, "record_key") == changelog


@pytest.mark.parametrize("rule, words", [
    ("jsonpath:$..a", "no wildcards"), ("jsonpath:$.a[*]", "no wildcards"), ("jsonpath:a.b", "starts at '\\$'"),
    ("jsonpath:$", "whole value"), ("field:", "names no field"), ("key", "unknown"),
    ("jsonpath:$.a[?(@.b)]", "no wildcards"), ("jsonpath:$[\u0663]", "no wildcards"),
    (f"jsonpath:$[{2**31}]", "above 2147483647"), ("field:\ud800", "lone surrogate"),
    ("window_key:", "unknown"), ("Window_key", "unknown"), ("session_key ", "unknown"),
])
def test_unsupported_rules_are_refused_naming_the_rule(rule: str, words: str) -> None:
    with pytest.raises(KeyRuleError, match=words) as err:
        KeyRule(rule)
    assert isinstance(err.value, ConfigError) and "key rule" in str(err.value)


def test_an_unknown_rule_names_every_form() -> None:
    with pytest.raises(KeyRuleError) as err:
        KeyRule("windowed")
    for form in ("record_key", "window_key", "session_key", "field:<name>", "jsonpath:$.a.b"):
        assert f"'{form}'" in str(err.value)


def test_not_a_windowed_key_is_decided_right_after_no_key() -> None:
    """Both are decided from the key alone, before anything a value rule decides."""
    assert keyrules.CODES[:3] == ("NO_KEY", "NOT_A_WINDOWED_KEY", "NO_VALUE")


def test_the_vectors_cover_each_store_key_rule() -> None:
    """Per store key rule: a key, an empty store key, a tombstone copied by its key, a key without a
    plausible suffix, a record without a key."""
    for rule, suffix in (("window_key", 12), ("session_key", 16)):
        of_rule = [v for v in VECTORS if v.rule == rule]
        assert all(v.steps == () for v in of_rule)
        assert b"" in {v.key for v in of_rule}
        assert any(v.value is None and v.key is not None for v in of_rule)
        assert {v.code for v in of_rule} == {None, "NO_KEY", "NOT_A_WINDOWED_KEY"}
        assert any(v.code == "NOT_A_WINDOWED_KEY" and len(v.record_key or b"") == suffix - 1 for v in of_rule)


LONGS = st.integers(-(2**63), 2**63 - 1)


@given(st.binary(max_size=40), LONGS, st.integers(-(2**31), 2**31 - 1), st.one_of(st.none(), st.binary(max_size=5)))
@settings(max_examples=300)
def test_window_key_is_the_key_before_a_plausible_window_suffix(base: bytes, start: int, seq: int,
                                                                 value: bytes | None) -> None:
    key = base + struct.pack(">qi", start, seq)  # WindowKeySchema.toStoreKeyBinary
    want = KeyResult(base) if start >= 0 and seq >= 0 else None
    got = extract(key, value, "window_key")
    assert got == want if want else got.code == "NOT_A_WINDOWED_KEY"
    assert extract(key[-11:], value, "window_key").code == "NOT_A_WINDOWED_KEY"


@given(st.binary(max_size=40), LONGS, LONGS, st.one_of(st.none(), st.binary(max_size=5)))
@settings(max_examples=300)
def test_session_key_is_the_key_before_a_plausible_session_window(base: bytes, end: int, start: int,
                                                                   value: bytes | None) -> None:
    key = base + struct.pack(">qq", end, start)  # SessionKeySchema.toBinary: end, then start
    want = KeyResult(base) if 0 <= start <= end else None
    got = extract(key, value, "session_key")
    assert got == want if want else got.code == "NOT_A_WINDOWED_KEY"
    assert extract(key[-15:], value, "session_key").code == "NOT_A_WINDOWED_KEY"


def test_store_key_rules_read_the_key_only() -> None:
    key = b"k" + struct.pack(">qi", 5, 0)
    for value in (None, b"", b"\xff", b'{"key": "other"}'):
        assert extract(key, value, "window_key") == KeyResult(b"k")
    assert extract(None, b'{"key": "k"}', "session_key") == KeyResult(None, "NO_KEY", "the record has no key")
    assert "negative" in str(extract(b"k" + struct.pack(">qi", -5, 0), None, "window_key").detail)
    assert "after" in str(extract(b"k" + struct.pack(">qq", 1, 2), None, "session_key").detail)


@given(st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True),
                       st.one_of(st.text(max_size=10), st.integers()), min_size=1))
@settings(max_examples=100)
def test_field_and_jsonpath_rules_agree(body: dict) -> None:
    value = json.dumps(body).encode()
    for name in body:
        assert extract_key(None, value, f"field:{name}") == extract_key(None, value, f"jsonpath:$.{name}")
        assert extract_key(None, value, f"jsonpath:$['{name}']") == extract_key(None, value, f"field:{name}")


SCALARS = st.one_of(st.text(st.characters(codec="utf-8")), st.integers(), st.booleans(),
                    st.floats(allow_nan=False, allow_infinity=False))


@given(SCALARS, st.booleans(), st.integers(0, 3))
@settings(max_examples=300)
def test_a_scalar_written_by_json_dumps_reads_back_as_its_text(found: object, ascii_only: bool, spaces: int) -> None:
    """Strings give their UTF-8 bytes, numbers and booleans the token json wrote, whatever the escaping."""
    text = json.dumps({"pad": [1, {"x": None}], "key": found}, ensure_ascii=ascii_only, indent=spaces or None)
    want = found.encode("utf-8") if isinstance(found, str) else json.dumps(found).encode()
    assert extract(None, text.encode("utf-8"), "field:key") == KeyResult(want)


def test_number_tokens_keep_their_spelling() -> None:
    for token in ("1.50", "1e3", "1E+05", "-0", "0.1000", "12345678901234567890123"):
        assert extract_key(None, b'{"key": ' + token.encode() + b"}", "field:key") == token.encode()
    assert extract_key(None, b'{"key": 1.50}', "field:key") != extract_key(None, b'{"key": 1.5}', "field:key")


def test_a_limit_does_not_hide_a_grammar_error_found_later() -> None:
    deep = b"[" * 101 + b"]" * 101
    assert extract(None, b'{"key": "k", "x": ' + deep + b"}", "field:key").code == "TOO_DEEP"
    assert extract(None, b'{"key": "k", "x": ' + deep + b"}}", "field:key").code == "NOT_JSON"
    long = b"9" * 1001
    assert extract(None, b'{"key": "k", "n": ' + long + b"}", "field:key").code == "NUMBER_TOO_LONG"
    assert extract(None, b'{"key": "k", "n": ' + long + b", }", "field:key").code == "NOT_JSON"


def test_the_grammar_check_without_recursion_agrees_with_json() -> None:
    """_grammar_error reads values json's recursive parser cannot; on shallow ones it must agree with json."""
    docs = ['{"a": [1, 2.5e-3, "x\\n", true, false, null, {}], "b": {"c": []}}', "[]", " 1 ", '"s"', "[1,]", "[1 2]",
            '{"a" 1}', '{"a": 1,}', "{,}", "nul", "tru", "01", "1.", "-", "[", "{", '{"a": "\\x"}', '["\t"]', "NaN",
            "[Infinity]", "-Infinity", "1 2", "{}x", '{"a":1}}', "[1]]", "", " ", '{"\\ud800": 1}', '{"\\ud83d\\ude00": 1}',
            '["\\ud800"]', "[-0.0e+0]", '{"a":{"b":{"c":[[[{"d":1}]]]}}}', '{"a":{"b":{"c":[[[{"d":1}]]}}}']
    for doc in docs:
        want = extract(None, doc.encode(), "jsonpath:$[0]").code == "NOT_JSON"
        assert (keyrules._grammar_error(doc) is not None) == want, doc


def test_a_value_too_deep_for_json_itself_is_read_without_recursion() -> None:
    for depth in (5_000, 200_000):
        deep = b"[" * depth + b"]" * depth
        assert extract(None, b'{"key": "k", "x": ' + deep + b"}", "field:key").code == "TOO_DEEP"
        assert extract(None, b'{"key": "k", "x": ' + deep + b"]}", "field:key").code == "NOT_JSON"


def test_an_exhausted_python_stack_is_an_error_not_a_wrong_code() -> None:
    shallow = b'{"key": "k", "x": ' + b"[" * 90 + b"]" * 90 + b"}"

    def at_depth(n: int) -> KeyResult:
        return at_depth(n - 1) if n else extract(None, shallow, "field:key")

    frames, frame = 0, sys._getframe()
    while frame is not None:
        frames, frame = frames + 1, frame.f_back
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(frames + 150)  # room for at_depth(100), not for json's 91 levels on top
    try:
        with pytest.raises(RuntimeError, match="shallower stack"):
            at_depth(100)
    finally:
        sys.setrecursionlimit(limit)
    assert extract(None, shallow, "field:key") == KeyResult(b"k")


def test_details_name_the_rule_and_the_number() -> None:
    assert extract(None, b'{"a": 1}', "jsonpath:$.a.b").detail == "no field 'b' on the path of jsonpath:$.a.b"
    assert extract(None, b"[]", "jsonpath:$[3]").detail == "no element [3] on the path of jsonpath:$[3]"
    assert re.search(r"byte 9 \(0xff\)", extract(None, b'{"key": "\xff"}', "field:key").detail)
    assert extract(b"k", None, "record_key") == KeyResult(b"k")
    assert extract(None, None, "record_key") == KeyResult(None, "NO_KEY", "the record has no key")
