"""The key-rule contract (docs/key-rules.md) on both sides: the JVM side (``io.kafkaops.spark.KeyRule``
behind ``kafkaops_new_key``, what both backfill copies and the key-skew job run) and the Python side
(``kafkaops.platform.keyrules``, which the integrity check recomputes every key with) give the same key
bytes and the same reason code. First the shared vectors through the backfill's own projection
(``rekey_rows``), then generated and byte-mutated documents, and generated Kafka Streams store keys
(``window_key``, ``session_key``), both sides compared record by record. Only
the free-text detail may differ. Needs the jars of ``make setup``, not a cluster; one SparkSession
per module, values go over in batches."""
from __future__ import annotations

import json
import random
import re
import struct
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkaops.platform import keyrules
from kafkaops.rekey.backfill import BackfillPlan
from kafkaops.platform.keyrules import KeyRule
from tests.unit.rekey.key_rule_vectors import Vector, load

pytestmark = pytest.mark.integration

Outcome = tuple[bytes | None, str | None]


def jvm_outcomes(spark, rule: KeyRule, rows: Sequence[tuple[bytes | None, bytes | None]]) -> list[Outcome]:
    """``(key, code)`` of each ``(record key, value)`` by the backfill's projection on the JVM
    (spark_apps.rekey_backfill.rekey_rows: ``kafkaops_new_key`` for every rule but ``record_key``), in one
    Spark job: the new key is the row's ``place`` (the key written is the record's own for the store rules)."""
    from pyspark.sql import functions as F

    from spark_apps import common, rekey_backfill

    plan = BackfillPlan("src", ((0, 0, len(rows)),), "dst", 6, rule.text)
    common.register_functions(spark, plan)
    frame = spark.createDataFrame([(0, i, 0, k, v) for i, (k, v) in enumerate(rows)],
                                  "partition int, offset bigint, ts bigint, key binary, value binary")
    got = rekey_backfill.rekey_rows(frame, plan).orderBy("src_offset").select(
        F.col("place").alias("key"), "code", F.col("detail")).collect()
    assert all((r.code is None) == (r.detail is None) for r in got)
    return [(None if r.key is None else bytes(r.key), r.code) for r in got]


def python_outcomes(rule: KeyRule, rows: Sequence[tuple[bytes | None, bytes | None]]) -> list[Outcome]:
    return [keyrules.extract(k, v, rule)[:2] for k, v in rows]


def assert_parity(spark, rule: KeyRule, values: Sequence[bytes | None]) -> list[Outcome]:
    """Both sides agree on every value under ``rule``; returns the outcomes."""
    rows = [(None, v) for v in values]
    jvm, python = jvm_outcomes(spark, rule, rows), python_outcomes(rule, rows)
    bad = [(v, p, j) for v, p, j in zip(values, python, jvm) if p != j]
    assert not bad, (f"{len(bad)} of {len(values)} values differ under {rule.text!r}, e.g.\n"
                     + "\n".join(f"  {v[:300]!r}\n    python {p!r}\n    jvm    {j!r}" for v, p, j in bad[:8]))
    return python


# -- the shared vectors -----------------------------------------------------------------------------------

def test_every_vector_through_the_backfill_projection(spark) -> None:
    by_rule: dict[str, list[Vector]] = defaultdict(list)
    for v in load():
        by_rule[v.rule].append(v)
    checked = Counter()
    for text, vectors in by_rule.items():
        got = jvm_outcomes(spark, KeyRule(text), [(v.record_key, v.value) for v in vectors])
        bad = [(v.note, (v.key, v.code), g) for v, g in zip(vectors, got) if (v.key, v.code) != g]
        assert not bad, f"{len(bad)} vector(s) of {text!r} differ on the JVM: {bad[:5]}"
        checked.update(v.code or "key" for v in vectors)
    assert set(checked) == {*keyrules.CODES, "key"} and sum(checked.values()) > 200, checked


# -- generated documents ----------------------------------------------------------------------------------

NAMES = ["key", "a", "b", "id", "kéy", "😀", "it's", 'say "hi"', "back\\slash", "x y", "0", "", "\u200b"]
ALPHABET = ["a", "z", "0", " ", "/", '"', "\\", "\x00", "\x1f", "\x7f", "é", "€", "😀", "\U0010ffff", "\ufeff", "\uffff",
            "\u2028", "\ud800", "\udbff", "\udc00", "\udfff", "\ud83d", "\ude00"]
INTERESTING = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xef\xbb\xbf", b"\x00", b"\x1f", b"\\", b'"', b"{", b"}", b"[", b"]",
               b",", b":", b"0", b"-", b".", b"e", b" ", b"\n", b"N", b"I", b"\\u", b"\\ud800", b"\xf4\x90\x80\x80"]
NUMBERS = ["0", "-0", "7", "-7", "1.50", "1e3", "1E+05", "-12.5e-3", "0.1000", "1e400", "123456789012345678901234567890",
           "9" * 1000, "9" * 1001, "1." + "0" * 999, "1." + "0" * 1000, "NaN", "-Infinity", "01", "1.", ".5", "+1", "1e"]


class Obj:
    """A JSON object as its members in order, duplicates allowed."""

    def __init__(self, pairs: list[tuple[str, object]]) -> None:
        self.pairs = pairs


class Token:
    """Text written as is (a number token, or a mistake)."""

    def __init__(self, text: str) -> None:
        self.text = text


def gen_scalar(rnd: random.Random) -> object:
    kind = rnd.randrange(6)
    if kind == 0:
        return rnd.choice((None, True, False))
    if kind == 1:
        return Token(rnd.choice(NUMBERS))
    if kind == 2:
        return Token(rnd.choice(("", "-")) + str(rnd.randrange(10**rnd.randrange(1, 25)))
                     + rnd.choice(("", "." + str(rnd.randrange(1, 10**6)))) + rnd.choice(("", "e-7", "E+22")))
    return "".join(rnd.choice(ALPHABET + NAMES) for _ in range(rnd.choice((0, 1, 2, 5))))


def gen_value(rnd: random.Random, depth: int = 0) -> object:
    r = rnd.random()
    if depth >= 4 or r < 0.55:
        return gen_scalar(rnd)
    if r < 0.75:
        return [gen_value(rnd, depth + 1) for _ in range(rnd.randrange(4))]
    return Obj([(rnd.choice(NAMES), gen_value(rnd, depth + 1)) for _ in range(rnd.randrange(4))])


def plant(rnd: random.Random, steps: Sequence[str | int], leaf: object) -> object:
    """A value with ``leaf`` at ``steps`` (usually), with noise, duplicates and wrong turns around it."""
    value = leaf
    for step in reversed(steps):
        if rnd.random() < 0.08:
            value = gen_value(rnd, 2)
        if isinstance(step, int):
            value = [gen_value(rnd, 3) for _ in range(step)] + [value] + [gen_value(rnd, 3) for _ in range(rnd.randrange(3))]
        else:
            pairs = [(rnd.choice(NAMES), gen_value(rnd, 3)) for _ in range(rnd.randrange(4))]
            pairs.insert(rnd.randrange(len(pairs) + 1), (step, value))
            if rnd.random() < 0.3:  # a duplicate, before or after
                pairs.insert(rnd.randrange(len(pairs) + 1), (step, gen_value(rnd, 3)))
            value = Obj(pairs)
    if rnd.random() < 0.1:  # near the depth limit
        value = [value]
        for _ in range(rnd.choice((97, 98, 99, 100, 101))):
            value = [value]
    return value


def str_token(rnd: random.Random, text: str) -> str:
    short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "/": "\\/"}
    out = ['"']
    for ch in text:
        cp = ord(ch)
        if ch in '"\\' or cp < 0x20 or 0xD800 <= cp <= 0xDFFF or rnd.random() < 0.15:
            if ch in short and rnd.random() < 0.6:
                out.append(short[ch])
            elif cp > 0xFFFF:
                hi, lo = 0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF)
                out.append(rnd.choice(("\\u%04x\\u%04x", "\\u%04X\\u%04X")) % (hi, lo))
            else:
                out.append(rnd.choice(("\\u%04x", "\\u%04X")) % cp)
        else:
            out.append(ch)
    return "".join(out) + '"'


def dump(rnd: random.Random, value: object) -> str:
    def ws() -> str:
        return "".join(rnd.choice(" \t\n\r") for _ in range(rnd.choice((0, 0, 0, 1, 2))))

    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, Token):
        return value.text
    if isinstance(value, str):
        return str_token(rnd, value)
    if isinstance(value, list):
        return "[" + ws() + ",".join(ws() + dump(rnd, v) + ws() for v in value) + ws() + "]"
    assert isinstance(value, Obj)
    return "{" + ws() + ",".join(ws() + str_token(rnd, k) + ws() + ":" + ws() + dump(rnd, v) + ws()
                                 for k, v in value.pairs) + ws() + "}"


def mutate(rnd: random.Random, data: bytes) -> bytes:
    d = bytearray(data)
    for _ in range(rnd.choice((1, 1, 2))):
        at = rnd.randrange(len(d) + 1)
        op = rnd.randrange(4)
        if op == 0:
            del d[at:]  # cut off
        elif op == 1:
            d[at:at] = rnd.choice(INTERESTING)  # inserted
        elif op == 2:
            del d[at:at + rnd.choice((1, 2))]  # dropped
        else:
            d[at:at + 1] = rnd.choice(INTERESTING)  # replaced
    return bytes(d)


def gen_rule(rnd: random.Random) -> KeyRule:
    steps: list[str | int] = [rnd.choice(NAMES) if rnd.random() < 0.75 else rnd.randrange(3)
                              for _ in range(rnd.choice((1, 1, 1, 2, 3)))]
    if len(steps) == 1 and isinstance(steps[0], str) and steps[0] and rnd.random() < 0.5:
        text = "field:" + steps[0]
    else:
        text = "jsonpath:$" + "".join(f"[{s}]" if isinstance(s, int) else "['" + re.sub(r"(['\\])", r"\\\1", s) + "']"
                                      for s in steps)
    rule = KeyRule(text)
    assert list(rule.steps) == steps, (text, rule.steps, steps)
    return rule


def gen_documents(rnd: random.Random, rule: KeyRule, count: int) -> Iterator[bytes]:
    for _ in range(count):
        value = plant(rnd, rule.steps, gen_value(rnd, 2)) if rnd.random() < 0.85 else gen_value(rnd)
        data = dump(rnd, value).encode("utf-8", "surrogatepass")  # a raw lone surrogate: not UTF-8
        yield data
        for _ in range(rnd.choice((0, 1, 3))):
            yield mutate(rnd, data)


def test_generated_documents_in_bulk(spark) -> None:
    """Many generated and mutated documents (seeded), a few Spark jobs; every code turns up."""
    rnd = random.Random(20261123)
    codes: Counter[str | None] = Counter()
    for _ in range(12):
        rule = gen_rule(rnd)
        codes.update(code for _, code in assert_parity(spark, rule, list(gen_documents(rnd, rule, 1000))))
    assert sum(codes.values()) > 15_000
    assert set(codes) >= {None, *keyrules.CODES} - {keyrules.NO_KEY, keyrules.NOT_A_WINDOWED_KEY, keyrules.NO_VALUE}, codes


@settings(max_examples=25, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(value=st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(st.characters(codec=None, exclude_categories=()),
                                                                     max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.sampled_from(NAMES) | st.text(max_size=3),
                                                                      children, max_size=4),
    max_leaves=15), key=st.sampled_from(NAMES[:6]), seed=st.integers(0, 2**32))
def test_hypothesis_values(spark, value: object, key: str, seed: int) -> None:
    """Hypothesis' own JSON-ish values (lone surrogates, NaN and huge floats included), under the key,
    beside it and as the whole value, each also mutated."""
    rnd = random.Random(seed)

    def objects(v: object) -> object:
        if isinstance(v, dict):
            return Obj([(k, objects(x)) for k, x in v.items()])
        if isinstance(v, list):
            return [objects(x) for x in v]
        if isinstance(v, float):
            return Token(json.dumps(v) if rnd.random() < 0.5 else f"{v:.17e}".replace("nan", "NaN"))
        if isinstance(v, int) and not isinstance(v, bool):
            return Token(str(v))
        return v

    docs = [dump(rnd, Obj([(key, objects(value))])), dump(rnd, objects(value)),
            dump(rnd, Obj([("x", objects(value)), (key, "k")]))]
    data = [d.encode("utf-8", "surrogatepass") for d in docs]
    assert_parity(spark, KeyRule("jsonpath:$['" + re.sub(r"(['\\])", r"\\\1", key) + "']"),
                  data + [mutate(rnd, d) for d in data for _ in range(3)])


# -- generated Kafka Streams store keys --------------------------------------------------------------------

SUFFIX_LONGS = [0, 1, 1_700_000_000_000, 2**31, 2**63 - 1, -1, -(2**63), -1_700_000_000_000]
SUFFIX_INTS = [0, 1, 7, 2**31 - 1, -1, -(2**31)]


def gen_store_key(rnd: random.Random, rule: str) -> bytes | None:
    """A window or session store key as Streams writes it (sometimes an implausible window), cut short,
    lengthened or none at all."""
    if rnd.random() < 0.03:
        return None
    base = rnd.randbytes(rnd.choice((0, 0, 1, 3, 8, 20)))
    if rule == "window_key":
        key = base + struct.pack(">qi", rnd.choice(SUFFIX_LONGS + [rnd.randrange(2**40)]),
                                 rnd.choice(SUFFIX_INTS + [rnd.randrange(2**31)]))
    else:
        start = rnd.choice(SUFFIX_LONGS + [rnd.randrange(2**40)])
        end = start + rnd.choice((0, 0, 1, 60_000, -1)) if rnd.random() < 0.7 else rnd.choice(SUFFIX_LONGS)
        key = base + struct.pack(">qq", max(min(end, 2**63 - 1), -(2**63)), start)
    if rnd.random() < 0.15:
        key = key[:rnd.randrange(len(key) + 1)]
    elif rnd.random() < 0.05:
        key += rnd.randbytes(rnd.randrange(1, 4))
    return key


@pytest.mark.parametrize("rule", ["window_key", "session_key"])
def test_generated_store_keys(spark, rule: str) -> None:
    """Both sides agree on generated store keys, whatever the value (tombstones, not JSON); every outcome
    of the rule turns up."""
    rnd = random.Random(f"store keys {rule}")
    rows = [(gen_store_key(rnd, rule), rnd.choice((None, b"", b"\xff", b'{"key": "v"}'))) for _ in range(3000)]
    jvm, python = jvm_outcomes(spark, KeyRule(rule), rows), python_outcomes(KeyRule(rule), rows)
    bad = [(k, p, j) for (k, _), p, j in zip(rows, python, jvm) if p != j]
    assert not bad, f"{len(bad)} of {len(rows)} keys differ under {rule!r}, e.g. {bad[:8]}"
    codes = Counter(code for _, code in python)
    assert set(codes) == {None, keyrules.NO_KEY, keyrules.NOT_A_WINDOWED_KEY}, codes
    assert b"" in {key for key, _ in python}  # an empty store key is a key
