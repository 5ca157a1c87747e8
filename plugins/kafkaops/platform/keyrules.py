"""Key rules: where the new key of a rekey backfill comes from, as ``docs/key-rules.md`` defines them.

A rule is ``record_key`` (the record's key bytes), ``window_key`` / ``session_key`` (the key of a Kafka
Streams window / session store changelog record without its window suffix), ``field:NAME`` (a member of
the JSON value) or ``jsonpath:$...`` (``.name``, ``['any name']``, ``["any name"]`` and ``[index]`` steps
from ``$``).
:func:`extract` gives a record's new key, or the reason code of a dead letter (:data:`CODES`) with a
free-text detail that is not part of the contract.

This is the Python side of the contract, written apart from the JVM side (``io.kafkaops.spark.KeyRule``
in jvm/spark-udf, on Jackson's streaming parser) on purpose: the backfill copies with the JVM side and
its integrity check (the backfill gate) recomputes every key with this one, so a disagreement shows.
Both are held to the shared vectors of the checkout's
``jvm/spark-udf/src/test/resources/key_rules_vectors.json``. Pure: stdlib only.

How: strict UTF-8 decoding, then :mod:`json` with hooks that keep each number's token text
(``parse_int``/``parse_float``), refuse ``NaN``/``Infinity`` (``parse_constant``), let the first of
duplicate member names count and refuse names holding a lone surrogate (``object_pairs_hook``);
nesting is measured on the text afterwards.
A value too deep for json's recursive parser is checked by :func:`_grammar_error`, which does not
recurse.
"""
from __future__ import annotations

import functools
import json
import re
import struct
import threading
from dataclasses import dataclass, field
from json.decoder import scanstring  # type: ignore[attr-defined]  # CPython's, missing from typeshed's stub
from typing import Any, NamedTuple

from kafkaops.errors import ConfigError

__all__ = ["CODES", "KEY_RULES", "MAX_DEPTH", "MAX_NUMBER_LENGTH", "KeyResult", "KeyRule", "KeyRuleError", "Number",
           "extract", "extract_key", "placement_key", "rule_of", "written_key"]

#: Arrays and objects nested deeper than this make ``TOO_DEEP``.
MAX_DEPTH = 100
#: A number token with more digits than this (integer, fraction and exponent digits) makes ``NUMBER_TOO_LONG``.
MAX_NUMBER_LENGTH = 1000

NO_KEY = "NO_KEY"                    # record_key, window_key, session_key: the record has no key
NOT_A_WINDOWED_KEY = "NOT_A_WINDOWED_KEY"  # window_key, session_key: the key holds no window Streams writes
NO_VALUE = "NO_VALUE"                # a value rule: the record has no value (a tombstone)
NOT_UTF8 = "NOT_UTF8"                # the value is not well-formed UTF-8
NOT_JSON = "NOT_JSON"                # the value is not one RFC 8259 JSON text
TOO_DEEP = "TOO_DEEP"                # arrays/objects nested deeper than MAX_DEPTH
NUMBER_TOO_LONG = "NUMBER_TOO_LONG"  # a number of more than MAX_NUMBER_LENGTH digits
FIELD_MISSING = "FIELD_MISSING"      # the path leads nowhere
NULL_VALUE = "NULL_VALUE"            # the path leads to null
NOT_A_SCALAR = "NOT_A_SCALAR"        # the path leads to an object or an array
LONE_SURROGATE = "LONE_SURROGATE"    # the path leads to a string holding an unpaired \\uD800-\\uDFFF escape
#: Every reason code, in the order the contract decides them.
CODES = (NO_KEY, NOT_A_WINDOWED_KEY, NO_VALUE, NOT_UTF8, NOT_JSON, TOO_DEEP, NUMBER_TOO_LONG, FIELD_MISSING,
         NULL_VALUE, NOT_A_SCALAR, LONE_SURROGATE)

RECORD_KEY = "record_key"
#: Kafka Streams' window store changelog key (``WindowKeySchema.toStoreKeyBinary``): key bytes, 8-byte
#: big-endian window start, 4-byte big-endian sequence number.
WINDOW_KEY = "window_key"
#: Kafka Streams' session store changelog key (``SessionKeySchema.toBinary``): key bytes, 8-byte
#: big-endian window end, 8-byte big-endian window start.
SESSION_KEY = "session_key"
#: The rules that read the record key alone (never the value), each with the bytes of the window
#: suffix it takes off the key's end.
KEY_RULES = {RECORD_KEY: 0, WINDOW_KEY: 12, SESSION_KEY: 16}



class KeyRuleError(ConfigError):
    """A key rule that is not one of the supported forms."""


# -- rules -------------------------------------------------------------------------------------------------

_NAME = r"[A-Za-z_][A-Za-z0-9_-]*"
_STEP = re.compile(rf"\.({_NAME})|\[([0-9]+)\]|\['((?:[^'\\]|\\.)*)'\]|\[\"((?:[^\"\\]|\\.)*)\"\]")
_MAX_INDEX = 2**31 - 1


@dataclass(frozen=True)
class KeyRule:
    """Where the new key comes from: ``record_key``; ``window_key`` or ``session_key`` (the record key
    of a Kafka Streams window or session store changelog without its 12- or 16-byte window suffix, so
    the record goes where Streams placed it: by the store's key); ``field:<name>`` or ``jsonpath:$.a.b``
    (a safe JSON-path subset: ``.name``, ``['any name']``, ``["any name"]`` and ``[index]`` steps from
    ``$``; no wildcards, filters, slices or recursive descent). ``steps`` are the names (str) and
    indices (int) the JVM side receives: none for the rules of :data:`KEY_RULES`, which it knows by
    their text."""

    text: str
    steps: tuple[str | int, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", _parse_rule(self.text))

    @property
    def needs_value(self) -> bool:
        """A value rule (``field:``, ``jsonpath:``): the key comes from the record value."""
        return self.text not in KEY_RULES

    @property
    def is_record_key(self) -> bool:
        """``record_key``: the new key is the record key as it is (Spark SQL places it); every other rule
        computes it on the JVM (``kafkaops_new_key``)."""
        return self.text == RECORD_KEY

    @property
    def keeps_record_key(self) -> bool:
        """The copy writes each record with its own key, whatever the new key: ``record_key`` (the same
        bytes), ``window_key`` and ``session_key`` (a Kafka Streams changelog key, window suffix and all,
        is what the application restores its store from; the store key, the new key, only *places* the
        record). A value rule writes its new key (:func:`written_key`, :func:`placement_key`)."""
        return self.text in KEY_RULES

    @property
    def reads(self) -> str:
        """What the rule reads of a record, the column the JVM side is given: ``value`` or ``key``."""
        return "value" if self.needs_value else "key"


def _parse_rule(text: str) -> tuple[str | int, ...]:
    if text in KEY_RULES:
        return ()
    if text.startswith("field:"):
        name = text[len("field:"):]
        if not name:
            raise KeyRuleError("key rule 'field:' names no field; write e.g. 'field:account_id'")
        return (_unicode(text, name),)
    if text.startswith("jsonpath:"):
        path = text[len("jsonpath:"):].strip()
        if not path.startswith("$"):
            raise KeyRuleError(f"key rule {text!r}: a JSON path starts at '$', e.g. 'jsonpath:$.customer.id'")
        steps: list[str | int] = []
        pos = 1
        while pos < len(path):
            m = _STEP.match(path, pos)
            if m is None:
                raise KeyRuleError(
                    f"key rule {text!r}: cannot read {path[pos:]!r} at character {pos}; kafkaops supports "
                    "'.name', \"['name']\" and '[index]' steps only (no wildcards, filters or '..')")
            name, index, single, double = m.groups()
            if index is not None:
                if int(index) > _MAX_INDEX:
                    raise KeyRuleError(f"key rule {text!r}: array index {index} is above {_MAX_INDEX}")
                steps.append(int(index))
            else:
                raw = name if name is not None else (single if single is not None else double)
                steps.append(_unicode(text, re.sub(r"\\(.)", r"\1", raw)))
            pos = m.end()
        if not steps:
            raise KeyRuleError(f"key rule {text!r} selects the whole value; name a field, e.g. '$.id'")
        return tuple(steps)
    raise KeyRuleError(f"key rule {text!r} is unknown; use 'record_key', 'window_key', 'session_key', "
                       "'field:<name>' or 'jsonpath:$.a.b'")


def _unicode(text: str, name: str) -> str:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as err:
        raise KeyRuleError(f"key rule {text!r}: field name {name!r} holds a lone surrogate; no JSON value "
                           "written as UTF-8 can match it") from err
    return name


@functools.lru_cache(maxsize=256)
def rule_of(text: str) -> KeyRule:
    """``KeyRule(text)``, parsed once per text."""
    return KeyRule(text)


# -- values ------------------------------------------------------------------------------------------------

class Number(str):
    """A JSON number as its token text, exactly as written (``1.50``, ``1e3``, ``-0``)."""

    __slots__ = ()


class KeyResult(NamedTuple):
    """A key (``code`` and ``detail`` None), or a dead letter's reason code and a free-text detail."""

    key: bytes | None
    code: str | None = None
    detail: str | None = None


class _Constant(ValueError):
    """NaN, Infinity or -Infinity, which json reads and the contract does not."""


class _LoneSurrogateName(ValueError):
    """A member name holding a lone surrogate, which json reads and the contract does not."""


_state = threading.local()


def _number(text: str) -> Number:
    if len(text) > MAX_NUMBER_LENGTH and sum(c.isdigit() for c in text) > MAX_NUMBER_LENGTH:
        _state.number_too_long = True  # a tier below not-JSON and too-deep: the parse goes on
    return Number(text)


def _constant(name: str) -> Any:
    raise _Constant(f"{name} is not a JSON number")


def _check_name(name: str) -> str:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as err:
        raise _LoneSurrogateName(f"member name {name!r} holds a lone surrogate") from err
    return name


def _first_wins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if _state.surrogate_escapes:
        for name, _ in pairs:
            _check_name(name)
    obj = dict(pairs)
    return obj if len(obj) == len(pairs) else dict(reversed(pairs))


_DECODER = json.JSONDecoder(parse_int=_number, parse_float=_number, parse_constant=_constant,
                            object_pairs_hook=_first_wins)
_WS = re.compile(r"[ \t\n\r]*")
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")


def _depth(text: str) -> int:
    """The deepest nesting of arrays and objects of a valid JSON text; 0 when a count of its brackets
    already shows it cannot exceed MAX_DEPTH (most values: no need to find strings)."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return 0
    deepest = depth = 0
    for c in _NOT_BRACKETS.sub("", _STRING.sub("", text)):
        depth += 1 if c in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _grammar_error(text: str) -> str | None:
    """Where ``text`` breaks the JSON grammar (json's, without NaN/Infinity), read without recursion;
    None where it does not. For values nested too deeply for json's own parser."""
    closers: list[str] = []
    pos = _skip_ws(text, 0)
    try:
        while True:
            c = text[pos:pos + 1]
            if c in ("[", "{"):
                close = "]" if c == "[" else "}"
                pos = _skip_ws(text, pos + 1)
                if text.startswith(close, pos):
                    pos += 1
                else:
                    closers.append(close)
                    if close == "}":
                        pos = _member_name(text, pos)
                    continue
            elif c == '"':
                pos = scanstring(text, pos + 1, True)[1]
            elif m := _JSON_NUMBER.match(text, pos):
                pos = m.end()
            elif text.startswith(("true", "null"), pos):
                pos += 4
            elif text.startswith("false", pos):
                pos += 5
            else:
                return f"expected a value at character {pos}"
            while True:  # after a value
                pos = _skip_ws(text, pos)
                if not closers:
                    return None if pos == len(text) else f"extra data at character {pos}"
                if text.startswith(",", pos):
                    pos = _skip_ws(text, pos + 1)
                    if closers[-1] == "}":
                        pos = _member_name(text, pos)
                    break
                if not text.startswith(closers[-1], pos):
                    return f"expected ',' or {closers[-1]!r} at character {pos}"
                closers.pop()
                pos += 1
    except ValueError as err:  # scanstring's JSONDecodeError, or _LoneSurrogateName
        return str(err)


def _skip_ws(text: str, pos: int) -> int:
    """Past the JSON white space at ``pos`` (``_WS`` matches the empty string too, so it always matches)."""
    space = _WS.match(text, pos)
    return space.end() if space else pos


def _member_name(text: str, pos: int) -> int:
    """Past ``"name" :`` and white space; ValueError when that is not there."""
    if not text.startswith('"', pos):
        raise ValueError(f"expected a member name at character {pos}")
    name, pos = scanstring(text, pos + 1, True)
    _check_name(name)
    pos = _skip_ws(text, pos)
    if not text.startswith(":", pos):
        raise ValueError(f"expected ':' at character {pos}")
    return _skip_ws(text, pos + 1)


def _parse(value: bytes) -> tuple[Any, str | None, str | None]:
    """``(document, None, None)`` or ``(None, code, detail)``: the tiers up to the limits."""
    try:
        text = bytes(value).decode("utf-8")
    except UnicodeDecodeError as err:
        return None, NOT_UTF8, f"the value is not UTF-8: byte {err.start} (0x{value[err.start]:02x})"
    _state.number_too_long = False
    _state.surrogate_escapes = _SURROGATE_ESCAPE.search(text) is not None  # else no name can hold one
    doc = None
    try:
        doc = _DECODER.decode(text)
    except ValueError as err:  # JSONDecodeError, _Constant or _LoneSurrogateName
        return None, NOT_JSON, f"the value is not JSON: {err}"[:300]
    except RecursionError:  # nested far deeper than MAX_DEPTH (json's parser recurses per level)
        why = _grammar_error(text)
        if why is not None:
            return None, NOT_JSON, f"the value is not JSON: {why}"[:300]
        if _depth(text) <= MAX_DEPTH:
            raise RuntimeError(f"json ran out of recursion on a value nested at most {MAX_DEPTH} deep: the "
                               "Python stack is too deep already; call extract from a shallower stack") from None
    if _depth(text) > MAX_DEPTH:
        return None, TOO_DEEP, f"the value nests arrays and objects deeper than {MAX_DEPTH}"
    if _state.number_too_long:
        return None, NUMBER_TOO_LONG, f"the value holds a number of more than {MAX_NUMBER_LENGTH} digits"
    return doc, None, None


def _store_key(key: bytes, rule: str) -> KeyResult:
    """The key of a Kafka Streams window or session store changelog record without its window suffix,
    or ``NOT_A_WINDOWED_KEY`` when the key is too short to hold one or it is not a window Streams can
    write (``Window``: start 0 or more, end not before start; a sequence number 0 or more)."""
    suffix = KEY_RULES[rule]
    base = len(key) - suffix
    if base < 0:
        return KeyResult(None, NOT_A_WINDOWED_KEY, f"the key has {len(key)} byte(s), fewer than the {suffix} of "
                                                   f"{rule}'s window suffix")
    if rule == WINDOW_KEY:
        start, seq = struct.unpack_from(">qi", key, base)
        if start < 0:
            return KeyResult(None, NOT_A_WINDOWED_KEY, f"the key's window start {start} is negative")
        if seq < 0:
            return KeyResult(None, NOT_A_WINDOWED_KEY, f"the key's sequence number {seq} is negative")
    else:
        end, start = struct.unpack_from(">qq", key, base)
        if start < 0 or end < 0:
            return KeyResult(None, NOT_A_WINDOWED_KEY, f"the key's session window [{start}, {end}] has a "
                                                       "negative time")
        if start > end:
            return KeyResult(None, NOT_A_WINDOWED_KEY, f"the key's session window starts at {start}, after "
                                                       f"its end {end}")
    return KeyResult(key[:base])


def extract(key_bytes: bytes | None, value_bytes: bytes | None, rule: KeyRule | str) -> KeyResult:
    """The new key of a record under ``rule``, or why it has none (docs/key-rules.md)."""
    rule = rule if isinstance(rule, KeyRule) else rule_of(rule)
    if not rule.steps:
        if key_bytes is None:
            return KeyResult(None, NO_KEY, "the record has no key")
        return KeyResult(bytes(key_bytes)) if rule.is_record_key else _store_key(bytes(key_bytes), rule.text)
    if value_bytes is None:
        return KeyResult(None, NO_VALUE, "the record has no value (a tombstone)")
    node, code, detail = _parse(value_bytes)
    if code is not None:
        return KeyResult(None, code, detail)
    for step in rule.steps:
        if isinstance(step, int):
            if not isinstance(node, list) or step >= len(node):
                return KeyResult(None, FIELD_MISSING, f"no element [{step}] on the path of {rule.text}")
        elif not isinstance(node, dict) or step not in node:
            return KeyResult(None, FIELD_MISSING, f"no field {step!r} on the path of {rule.text}")
        node = node[step]
    if isinstance(node, Number):
        return KeyResult(node.encode("ascii"))
    if isinstance(node, str):
        try:
            return KeyResult(node.encode("utf-8"))
        except UnicodeEncodeError:
            return KeyResult(None, LONE_SURROGATE, f"the string at {rule.text} holds a lone surrogate")
    if isinstance(node, bool):
        return KeyResult(b"true" if node else b"false")
    if node is None:
        return KeyResult(None, NULL_VALUE, f"the value at {rule.text} is null")
    return KeyResult(None, NOT_A_SCALAR, f"the value at {rule.text} is an object or an array")


def extract_key(key_bytes: bytes | None, value_bytes: bytes | None, rule: KeyRule | str) -> bytes | None:
    """The new key of a record under ``rule``; ``None`` when it has none (a dead letter)."""
    return extract(key_bytes, value_bytes, rule).key


def written_key(key_bytes: bytes | None, new_key: bytes | None, rule: KeyRule | str) -> bytes | None:
    """The key a copy writes on a record whose key is ``key_bytes`` and new key ``new_key`` (None: a dead
    letter): the record's own key for the rules that keep it (:attr:`KeyRule.keeps_record_key`, dead letters
    included), else the new key (a value rule's dead letter: None)."""
    rule = rule if isinstance(rule, KeyRule) else rule_of(rule)
    return (None if key_bytes is None else bytes(key_bytes)) if rule.keeps_record_key else new_key


def placement_key(written: bytes | None, rule: KeyRule | str) -> bytes | None:
    """The key a copied record is placed and ordered by, read from the key it was written with: the rule
    applied to that key for ``window_key`` and ``session_key`` (the store key; None when it holds no window),
    the written key itself for ``record_key`` and the value rules (their written key is the new key). A copy
    is right where ``partition == murmur2(placement_key(key)) % N``."""
    rule = rule if isinstance(rule, KeyRule) else rule_of(rule)
    if written is None or not rule.keeps_record_key or rule.is_record_key:
        return None if written is None else bytes(written)
    return _store_key(bytes(written), rule.text).key
