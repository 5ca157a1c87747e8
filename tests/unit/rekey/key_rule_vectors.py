"""The shared key-rule vectors (:data:`VECTORS`, also read by jvm/spark-udf's KeyRuleTest) as Python
values."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The vectors both sides of the key-rule contract (kafkaops.platform.keyrules) are tested with.
VECTORS = Path(__file__).resolve().parents[3] / "jvm" / "spark-udf" / "src" / "test" / "resources" / \
    "key_rules_vectors.json"


@dataclass(frozen=True)
class Vector:
    note: str
    rule: str
    steps: tuple[str | int, ...]
    record_key: bytes | None
    value: bytes | None
    key: bytes | None
    code: str | None


def as_bytes(spec: Any) -> bytes | None:
    """A value or key of the file: null, text (its UTF-8), ``{"hex"}`` or ``{"parts", "tail_hex"}``."""
    if spec is None or isinstance(spec, str):
        return None if spec is None else spec.encode("utf-8")
    if "hex" in spec:
        return bytes.fromhex(spec["hex"])
    return "".join(text * count for text, count in spec["parts"]).encode("utf-8") + \
        bytes.fromhex(spec.get("tail_hex", ""))


def load() -> list[Vector]:
    data = json.loads(VECTORS.read_text(encoding="utf-8"))
    return [Vector(v["note"], v["rule"], tuple(v["steps"]), as_bytes(v.get("record_key")), as_bytes(v["value"]),
                   as_bytes(v.get("key")), v.get("code")) for v in data["vectors"]]
