"""Key skew of a bounded sample of a topic, with Spark's Kafka connector.

    spark-submit ... key_skew.py --kafka-config kafka.properties --topic orders --partitions 3 \
        --start '{"0":0,"1":0,"2":0}' --end '{"0":500,"1":500,"2":500}' \
        [--candidate-field account_id] [--candidates 3,6,12] [--output skew.json]

Spark reads exactly ``[start, end)`` of each partition and aggregates records and bytes per key,
per partition and per candidate key (a field of the value read by the key-rule contract of
docs/key-rules.md with the backfill's own Spark SQL function ``kafkaops_new_key``, so a candidate is
counted with exactly the key a rekey backfill by it would write); the driver turns those counts into
the result with :func:`kafkaops.capacity.skew.summarize` (hottest keys, load now and under each
candidate partition count, placed by Kafka's Java partitioner). The cluster's client settings come
in the ``--kafka-config`` file (as for the rekey backfill), or ``--bootstrap`` for one without security.
It is submitted like the backfill (:func:`kafkaops.platform.spark.run_spark_app`); the result comes
back through the kafkaops store (``--store-config``, ``--result-artifact``) and as the
``kafkaops-result:`` line of the driver's output (``--output`` also writes it to a file, for local
runs).
"""
from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kafkaops.capacity import skew
from kafkaops.capacity.records import SkewResult
from kafkaops.platform.spark import add_exchange_arguments, app_store, deliver_result, read_client_config, tuning_options
from spark_apps.common import NEW_KEY, Kafka, kafka_options, register_new_key, spark_session

log = logging.getLogger("kafkaops.key_skew")


def _offsets(topic: str, offsets: dict[str, int]) -> str:
    return json.dumps({topic: {str(p): int(o) for p, o in offsets.items()}})


def counts(spark: Any, bootstrap: Kafka, topic: str, start: dict[str, int], end: dict[str, int],
           candidate_field: str | None, options: dict[str, str] | None = None) -> dict[str, Any]:
    """Per-key, per-partition and per-candidate-key counts of ``[start, end)``, collected to the driver."""
    from pyspark.sql import functions as F

    frame = (spark.read.format("kafka").options(**kafka_options(bootstrap))
             .option("subscribe", topic)
             .option("startingOffsets", _offsets(topic, start)).option("endingOffsets", _offsets(topic, end))
             .option("failOnDataLoss", "false").options(**(options or {})).load()
             .select("key", "value", "partition",
                     (F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0)))
                     .alias("nbytes")))
    frame = frame.cache()
    per_key = {bytes(r["key"]): (int(r["n"]), int(r["b"])) for r in
               frame.where(F.col("key").isNotNull()).groupBy("key")
               .agg(F.count("*").alias("n"), F.sum("nbytes").alias("b")).collect()}
    nulls = frame.where(F.col("key").isNull()).agg(F.count("*").alias("n"), F.sum("nbytes").alias("b")).first()
    now = {int(r["partition"]): int(r["count"]) for r in frame.groupBy("partition").count().collect()}
    cand: dict[bytes, tuple[int, int]] = {}
    if candidate_field:
        register_new_key(spark, skew.candidate_rule(candidate_field), 1)
        cand = {bytes(r["ck"]): (int(r["n"]), int(r["b"])) for r in
                frame.select(F.call_function(NEW_KEY, F.col("value"), F.col("partition"))["key"].alias("ck"), "nbytes")
                .where(F.col("ck").isNotNull()).groupBy("ck")
                .agg(F.count("*").alias("n"), F.sum("nbytes").alias("b")).collect()}
    frame.unpersist()
    return {"per_key": per_key, "null_records": int(nulls["n"] or 0), "null_bytes": int(nulls["b"] or 0),
            "now": now, "candidate": cand}


def main(argv: Sequence[str] | None = None) -> SkewResult:
    parser = argparse.ArgumentParser(prog="key_skew", description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--kafka-config", metavar="FILE", help="JSON file of the cluster's librdkafka client config")
    where.add_argument("--bootstrap", help="bootstrap.servers of a cluster without security settings")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, required=True, help="the topic's partition count")
    parser.add_argument("--start", required=True, help='JSON {"partition": offset} of the first sampled record')
    parser.add_argument("--end", required=True, help='JSON {"partition": offset} one past the last')
    parser.add_argument("--candidate-field", default=None, help="a field of the value to try as key: a top-level name, or a key rule "
                        "('field:NAME', 'jsonpath:$.a.b', docs/key-rules.md)")
    parser.add_argument("--candidates", default=",".join(map(str, skew.DEFAULT_CANDIDATES)),
                        help="partition counts to try, comma separated")
    parser.add_argument("--output", help="also write the JSON result to this local file")
    add_exchange_arguments(parser)
    parser.add_argument("--master", default="local[1]", help="local runs only (python -m); spark-submit's wins")
    parser.add_argument("--driver-memory", default="1g", help="local runs only; spark-submit's wins")
    parser.add_argument("--kafka-option", action="append", default=[], metavar="kafka.KEY=VALUE",
                        help="a Java client option that tunes the read; secrets are refused here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    start, end = json.loads(args.start), json.loads(args.end)
    options = tuning_options(args.kafka_option)
    spark = spark_session(args.master, app="kafkaops-key-skew", driver_memory=args.driver_memory,
                          shuffle_partitions=2)
    spark.sparkContext.setLogLevel("WARN")
    kafka: Kafka = read_client_config(args.kafka_config) if args.kafka_config else args.bootstrap
    try:
        c = counts(spark, kafka, args.topic, start, end, args.candidate_field, options)
        store = app_store(args)  # its URL is a shipped file: read while the session runs
    finally:
        spark.stop()
    summary = skew.summarize(args.topic, c["per_key"], partitions=args.partitions, per_partition_now=c["now"],
                             null_key_records=c["null_records"], null_key_bytes=c["null_bytes"],
                             candidates=[int(x) for x in args.candidates.split(",") if x.strip()],
                             candidate_field=args.candidate_field, candidate_per_key=c["candidate"])
    result = SkewResult.from_dict({**summary, "sample": {"start": start, "end": end}})
    if args.output:
        Path(args.output).write_text(json.dumps(result.to_dict(), indent=1, sort_keys=True))
    deliver_result(args, result.to_dict(), store)
    log.info("key skew of %s: %d records, %d keys, hottest %s", args.topic, result.records, result.keys,
             result.top_keys[:1])
    return result


if __name__ == "__main__":
    main()
