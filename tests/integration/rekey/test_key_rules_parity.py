"""The JVM key extractor (``io.kafkaops.spark.JsonKey`` in jvm/spark-udf, what both backfill copies run)
against the Python reference the gate recomputes (``kafkaops.rekey.backfill.extract_key_or_reason``): the same key bytes and the
same reason for every value, over a hand-written corpus of the corners of Python's ``json.loads(bytes)``
(encodings, UTF-8 strictness, grammar, numbers, duplicates, paths, nesting), over generated and
byte-mutated documents, and ``pythonFloatRepr`` against ``json.dumps(float)`` on 100k doubles. Only the
text after ``the value is not JSON: `` may differ. Needs the jars of ``make setup``, not a cluster; one
SparkSession (its py4j gateway) per module, values go over in batches."""
from __future__ import annotations

import codecs
import json
import math
import random
import re
import struct
import subprocess
import sys
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkaops.rekey.backfill import KeyRule, extract_key_or_reason

pytestmark = pytest.mark.integration

NOT_JSON = "the value is not JSON: "
LONE = "the key field is not valid Unicode (it holds a lone surrogate)"
TOO_DEEP = NOT_JSON + "nested too deeply"
#: JsonKey.MAX_DEPTH: json.loads in a plain top-level call raises RecursionError from 996 deep
MAX_DEPTH = 995

Outcome = tuple[bytes | None, str | None]


class JvmClass:
    """A py4j JavaClass behind a plain object: the JavaClass answers every attribute lookup (with a
    Py4JError for unknown ones), which trips Hypothesis' look at the test's arguments."""

    def __init__(self, cls: object) -> None:
        self._cls = cls

    METHODS = frozenset({"of", "extractForPython", "extractManyForPython", "pythonFloatReprs", "pythonFloatReprsOfTexts"})

    def __getattr__(self, name: str) -> object:
        if name not in self.METHODS:
            raise AttributeError(name)
        return getattr(self._cls, name)


@pytest.fixture(scope="module")
def jk(spark):
    """The JsonKey class through the py4j gateway of the module's local SparkSession."""
    from py4j.java_gateway import JavaClass

    cls = spark.sparkContext._jvm.io.kafkaops.spark.JsonKey
    if not isinstance(cls, JavaClass):
        pytest.fail("io.kafkaops.spark.JsonKey is not in .cache/jars/spark/kafkaops-spark-udf.jar: run 'make setup'")
    return JvmClass(cls)


def java_outcomes(jk, rule: KeyRule, values: Sequence[bytes | None]) -> list[Outcome]:
    """JsonKey.extract of each value, in one py4j call."""
    packed = b"".join(struct.pack(">i", -1) if v is None else struct.pack(">i", len(v)) + v for v in values)
    out = bytes(jk.extractManyForPython(packed, list(rule.steps), rule.text))
    results: list[Outcome] = []
    pos = 0

    def chunk() -> bytes | None:
        nonlocal pos
        (n,) = struct.unpack_from(">i", out, pos)
        pos += 4
        if n < 0:
            return None
        pos += n
        return out[pos - n:pos]

    for _ in values:
        key = chunk()
        reason = chunk()
        results.append((key, None if reason is None else reason.decode("utf-8")))
    assert pos == len(out)
    return results


def agree(python: Outcome, java: Outcome) -> bool:
    if python[1] is not None and python[1].startswith(NOT_JSON):
        return java[0] is None and java[1] is not None and java[1].startswith(NOT_JSON) and len(java[1]) <= 300
    return python == java


def assert_parity(jk, rule: KeyRule | str, values: Sequence[bytes | None]) -> list[Outcome]:
    """Java and Python agree on every value; returns Python's outcomes."""
    rule = rule if isinstance(rule, KeyRule) else KeyRule(rule)
    java = java_outcomes(jk, rule, values)
    python = [extract_key_or_reason(None, v, rule) for v in values]
    bad = [(v, p, j) for v, p, j in zip(values, python, java) if not agree(p, j)]
    assert not bad, (f"{len(bad)} of {len(values)} values differ under {rule.text!r}, e.g.\n"
                     + "\n".join(f"  {v!r}\n    python {p!r}\n    java   {j!r}" for v, p, j in bad[:8]))
    return python


# -- the hand-written corpus -----------------------------------------------------------------------------

def u(text: str, encoding: str = "utf-8") -> bytes:
    return text.encode(encoding, "surrogatepass")


def key_doc(token: str | bytes) -> bytes:
    """``{"key": <token>}`` with the token as given (raw bytes allowed)."""
    token = token.encode("utf-8", "surrogatepass") if isinstance(token, str) else token
    return b'{"id": 7, "key": ' + token + b', "pad": "abc"}'


GRAMMAR = [
    b'{"key": "k1"}', b' \t\r\n{"key":"k1"}\n\r\t ', b'{"key":"k1"} x', b'{"key":"k1"}{}', b'{"key":"k1"},',
    b'{"key":"k1"}]', b'{"key": "k1", "x": [1, 2,]}', b'{"key": "k1",}', b'{"key": "k1" "x": 1}', b'{,"key":1}',
    b'{"key" 1}', b'{"key"::1}', b'{"key": 1,, "a": 2}', b'[1 2]', b'[,1]', b'[1,,2]', b'', b' ', b'\n', b'\t\r',
    b'{"key": "k1", "x": tru}', b'nul', b'nulll', b'truefalse', b'{"key": true1}', b'{"key": nullx}',
    b"{'key': 'k'}", b'{key: "k"}', b'{"key": "k" /* c */}', b'// c\n{"key":1}', b'# c\n{"key":1}',
    b'{"key": "k"', b'{"key": "k', b'{"key"', b'{"key":', b'{', b'[', b'"', b'{"key": "k"}}', b'[]]', b'{]', b'[}',
    b'"just a string"', b'42', b'null', b'true', b'[]', b'{}', b'[{"key": 1}]', b'{"KEY": 1}', b'{"key ": 1}',
    b'{"key":"k"}\x00', b'\x00{"key":"k"}', b'{"key":"k"}\x7f', b'{"key":"k"}\xc2\xa0', b'\xc2\xa0{"key":"k"}',
    b'{"key":"k"}\x0b', b'\x0c{"key":"k"}', b'{"key":"k"}\x1e', b'\xe2\x80\xa8{"key":"k"}', b'{"key"\x00:1}',
    b'\xef\xbb\xbf{"key":"k"}', b'\xef\xbb\xbf\xef\xbb\xbf{"key":"k"}', b'\xef\xbb\xbf', b'\xef\xbb\xbf ',
    b'{"key":"k"}\xef\xbb\xbf', b'{"key":"\xef\xbb\xbf"}', b'\xef\xbb', b'1', b'1\x00\x00', b'\x00\x001',
    b'\x00', b'\x001', b'1\x00', b'{"key":1}\n\n\n', b'{"key":1}\n\n\nx',
]

STRINGS = [
    '"plain"', '""', '"a\\"b"', '"a\\\\b"', '"a\\/b"', '"\\b\\f\\n\\r\\t"', '"\\u0041\\u00e9\\u20AC"', '"\\u0000"',
    '"a\\ab"', '"\\x41"', '"\\u12"', '"\\u12G4"', '"\\U0041"', '"\\"', '"\\', '"a\\ "', '"\\\'"',
    '"\\ud83d\\ude00"', '"\\uD83D\\uDE00"', '"\\ud800"', '"\\udc00"', '"\\ud83d\\u0041"', '"\\udc00\\ud800"',
    '"\\ud83d\\ud83d\\ude00"', '"\\ude00\\ud83d"', '"x\\ud83d"', '"\\ud83dx\\ude00"', '"\\ud83d\\n"',
    '"é€😀"', '"\U0010ffff"', '"\uffff\ufffe"', '"\x7f"', '"\u2028\u2029"', '"\ufeff"', '"\ue000"',
]

RAW_STRINGS = [
    b'"a\tb"', b'"a\nb"', b'"a\rb"', b'"a\x00"', b'"a\x1f"', b'"a\x7f"', b'"\xc3\xa9"', b'"\xe2\x82\xac"',
    b'"\xf0\x9f\x98\x80"', b'"\xf4\x8f\xbf\xbf"', b'"\xef\xbf\xbf"', b'"\xed\x9f\xbf"', b'"\xee\x80\x80"',
    b'"\xc0\x80"', b'"\xc1\xbf"', b'"\xe0\x80\x80"', b'"\xe0\x9f\xbf"', b'"\xf0\x80\x80\x80"', b'"\xf0\x8f\xbf\xbf"',
    b'"\xf4\x90\x80\x80"', b'"\xf5\x80\x80\x80"', b'"\xf8\x88\x80\x80\x80"', b'"\xff"', b'"\xfe"', b'"\x80"',
    b'"\xbf"', b'"\xc3"', b'"\xe2\x82"', b'"\xf0\x9f\x98"', b'"\xc3\x28"', b'"\xe2\x28\xa1"', b'"\xe2\x82\x28"',
    b'"\xf0\x28\x8c\xbc"', b'"\xed\xa0\x80"', b'"\xed\xbf\xbf"', b'"\xed\xa0\xbd\xed\xb8\x80"', b'"\xed\xa0"',
    b'"\xed\xa0\x41"', b'"\\ud83d\xed\xb8\x80"', b'"\xed\xa0\xbd\\ude00"', b'"a\xed\xa0\x80b"',
]

NUMBERS = [
    "0", "-0", "7", "-7", "123456789012345678901234567890", "-123456789012345678901234567890",
    "9" * 4300, "-" + "9" * 4300, "9" * 4301, "-" + "9" * 4301, "1" + "0" * 4299, "1" + "0" * 4300,
    "01", "-01", "00", "+1", ".5", "-.5", "1.", "1.e5", "1e", "1e+", "1E-", "-", "--1", "0x10", "1_000", "1 000",
    "1e16", "1e15", "1e-5", "1e-4", "0.1", "5e-324", "4.9e-324", "2e-324", "1e-400", "-1e-400",
    "1.7976931348623157e308", "1.7976931348623159e308", "1e400", "-1e400", "-0.0", "0.0", "0e0", "-0e-0",
    "1E5", "1e+05", "1E-005", "2.5E+10", "0.30000000000000004", "100.0", "1e22", "1e23", "9007199254740993",
    "9007199254740993.0", "123456789012345680000", "1." + "0" * 5000, "0." + "0" * 400 + "1", "1" * 400 + ".5",
    "1e" + "9" * 30, "1e-" + "9" * 30, "1e" + "0" * 30 + "5",
    "NaN", "Infinity", "-Infinity", "nan", "NAN", "inf", "INF", "-INF", "+INF", "Inf", "infinity",
    "+Infinity", "-NaN", "+NaN", "NaNa", "Infinityy", "-Infinityx", "- Infinity", "Infinit", "-", "true", "false",
    "null", "True", "None", "{}", "[]", '{"a": 1}', "[1, 2]", "[[]]",
]


def test_grammar_whitespace_and_trailing_data(jk) -> None:
    got = dict(zip(GRAMMAR, assert_parity(jk, "field:key", GRAMMAR)))
    assert got[b'{"key": "k1"}'] == got[b' \t\r\n{"key":"k1"}\n\r\t '] == (b"k1", None)
    assert got[b'\xef\xbb\xbf{"key":"k"}'] == (b"k", None) and got[b'{"key":1}\n\n\n'] == (b"1", None)
    assert got[b"{}"] == (None, "no field 'key' on the path of field:key")
    for bad in (b'{"key":"k1"} x', b'\xef\xbb\xbf\xef\xbb\xbf{"key":"k"}', b"", b'{"key":"k"}\x00', b'// c\n{"key":1}',
                b'{"key": "k1", "x": [1, 2,]}', b"\x00\x001"):
        assert got[bad][1].startswith(NOT_JSON)


def test_strings_escapes_and_utf8(jk) -> None:
    docs = [key_doc(s) for s in STRINGS] + [key_doc(s) for s in RAW_STRINGS]
    # the same strings elsewhere than the key: only whether the value is JSON matters
    docs += [b'{"key": "k", "other": ' + u(s) + b"}" for s in STRINGS]
    docs += [b'{"key": "k", "other": ' + s + b"}" for s in RAW_STRINGS]
    docs += [b'{"other": ' + s + b', "key": "k"}' for s in RAW_STRINGS]
    # as member names
    docs += [b"{" + s + b': 1, "key": "k"}' for s in RAW_STRINGS] + [b"{" + u(s) + b': 1, "key": 2}' for s in STRINGS]
    # invalid UTF-8 outside strings, and after the key
    docs += [b'{"key": "k"}' + bad for bad in (b"\xff", b"\xc3", b"\xed\xa0\x80", b" \xe2\x82\xac")]
    docs += [b'{"key": "k", ' + bad + b'"a": 1}' for bad in (b"\xff", b"\xc3\xa9", b"\xed\xa0\x80")]
    outcomes = assert_parity(jk, "field:key", docs)
    by_doc = dict(zip(docs, outcomes))
    assert by_doc[key_doc('"\\ud83d\\ude00"')] == ("😀".encode(), None)
    assert by_doc[key_doc('"\\u0000"')] == (b"\x00", None)
    for lone in ('"\\ud800"', '"\\udc00"', '"\\ud83d\\u0041"', '"\\ud83d\\ud83d\\ude00"'):
        assert by_doc[key_doc(lone)] == (None, LONE)
    for lone in (b'"\xed\xa0\x80"', b'"\xed\xa0\xbd\xed\xb8\x80"', b'"\\ud83d\xed\xb8\x80"', b'"\xed\xa0\xbd\\ude00"'):
        assert by_doc[key_doc(lone)] == (None, LONE)
    assert by_doc[key_doc(b'"\xf4\x8f\xbf\xbf"')] == ("\U0010ffff".encode(), None)
    assert by_doc[key_doc(b'"\xc0\x80"')][1].startswith(NOT_JSON)
    assert by_doc[b'{"key": "k", "other": "\xed\xa0\x80"}'] == (b"k", None)


def test_names_compare_as_python_strings(jk) -> None:
    """Duplicates and spellings of a name: escapes are decoded, escaped pairs joined, UTF-8-encoded
    surrogates never joined (so they spell another name)."""
    docs = [
        '{"😀": 1}'.encode(), b'{"\\ud83d\\ude00": 2}', b'{"\\uD83D\\uDE00": 3}', b'{"\xed\xa0\xbd\xed\xb8\x80": 4}',
        b'{"\\ud83d\xed\xb8\x80": 5}', b'{"\xed\xa0\xbd\\ude00": 6}', b'{"\\ud83d": 7}',
        '{"😀": 1, "\\ud83d\\ude00": 2}'.encode(), b'{"\\ud83d\\ude00": 1, "\xed\xa0\xbd\xed\xb8\x80": 2}',
        b'{"\xf0\x9f\x98\x80": "a", "\xed\xa0\xbd\xed\xb8\x80": 2}',
        '{"😀": "k"}'.encode("utf-16"), '{"\ud83d\ude00": "k"}'.encode("utf-32-le", "surrogatepass"),
        '{"\ud83d\ude00": "k"}'.encode("utf-16-be", "surrogatepass"),
    ]
    outcomes = assert_parity(jk, "jsonpath:$['😀']", docs)
    assert [o[0] for o in outcomes[:7]] == [b"1", b"2", b"3", None, None, None, None]
    assert outcomes[7] == (b"2", None) and outcomes[8] == (b"1", None)
    assert outcomes[10] == (b"k", None) and outcomes[11] == (None, "no field '😀' on the path of jsonpath:$['😀']")
    names = [b'{"key": 1}', b'{"k\\u0065y": 2}', b'{"\\u006b\\u0065\\u0079": 3}', b'{"ke\\y": 4}', b'{"key\\u0000": 5}',
             b'{"\\"key\\"": 6}', b'{"KEY": 7}', b'{"key": 1, "k\\u0065y": 8}', b'{"k\\u0065y": 1, "key": 9}']
    outcomes = assert_parity(jk, "field:key", names)
    assert [o[0] for o in outcomes] == [b"1", b"2", b"3", None, None, None, None, b"8", b"9"]


def test_encodings_by_bom_and_zero_bytes(jk) -> None:
    doc = '{"key": "k😀é", "x": [1, "\\ud800"]}'
    docs = []
    for enc in ("utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"):
        docs.append(u(doc, enc))
        docs.append(u(" " + doc, enc))
        docs.append(u(doc, enc)[:-1])  # truncated: an odd UTF-16/32 length, or a cut character
        docs.append(u('{"key": "\ud83d"}', enc))  # a raw lone surrogate (passed through by surrogatepass)
        docs.append(u('{"key": "\ud83d\\ude00"}', enc))  # raw lone high + escaped low: never joined
        docs.append(u('{"key": "\ud83d\ude00"}', enc))  # two raw surrogates: joined by UTF-16 only
        docs.append(u('{"key": "k", "\udc00": 1}', enc))
        docs.append(u("\ufeff" + doc, enc))  # a second BOM (or the first one for -le/-be): not JSON
        docs.append(u('"k"', enc))
        docs.append(u("[]", enc))
        docs.append(u("1", enc))
    docs += [codecs.BOM_UTF16_BE + u(doc, "utf-16-be"), codecs.BOM_UTF32_BE + u(doc, "utf-32-be"),
             codecs.BOM_UTF16_LE + codecs.BOM_UTF16_LE + u(doc, "utf-16-le"),
             codecs.BOM_UTF32_LE + b'{\x00\x00\x00"\x00\x00\x00k\x00\x00\x00"\x00\x00\x00:\x00\x00\x00'
             + b"\x00\x00\x11\x00}\x00\x00\x00",  # a UTF-32 code unit above U+10FFFF
             b"\xff\xfe", b"\xfe\xff", b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff", b"\xff\xfe{", b"\xfe\xff\x00",
             b"1\x00", b"\x001", b"\x00\x00\x001", b"1\x00\x00\x00", b"\x00{\x00}", b"{\x00}\x00", b"{\x00\x00\x00}",
             b"\xff\xfe\x3d\xd8", b'\xff\xfe"\x00=\xd8"\x00', b'\xff\xfe"\x00\x00\xdc"\x00']
    outcomes = assert_parity(jk, "field:key", docs)
    assert outcomes[0] == outcomes[11 * 1] == outcomes[11 * 2] == outcomes[11 * 7] == ("k😀é".encode(), None)
    assert outcomes[11 * 2 + 5] == ("😀".encode(), None)  # utf-16: the raw pair is one code point
    assert outcomes[11 * 5 + 5] == (None, LONE)  # utf-32: two surrogate code units stay two code points


def test_number_keys_and_number_limits(jk) -> None:
    docs = [key_doc(t) for t in NUMBERS] + [b'{"key": "k", "n": ' + t.encode() + b"}" for t in NUMBERS]
    docs += [b'{"key": "k", "n": [' + t.encode() + b"]}" for t in NUMBERS]
    docs += [t.encode() for t in NUMBERS]  # as the whole value
    outcomes = assert_parity(jk, "field:key", docs)
    got = dict(zip(NUMBERS, outcomes))
    assert got["-0"] == (b"0", None) and got["-0.0"] == (b"-0.0", None) and got["1e400"] == (b"Infinity", None)
    assert got["1e16"] == (b"1e+16", None) and got["1e15"] == (b"1000000000000000.0", None)
    assert got["1e-5"] == (b"1e-05", None) and got["1e-4"] == (b"0.0001", None) and got["1E5"] == (b"100000.0", None)
    assert got["5e-324"] == (b"5e-324", None) and got["1.7976931348623157e308"] == (b"1.7976931348623157e+308", None)
    assert got["9" * 4300] == (b"9" * 4300, None) and got["-" + "9" * 4300] == (b"-" + b"9" * 4300, None)
    for bad in ("9" * 4301, "-" + "9" * 4301, "INF", "+Infinity", "-NaN", "01", "+1", ".5", "1."):
        assert got[bad][1].startswith(NOT_JSON)
    assert got["NaN"] == (b"NaN", None) and got["-Infinity"] == (b"-Infinity", None)


def test_key_types(jk) -> None:
    docs = [key_doc(t) for t in ("null", "true", "false", "{}", '{"a": 1}', "[]", "[1]", '"s"', "1", "1.5")]
    assert [o[1] or o[0] for o in assert_parity(jk, "field:key", docs)] == [
        "the key field is null", b"true", b"false", "the key field is a JSON dict, not a string or number",
        "the key field is a JSON dict, not a string or number", "the key field is a JSON list, not a string or number",
        "the key field is a JSON list, not a string or number", b"s", b"1", b"1.5"]
    assert java_outcomes(jk, KeyRule("field:key"), [None]) == [(None, "the record has no value (a tombstone)")]


DUPLICATES = {
    "field:key": [b'{"key":"a","key":"b"}', b'{"key":{"x":1},"key":"b"}', b'{"key":"a","key":null}',
                  b'{"key":"a","key":[1]}', b'{"key":[1],"key":{},"key":7}', b'{"key":"a","x":{"key":"b"}}',
                  b'{"x":{"key":"b"}}', b'{"key":"a","key":"b","key":"\\ud800"}', b'{"key":"\\ud800","key":"ok"}',
                  b'{"key":"a","key":"b"} 1'],
    "jsonpath:$.a.b": [b'{"a":{"b":1},"a":{"c":2}}', b'{"a":{"c":2},"a":{"b":1}}', b'{"a":{"b":1,"b":2}}',
                       b'{"a":{"b":1},"a":5}', b'{"a":5,"a":{"b":"x"}}', b'{"a":{"b":1},"z":{"a":{"b":9}}}',
                       b'{"a":[{"b":1}]}', b'{"x":{"a":{"b":1}}}', b'{"a":{"a":{"b":1}}}', b'{"a":{"b":{"b":1}}}',
                       b'{"a":{"b":1},"a":{"b":{"c":1}}}', b'{"a":{"b":[1]},"a":{"b":2}}', b'{"a":{"x":{"b":1}}}',
                       b'{"a":null}', b'{"a":{"b":null}}', b'{"a":{"b":1,"c":{"b":2}}}', b'{"b":1,"a":{"c":{"b":3}}}'],
    "jsonpath:$.a[1]": [b'{"a":[0,1,2]}', b'{"a":[0]}', b'{"a":[]}', b'{"a":{"1":5}}', b'{"a":[[1],[2]]}',
                        b'{"a":[0,1],"a":[5]}', b'{"a":[5],"a":[0,"x"]}', b'{"a":"01"}', b'[0,1]'],
    "jsonpath:$[0]": [b"[1,2,3]", b"[]", b'{"0":1}', b'[[1]]', b'[{"a":1}]', b'"abc"', b"[null]", b"[[],1]"],
    "jsonpath:$[2][0]": [b"[[1],[2],[[3]]]", b"[0,1,[]]", b"[0,1,[7,8]]", b"[0,1,{}]", b"[0,1]", b"[0,1,[[],[]],[9]]"],
    "jsonpath:$[2][0][0]": [b"[[1],[2],[[3]]]", b"[0,1,[[4,5]]]"],
    "jsonpath:$[4294967296]": [b"[1,2]", b"{}"],
    "jsonpath:$.a[1].b": [b'{"a":[{"b":1},{"b":2}]}', b'{"a":[{"b":1},{"c":2}]}', b'{"a":[{"b":1}]}',
                          b'{"a":[1,{"b":2,"b":3}]}', b'{"a":[1,[{"b":2}]]}'],
    "jsonpath:$['it\\'s']['say \"hi\"']": [b'{"it\'s":{"say \\"hi\\"":1}}', b'{"it\'s":{}}', b"{}"],
    "jsonpath:$[\"a.b\"][\"\"]": [b'{"a.b":{"":"empty"}}', b'{"a":{"b":{"":1}}}', b'{"a.b":{}}'],
}


@pytest.mark.parametrize("rule", list(DUPLICATES))
def test_duplicates_last_wins_and_paths(jk, rule: str) -> None:
    outcomes = assert_parity(jk, rule, DUPLICATES[rule])
    if rule == "field:key":
        assert [o[1] or o[0] for o in outcomes[:4]] == [b"b", b"b", "the key field is null",
                                                         "the key field is a JSON list, not a string or number"]
        assert outcomes[7] == (None, LONE) and outcomes[8] == (b"ok", None)
    if rule == "jsonpath:$.a.b":
        assert outcomes[0] == (None, "no field 'b' on the path of jsonpath:$.a.b") and outcomes[1] == (b"1", None)


REPR_NAMES = ["it's", 'say "hi"', "it's \"both\"", "back\\slash", "tab\there", "nl\nx", "\x01", "\x7f", "\x80", "\xa0",
              "\xad", "é", "\u200b", "\u2028", "\u3000", "\ue000", "😀", "\U000e0001", "\U0010ffff", "\ufffe", " ",
              "x y", "a'b\"c\\d", "ÿ", "\u0378"]


def test_reasons_quote_names_as_python_repr(jk) -> None:
    for name in REPR_NAMES:
        for rule in ("field:" + name, "jsonpath:$['" + re.sub(r"(['\\])", r"\\\1", name) + "']"):
            outcomes = assert_parity(jk, rule, [b"{}", b"[]", b'{"x": 1}', json.dumps({name: "v"}).encode()])
            assert outcomes[0][1] == f"no field {name!r} on the path of {rule}"
            assert outcomes[3] == (b"v", None)


def test_nesting_far_from_pythons_limit(jk) -> None:
    """Python's limit moves with its own stack depth, so compare well below and well above it."""
    docs = []
    for depth in (10, 200, 800, 1200, 5000):
        docs.append(b'{"key": "k", "x": ' + b"[" * depth + b"]" * depth + b"}")
        docs.append(b'{"key": "k", "x": ' + b'{"a":' * depth + b"1" + b"}" * depth + b"}")
        docs.append(b'{"key": "k", "x": ' + b"[" * depth + b"}")  # unclosed
    docs.append(b"[" * 100_000)
    outcomes = assert_parity(jk, "field:key", docs)
    assert outcomes[0] == outcomes[6] == (b"k", None)
    assert outcomes[9] == outcomes[10] == outcomes[12] == outcomes[13] == (None, TOO_DEEP)
    path = "jsonpath:$" + "[0]" * 700
    doc = b"[" * 700 + b'"deep"' + b"]" * 700
    assert assert_parity(jk, path, [doc, doc[:-1]])[0] == (b"deep", None)


def test_java_depth_limit_is_where_a_plain_json_loads_stops() -> None:
    """MAX_DEPTH documents CPython's plain-call limit: check it in a fresh interpreter."""
    code = ("import json\n"
            f"for d in ({MAX_DEPTH}, {MAX_DEPTH + 1}):\n"
            "    try:\n        json.loads('[' * d + ']' * d); print(d, 'ok')\n"
            "    except RecursionError:\n        print(d, 'deep')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [str(MAX_DEPTH), "ok", str(MAX_DEPTH + 1), "deep"]


def test_java_depth_limit(jk) -> None:
    def doc(depth: int) -> bytes:
        return b'{"key": "k", "x": ' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"

    assert java_outcomes(jk, KeyRule("field:key"), [doc(MAX_DEPTH), doc(MAX_DEPTH + 1)]) == [(b"k", None),
                                                                                          (None, TOO_DEEP)]


def test_long_strings_and_names(jk) -> None:
    long_name = "n" * 70_000
    docs = [b'{"key": "' + b"k" * 300_000 + b'"}', b'{"' + long_name.encode() + b'": 1, "key": "' + "é".encode() * 50_000
            + b'"}', b'{"key": "' + b"\\u00e9" * 20_000 + b'"}', b'{"key": "' + b"x" * 100_000 + b"\xff" + b'"}',
            b'{"key": "k", "pad": "' + b"a" * 100_000 + b'"']
    assert_parity(jk, "field:key", docs)
    assert_parity(jk, "field:" + long_name, docs[1:2])


def test_py4j_entry_points(jk) -> None:
    from py4j.java_gateway import get_field

    got = jk.extractForPython(b'{"a": [1, {"b": "x"}]}', ["a", 1, "b"], "jsonpath:$.a[1].b")
    assert bytes(got[0]) == b"x" and got[1] is None
    got = jk.extractForPython(b"{}", ["key"], "field:key")
    assert got[0] is None and got[1] == "no field 'key' on the path of field:key"
    result = jk.of(["key"], "field:key").extract(b'{"key": 1.0}')
    assert bytes(get_field(result, "key")) == b"1.0" and get_field(result, "reason") is None


# -- generated documents ---------------------------------------------------------------------------------

WS = " \t\n\r"
NAMES = ["key", "a", "b", "id", "kéy", "😀", "it's", 'say "hi"', "back\\slash", "x y", "0", "", "\u200b", "\x7f"]
INTERESTING = b'"\\{}[],:0-+.eE \t\n\x00\x1f\x7f\x80\xbf\xc0\xc2\xe0\xed\xef\xf0\xf4\xf5\xffNIaxtfnu'
ALPHABET = (["a", "z", "0", " ", "/", '"', "\\", "\x00", "\x1f", "\x7f", "é", "ÿ", "€", "\u2028", "\ufeff", "\uffff",
             "😀", "\U0010ffff", "\ud800", "\udbff", "\udc00", "\udfff", "\ud83d", "\ude00"] + NAMES)
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
ENCODINGS = ["utf-8"] * 12 + ["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be",
                              "bom-utf-16-be", "bom-utf-32-be"]


class Obj:
    """A JSON object as its members in order, duplicates allowed."""

    def __init__(self, pairs: list[tuple[str, object]]) -> None:
        self.pairs = pairs


class Num:
    """A number token written as is."""

    def __init__(self, text: str) -> None:
        self.text = text


def gen_text(rnd: random.Random) -> str:
    return "".join(rnd.choice(ALPHABET) for _ in range(rnd.choice((0, 1, 2, 3, 5, 8))))


def gen_number(rnd: random.Random) -> Num:
    text = rnd.choice(("", "-")) + rnd.choice(("0", str(rnd.randrange(1, 10)) + "".join(
        rnd.choice("0123456789") for _ in range(rnd.choice((0, 1, 3, 15, 17, 25))))))
    if rnd.random() < 0.5:
        text += "." + "".join(rnd.choice("0123456789") for _ in range(rnd.choice((1, 2, 5, 17, 30))))
    if rnd.random() < 0.5:
        text += rnd.choice("eE") + rnd.choice(("", "+", "-")) + str(rnd.choice((0, 1, 5, 16, 22, 300, 308, 309, 324,
                                                                                 330, 400, 9999))).zfill(rnd.choice((1, 3)))
    return Num(text)


def gen_scalar(rnd: random.Random) -> object:
    kind = rnd.randrange(9)
    if kind == 0:
        return rnd.choice((None, True, False))
    if kind == 1:
        return rnd.choice((0, 1, -1, 2**53 + 1, -(2**63), 10**30, rnd.randrange(-10**6, 10**6)))
    if kind == 2:
        return rnd.choice((0.0, -0.0, 0.1, 1e16, 1e-5, 1e-4, 5e-324, 1.7976931348623157e308, math.inf, -math.inf,
                           math.nan, rnd.uniform(-1e6, 1e6), struct.unpack(">d", rnd.getrandbits(64).to_bytes(8, "big"))[0]))
    if kind == 3:
        return gen_number(rnd)
    return gen_text(rnd)


def gen_value(rnd: random.Random, depth: int = 0) -> object:
    r = rnd.random()
    if depth >= 4 or r < 0.55:
        return gen_scalar(rnd)
    if r < 0.75:
        return [gen_value(rnd, depth + 1) for _ in range(rnd.randrange(4))]
    return Obj([(rnd.choice(NAMES) if rnd.random() < 0.6 else gen_text(rnd), gen_value(rnd, depth + 1))
                for _ in range(rnd.randrange(4))])


def plant(rnd: random.Random, steps: Sequence[str | int], leaf: object) -> object:
    """A value that has ``leaf`` at ``steps`` (often), with noise, duplicates and wrong turns around it."""
    value = leaf
    for step in reversed(steps):
        if rnd.random() < 0.08:
            value = gen_value(rnd, 2)  # a wrong turn: whatever is here instead
        if isinstance(step, int):
            value = [gen_value(rnd, 3) for _ in range(step)] + [value] + [gen_value(rnd, 3) for _ in range(rnd.randrange(3))]
            if rnd.random() < 0.1:
                value = value[:step]  # too short
        else:
            pairs = [(rnd.choice(NAMES), gen_value(rnd, 3)) for _ in range(rnd.randrange(4))]
            pairs.insert(rnd.randrange(len(pairs) + 1), (step, value))
            if rnd.random() < 0.3:  # a duplicate, before or after
                pairs.insert(rnd.randrange(len(pairs) + 1), (step, rnd.choice((gen_value(rnd, 3), value))))
            value = Obj(pairs)
    return value


def str_token(rnd: random.Random, text: str) -> str:
    short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "/": "\\/"}
    out = ['"']
    for ch in text:
        cp = ord(ch)
        if ch in '"\\' or cp < 0x20 or rnd.random() < 0.15:
            if ch in short and rnd.random() < 0.6:
                out.append(short[ch])
            elif cp > 0xFFFF:
                hi, lo = 0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF)
                out.append(rnd.choice(("\\u%04x\\u%04x", "\\u%04X\\u%04X")) % (hi, lo))
            else:
                out.append(rnd.choice(("\\u%04x", "\\u%04X")) % cp)
        else:
            out.append(ch)  # a lone surrogate stays a raw code point: UTF-8-encoded by surrogatepass
    out.append('"')
    return "".join(out)


def dump(rnd: random.Random, value: object) -> str:
    def ws() -> str:
        return "".join(rnd.choice(WS) for _ in range(rnd.choice((0, 0, 0, 1, 2))))

    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        return "-0" if value == 0 and rnd.random() < 0.2 else str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return json.dumps(value)
        return rnd.choice((repr(value), f"{value:e}", f"{value:E}", f"{value:.17g}", f"{value:.3e}"))
    if isinstance(value, Num):
        return value.text
    if isinstance(value, str):
        return str_token(rnd, value)
    if isinstance(value, list):
        return "[" + ws() + ",".join(ws() + dump(rnd, v) + ws() for v in value) + ws() + "]"
    assert isinstance(value, Obj)
    return "{" + ws() + ",".join(ws() + str_token(rnd, k) + ws() + ":" + ws() + dump(rnd, v) + ws()
                                 for k, v in value.pairs) + ws() + "}"


def encode(rnd: random.Random, text: str) -> bytes:
    encoding = rnd.choice(ENCODINGS)
    if encoding == "bom-utf-16-be":
        return codecs.BOM_UTF16_BE + text.encode("utf-16-be", "surrogatepass")
    if encoding == "bom-utf-32-be":
        return codecs.BOM_UTF32_BE + text.encode("utf-32-be", "surrogatepass")
    return text.encode(encoding, "surrogatepass")


def mutate(rnd: random.Random, data: bytes) -> bytes:
    d = bytearray(data)
    for _ in range(rnd.choice((1, 1, 2))):
        op = rnd.randrange(4)
        at = rnd.randrange(len(d) + 1)
        if op == 0:
            del d[at:]
        elif op == 1:
            d[at:at] = bytes([rnd.choice(INTERESTING)])
        elif op == 2 and at < len(d):
            del d[at]
        elif at < len(d):
            d[at] = rnd.choice(INTERESTING)
    return bytes(d)


def gen_rule(rnd: random.Random) -> KeyRule:
    steps: list[str | int] = [rnd.choice(NAMES) if rnd.random() < 0.75 else rnd.randrange(3)
                              for _ in range(rnd.choice((1, 1, 1, 2, 3)))]
    if len(steps) == 1 and isinstance(steps[0], str) and steps[0] and rnd.random() < 0.5:
        text = "field:" + steps[0]
    else:
        parts = ["jsonpath:$"]
        for step in steps:
            if isinstance(step, int):
                parts.append(f"[{step}]")
            elif NAME_RE.match(step) and rnd.random() < 0.5:
                parts.append("." + step)
            elif rnd.random() < 0.5:
                parts.append("['" + re.sub(r"(['\\])", r"\\\1", step) + "']")
            else:
                parts.append('["' + re.sub(r'(["\\])', r"\\\1", step) + '"]')
        text = "".join(parts)
    rule = KeyRule(text)
    assert list(rule.steps) == steps, (text, rule.steps, steps)
    return rule


def gen_documents(rnd: random.Random, rule: KeyRule, count: int) -> Iterator[bytes]:
    for _ in range(count):
        value = plant(rnd, rule.steps, gen_value(rnd, 2)) if rnd.random() < 0.85 else gen_value(rnd)
        data = encode(rnd, dump(rnd, value))
        yield data
        for _ in range(rnd.choice((0, 1, 3))):
            yield mutate(rnd, data)


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(seed=st.integers(0, 2**64 - 1))
def test_generated_documents(jk, seed: int) -> None:
    rnd = random.Random(seed)  # faster than st.randoms() for the thousands of choices per example
    rule = gen_rule(rnd)
    assert_parity(jk, rule, list(gen_documents(rnd, rule, 12)))


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(st.characters(codec=None, exclude_categories=()),
                                                                     max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.sampled_from(NAMES) | st.text(max_size=3),
                                                                      children, max_size=4),
    max_leaves=15), key=st.sampled_from(NAMES[:6]), seed=st.integers(0, 2**32))
def test_generated_values(jk, value: object, key: str, seed: int) -> None:
    """Hypothesis' own JSON-ish values (lone surrogates included), under the key and beside it."""
    rnd = random.Random(seed)

    def objects(v: object) -> object:
        if isinstance(v, dict):
            return Obj([(k, objects(x)) for k, x in v.items()])
        if isinstance(v, list):
            return [objects(x) for x in v]
        return v

    docs = [encode(rnd, dump(rnd, Obj([(key, objects(value))]))), encode(rnd, dump(rnd, objects(value))),
            dump(rnd, Obj([("x", objects(value)), (key, "k")])).encode("utf-8", "surrogatepass")]
    docs.append(mutate(rnd, docs[0]))
    assert_parity(jk, KeyRule("jsonpath:$['" + re.sub(r"(['\\])", r"\\\1", key) + "']"), docs)


def test_random_documents_in_bulk(jk) -> None:
    """Many more generated and mutated documents than Hypothesis runs, in few calls (seeded)."""
    rnd = random.Random(20260522)
    total = 0
    for _ in range(24):
        rule = gen_rule(rnd)
        docs = list(gen_documents(rnd, rule, 600))
        assert_parity(jk, rule, docs)
        total += len(docs)
    assert total > 20_000


SOUP = ["{", "}", "[", "]", ",", ":", '"key"', '"a"', '"b"', '""', "1", "-0", "0", "1e5", "1.5", "-1", "NaN", "-Infinity",
        "Infinity", "true", "false", "null", " ", "\n", '"\\ud800"', '"\\u00e9"', "-", ".", "e", '"k', '\\"']


@pytest.mark.parametrize("rule", ["field:key", "jsonpath:$.a.b", "jsonpath:$[0]", "jsonpath:$[1].key"])
def test_token_soup(jk, rule: str) -> None:
    """Random strings of JSON tokens: grammar mistakes the structured generator seldom makes."""
    rnd = random.Random(rule)
    docs = ["".join(rnd.choice(SOUP) for _ in range(rnd.randrange(1, 14))) for _ in range(2500)]
    docs += ["{" + "".join(rnd.choice(SOUP) for _ in range(rnd.randrange(1, 12))) + "}" for _ in range(2500)]
    outcomes = assert_parity(jk, rule, [d.encode() for d in docs])
    assert sum(1 for _, reason in outcomes if not (reason or "").startswith(NOT_JSON)) > 100  # not all noise


# -- Python's repr(float) ----------------------------------------------------------------------------------

def edge_doubles() -> list[float]:
    values = [0.0, -0.0, 5e-324, -5e-324, 1e-323, 2.2250738585072014e-308, 2.225073858507201e-308,
              1.7976931348623157e308, -1.7976931348623157e308, 1e16, 1e15, 9999999999999998.0, 1e17, 1e-4, 1e-5,
              1.5e-5, 0.1, 0.2, 0.3, 1 / 3, 2 / 3, 2.0**53, 2.0**53 + 2, 2.0**63, 2.0**64, 1e22, 1e23,
              123456789012345680.0, 1.5e-323, math.pi, math.e, math.nan, math.inf, -math.inf, 100.0, 12345.678,
              0.001, 0.0001234, 1234567890123456.7, 9.999999999999999e15, 9.999999999999999e-5]
    values += [2.0**e for e in range(-1074, 1024)] + [float(f"1e{e}") for e in range(-323, 309)]
    values += [float(f"{m}e{e}") for m in (5, 9, 25, 125) for e in range(-320, 300, 7)]
    return values + [math.nextafter(v, d) for v in list(values) for d in (-math.inf, math.inf) if math.isfinite(v)]


def test_python_float_repr(jk) -> None:
    rnd = random.Random(7)
    doubles = edge_doubles() + [struct.unpack(">d", rnd.getrandbits(64).to_bytes(8, "big"))[0] for _ in range(60_000)]
    doubles += [rnd.uniform(-1e3, 1e3) for _ in range(5_000)] + [rnd.random() * 10.0 ** rnd.randrange(-30, 30)
                                                               for _ in range(5_000)]
    got = jk.pythonFloatReprs(struct.pack(f">{len(doubles)}d", *doubles)).split("\n")
    want = [json.dumps(d) for d in doubles]
    bad = [(d, w, g) for d, w, g in zip(doubles, want, got) if w != g]
    assert len(got) == len(doubles) and not bad, bad[:10]


def test_python_float_repr_of_decimal_texts(jk) -> None:
    """Random decimal texts read by Java's Double.parseDouble and by Python's float(), then printed."""
    rnd = random.Random(11)
    texts = []
    for _ in range(40_000):
        digits = "".join(rnd.choice("0123456789") for _ in range(rnd.choice((1, 2, 5, 15, 16, 17, 18, 25, 40))))
        point = rnd.randrange(len(digits) + 1)
        text = rnd.choice(("", "-")) + (digits[:point] or "0") + ("." + digits[point:] if digits[point:] else "")
        if rnd.random() < 0.7:
            text += rnd.choice("eE") + str(rnd.randrange(-345, 320))
        texts.append(text)
    texts += ["1e400", "-1e400", "1e-400", "2.4703282292062327e-324", "2.4703282292062328e-324",
              "1.7976931348623158e308", "1.7976931348623159e308", "0." + "0" * 500 + "1", "9" * 800 + ".0"]
    got = jk.pythonFloatReprsOfTexts("\n".join(texts)).split("\n")
    want = [json.dumps(float(t)) for t in texts]
    bad = [(t, w, g) for t, w, g in zip(texts, want, got) if w != g]
    assert len(got) == len(texts) and not bad, bad[:10]
