"""The Kafka adapter: kafkaops' admin calls and bounded record reads, one module per concern.

=================  ===========================================================================================
module             concern
=================  ===========================================================================================
``connection``     :class:`~connection.KafkaConnection` and :func:`~connection.connect`: the librdkafka config
                   (``connection_config``, ``client_config``), its translation for kafka-python, TLS probing,
                   and how a request is answered (``wait_for`` a confluent-kafka future, ``call_legacy``
                   through kafka-python's client). Every librdkafka handle is closed deterministically.
                   ``request_slices``: a call names at most ``MAX_PARTITIONS_PER_REQUEST`` partitions or topics
                   (Kafka 4.4's readers refuse an array of more than 1,000,000 elements).
``errors``         :func:`~errors.classify`: every error of either client as a typed :mod:`kafkaops.errors`
                   error, by code or class; :func:`~errors.retrying`: the one retry policy.
``metadata``       :func:`~metadata.snapshot` (the live cluster as a :class:`kafkaops.model.Cluster`),
                   ``describe_cluster``, topic names and metadata, replica sizes on disk, the finalized
                   ``metadata_version`` (what Kafka features the brokers take).
``offsets``        earliest and latest offsets; consumer groups: read, offsets committed, deleted.
``topics``         topics created, grown (``create_partitions``), emptied (``truncate_topics``), deleted.
``reassignments``  partition reassignments listed, submitted (replication-factor changes refused, Kafka 4.1+),
                   cancelled; preferred leader elections.
``configs``        dynamic broker and topic configs: described, changed incrementally (``ConfigOp``); where topics
                   keep their data (``describe_topic_storage``: tiered storage, for what a new replica copies).
``acls``           DENY Write ACLs: a live migration's quiesce.
``registrations``  KRaft broker registrations, listed and unregistered through Kafka's ``kafka-cluster`` tool.
``records``        bounded reads of records (``read_ranges``, ``read_topic``, ``sample``; ``consume_ranges``, the one read loop, also the tail's).
``transactions``   :class:`~transactions.TransactionalCopy`: consume-transform-produce in Kafka transactions (a live
                   migration's tail copy), each part read back before its commit.
=================  ===========================================================================================

confluent-kafka does the work; kafka-python's ``KafkaAdminClient`` only what confluent-kafka lacks (log dir
sizes, partition reassignments); Kafka's own ``kafka-cluster`` tool what neither speaks (UnregisterBroker).
Modules depend downwards only: ``errors`` <- ``connection`` <- ``offsets`` <-
``metadata`` <- ``topics``, ``records`` <- ``transactions``; ``reassignments``, ``configs`` and ``acls`` need ``connection`` alone.

Other modules that talk to Kafka, and why they are not here:

* :mod:`kafkaops.platform.waits` asks a connection's admin client for topic metadata in slices of a second
  (``list_topics``): it is the one waiting rule of the platform, which ``metadata`` calls.
* :mod:`kafkaops.testing.traffic` (the harness of the tests, the benchmarks and the demo) runs its own
  producers and consumers: checking what a cluster lost or reordered is its subject.
* :mod:`kafkaops.testing.streams` produces the input of the tests' Kafka Streams application with a Producer of
  its own (the traffic check's settings: the Java client's placement) and reads its outputs through ``records``.
* :mod:`kafkaops.cli.datagen` produces generated test records with a Producer of its own: the data generator
  of the CLI, the demo and the tests, not an operation.
* ``spark_apps`` read and write through Spark's Kafka source and sink, in the JVM; their driver reads and
  empties topics through the modules here.

The harness and the data generator build their librdkafka configs with :func:`connection.client_config`, and
create topics, read offsets and delete groups through the modules here.
"""
