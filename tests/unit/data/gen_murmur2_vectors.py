"""Write ``murmur2_vectors.json`` from the real Java code: kafka-clients' ``Utils.murmur2``.

Python draws the keys (deterministic seed), a single-file Java program hashes them with the jar in
the cache's ``broker`` folder, so the committed expectations come from Kafka, not from this repo.

    .venv/bin/python tests/unit/data/gen_murmur2_vectors.py        # rewrites the JSON next to it

``test_partitioner.py`` also imports :func:`vector_keys` and :func:`java_vectors` for a live check.
"""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
VECTORS = HERE / "murmur2_vectors.json"
SEED = 20250611
PARTITION_COUNTS = (1, 2, 3, 6, 7, 12, 100, 1000)

# Reads hex keys, one a line (an empty line is the empty key); prints murmur2 and, per partition
# count, toPositive(murmur2) % n, after checking that the producer's own code path agrees.
GEN_JAVA = """\
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.HexFormat;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.apache.kafka.common.utils.Utils;

public class Gen {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        StringBuilder out = new StringBuilder();
        for (String line; (line = in.readLine()) != null; ) {
            byte[] key = HexFormat.of().parseHex(line.strip());
            int h = Utils.murmur2(key);
            out.append(h);
            for (String arg : args) {
                int n = Integer.parseInt(arg);
                int p = Utils.toPositive(h) % n;
                if (p != BuiltInPartitioner.partitionForKey(key, n))
                    throw new AssertionError("partitionForKey disagrees for " + line);
                out.append(' ').append(p);
            }
            out.append('\\n');
        }
        System.out.print(out);
    }
}
"""


def vector_keys(seed: int = SEED) -> list[bytes]:
    """The keys to hash: every length 0..40 (all tails, random bytes), runs of 0x00/0x7f/0x80/0xff
    (sign extension), long keys and UTF-8 strings. Same seed, same keys."""
    rng = random.Random(seed)
    strings = ["", "kafka", "amqp", "giberish123456789", "account-00000", "account-00042",
               "account-99999", "order:2024-06-11:17", "user-ñandú", "clé", "键值",
               "🙂 emoji", "a" * 64, "x" * 257] + [f"account-{rng.randrange(100_000):05d}" for _ in range(8)]
    keys = [s.encode() for s in strings]
    keys += [bytes([b]) * n for b in (0x00, 0x7F, 0x80, 0xFF) for n in range(1, 9)]
    keys += [rng.randbytes(n) for n in range(41) for _ in range(6)]
    keys += [rng.randbytes(n) for n in (63, 64, 65, 127, 128, 255, 256, 257, 1023, 1024, 1025)]
    keys += [rng.randbytes(rng.randrange(41, 600)) for _ in range(8)]
    return keys


def java_classpath() -> str:
    """kafka-clients plus slf4j-api (``Utils`` opens a logger) from the ``broker`` jar cache."""
    from kafkaops.platform.paths import jar_dir

    folder = jar_dir("broker")
    return ":".join(str(next(folder.glob(pattern), folder / pattern))
                    for pattern in ("kafka-clients-*.jar", "slf4j-api-*.jar"))


def java_vectors(keys: list[bytes], counts: tuple[int, ...] = PARTITION_COUNTS) -> list[dict]:
    """``{"key_hex", "murmur2", "partition_for": {str(n): p}}`` per key, computed by Java."""
    from kafkaops.errors import SetupError

    java = shutil.which("java")
    if java is None:
        raise SetupError("no 'java' on PATH: install a JDK 17+ (java runs Gen.java from source)")
    with tempfile.TemporaryDirectory(prefix="murmur2-gen-") as tmp:
        source = Path(tmp) / "Gen.java"
        source.write_text(GEN_JAVA)
        run = subprocess.run([java, "-cp", java_classpath(), str(source), *map(str, counts)],
                             input="".join(k.hex() + "\n" for k in keys),
                             capture_output=True, text=True, timeout=300)
    lines = run.stdout.splitlines()
    if run.returncode or len(lines) != len(keys):
        raise SetupError(f"Gen.java exited {run.returncode} with {len(lines)} of {len(keys)} "
                         f"lines: {run.stderr.strip()[-2000:]}")
    vectors = []
    for key, line in zip(keys, lines):
        h, *parts = map(int, line.split())
        vectors.append({"key_hex": key.hex(), "murmur2": h,
                        "partition_for": {str(n): p for n, p in zip(counts, parts)}})
    return vectors


def main() -> None:
    sys.path.insert(0, str(HERE.parents[2] / "plugins"))
    os.environ.setdefault("KAFKAOPS_CACHE", str(HERE.parents[2] / ".cache"))  # the checkout's jars, as under make
    from kafkaops.platform.paths import jar_dir

    vectors = java_vectors(vector_keys())
    jar = next(jar_dir("broker").glob("kafka-clients-*.jar")).name
    head = json.dumps({"source": f"{jar}: Utils.murmur2, Utils.toPositive(h) % n",
                       "generator": "tests/unit/data/gen_murmur2_vectors.py", "seed": SEED,
                       "partition_counts": list(PARTITION_COUNTS)})
    body = ",\n".join(json.dumps(v) for v in vectors)
    VECTORS.write_text(f'{head[:-1]}, "vectors": [\n{body}\n]}}\n')
    print(f"wrote {len(vectors)} vectors to {VECTORS}")


if __name__ == "__main__":
    main()
