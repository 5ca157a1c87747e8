# syntax=docker/dockerfile:1
# The kafkaops image: Airflow 3.3 with the kafkaops wheel and its pinned dependencies, a JRE 17 and the
# Kafka/Spark jars. docker-compose.yml runs every Airflow component from the `runtime` target and the hosts
# a scale-out adds brokers to from the `broker-host` target. Nothing of the checkout is in it but the
# wheel and the jars built from it.
#
#   docker build --target runtime -t kafkaops:0.1.0 .
#
# Base: python:3.11-slim-bookworm plus `pip install` of the wheel, not apache/airflow:3.3.2-python3.11.
# The wheel's pins (pyproject.toml: Airflow 3.3.2, the kafka/postgres/celery providers, celery[redis],
# pyspark, ansible-core, ansible-runner, GX, ...) are then the whole environment, resolved by pip from the
# same input as the venv CI tests the installed wheel on (tests/deployment); the Airflow image brings its
# own constraint-pinned set of providers and an entrypoint of its own between `kafkaops check` and the
# component. Debian bookworm has the JRE 17 that Kafka 4 and Spark 4 need (openjdk-17-jre-headless).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# -- the jars: Maven copies the broker, tools and Spark classpaths and the JMX exporter's agent, and builds spark-udf
#    (its JUnit tests run);
#    not streams-app, the tests' Kafka Streams application (kafka-streams and RocksDB: no run needs them)
FROM maven:3.9-eclipse-temurin-17 AS jars
WORKDIR /src
COPY jvm/ jvm/
RUN mvn -q -B -f jvm/pom.xml package -Djars.dir=/opt/kafkaops/jars -pl '!streams-app'

# -- the wheel: kafkaops, the Spark apps, and as package data the DAG files, playbooks and gate suites
FROM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY . .
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# -- the runtime of every Airflow component (api-server, scheduler, dag-processor, triggerer, celery worker)
FROM ${PYTHON_IMAGE} AS runtime
ARG KAFKAOPS_UID=50000
# The JRE runs Spark (the rekey backfill, the key-skew scan) and Kafka's tools; ssh is how Ansible reaches
# the hosts of new brokers. Debian's JRE package needs the man folder that slim images leave out.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless openssh-client \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid "${KAFKAOPS_UID}" --user-group --create-home --shell /bin/bash kafkaops \
 && usermod --password '*' kafkaops \
 && mkdir -p /opt/airflow /opt/kafkaops/cache /opt/kafkaops/ssh /opt/kafkaops/authorized /var/lib/kafkaops \
 && chown kafkaops:kafkaops /opt/airflow /opt/kafkaops/cache /opt/kafkaops/ssh /opt/kafkaops/authorized /var/lib/kafkaops \
 && chmod 700 /opt/kafkaops/ssh /opt/kafkaops/authorized
COPY --from=jars /opt/kafkaops/jars /opt/kafkaops/jars
COPY --from=wheel /wheels/ /tmp/wheels/
# The wheel WITH its dependencies, into a venv; then fixed paths to what the wheel carries: the DAG files
# (Airflow's dags_folder) and the playbooks (the scale-out's inventory /opt/kafkaops/playbooks/inventory/compose.yml).
RUN python -m venv /opt/kafkaops/venv \
 && /opt/kafkaops/venv/bin/pip install --no-cache-dir /tmp/wheels/kafkaops-*.whl \
 && /opt/kafkaops/venv/bin/pip install --no-cache-dir --no-deps apache-airflow-providers-apache-spark==6.3.4 \
 && rm -rf /tmp/wheels \
 && cd / \
 && ln -s "$(/opt/kafkaops/venv/bin/python -c 'import kafkaops.resources as r; print(r.dags_folder())')" /opt/kafkaops/dags \
 && ln -s "$(/opt/kafkaops/venv/bin/python -c 'import kafkaops.resources as r; print(r.playbooks())')" /opt/kafkaops/playbooks \
 && test -f /opt/kafkaops/dags/kafka_scale_out.py \
 && test -f /opt/kafkaops/playbooks/cluster_up.yml
ENV PATH=/opt/kafkaops/venv/bin:$PATH \
    AIRFLOW_HOME=/opt/airflow \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/kafkaops/dags \
    KAFKAOPS_JARS=/opt/kafkaops/jars \
    KAFKAOPS_CACHE=/opt/kafkaops/cache
USER kafkaops
WORKDIR /opt/airflow
CMD ["airflow", "version"]

# -- a host for a new broker: the runtime (same Python, JRE and jars at the same paths, which the
# kafka_broker role's variables name) plus sshd, through which the worker's Ansible runs the role.
# Host keys are made when the container starts, so no two hosts share one.
FROM runtime AS broker-host
USER root
RUN apt-get update \
 && apt-get install -y --no-install-recommends openssh-server \
 && rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_* \
 && mkdir -p /run/sshd \
 && printf '%s\n' 'AuthorizedKeysFile /opt/kafkaops/authorized/authorized_keys' 'PasswordAuthentication no' \
      'KbdInteractiveAuthentication no' 'PermitRootLogin no' 'AllowUsers kafkaops' \
      > /etc/ssh/sshd_config.d/kafkaops.conf
EXPOSE 22 9092
CMD ["sh", "-c", "ssh-keygen -A && exec /usr/sbin/sshd -D -e"]
