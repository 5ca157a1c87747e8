# kafkaops — `make demo` and `make test` do all the set-up they need.
SHELL := /bin/bash
# The Python the venv is made from: the distribution's python3.11 first when it can make a venv, then the
# first python3.11 (or python3) on the PATH; PYTHON=... chooses another. Measured on this project's 2-core
# machine, pyenv's default build (a shared libpython, no PGO or LTO) spent 25-30 % more CPU than Debian's
# on what the suite runs most: Ansible's module processes, Airflow's command-line processes, imports
# (benchmarks/RESULTS.md, "The interpreter").
ifeq ($(origin PYTHON),undefined)
PYTHON := $(shell for p in /usr/bin/python3.11 python3.11 python3; do \
  if command -v $$p >/dev/null && $$p -c 'import ensurepip, venv' 2>/dev/null; then command -v $$p; break; fi; done)
endif
VENV := .venv
PY := $(VENV)/bin/python
VENV_STAMP := $(VENV)/.kafkaops-installed
JARS_DIR := $(CURDIR)/.cache/jars
# kafkaops finds its caches through settings, not the checkout (kafkaops/platform/paths.py): make's
# targets keep the cluster, the Airflow home and the demo's log in .cache/ and use the jars setup fills.
export KAFKAOPS_CACHE := $(or $(KAFKAOPS_CACHE),$(CURDIR)/.cache)
export KAFKAOPS_JARS := $(JARS_DIR)
JARS_STAMP := $(JARS_DIR)/.stamp
JVM_ARCHIVES := $(JARS_DIR)/cds/.stamp
PYTEST_ARGS ?=
# pytest-xdist: TEST_WORKERS processes, each test group (tests sharing a cluster or another expensive fixture,
# tests/sessions.py) on one worker, the heaviest groups first; a worker that crashes is reported and replaced,
# the others go on. xdist gives the crashed test's unit to the replacement, crashed test first, so a test that
# always crashes would crash every replacement: after 2 replacements the run stops. TEST_WORKERS=0 runs in
# this process, one test after another. 3 workers: measured on 2 cores, one process leaves half the CPU idle
# (brokers, DAG runs and Spark wait), 3 keep it 93 % busy, and 4 took 3.4 minutes longer than 3 (more work
# for the same tests: everything waits longer on the two cores; benchmarks/RESULTS.md).
TEST_WORKERS ?= 3
XDIST := $(if $(filter 0,$(TEST_WORKERS)),-p no:xdist,-n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --max-worker-restart 2)
# Airflow's Spark provider (the Spark jobs' SparkSubmitHook), without its dependencies: they are pyspark-client,
# whose files overlap pyspark 4.2.0's, and the Spark Connect client's grpcio-status, which kafkaops does not use.
SPARK_PROVIDER := apache-airflow-providers-apache-spark==6.3.4

.PHONY: setup postgres redis sshd prometheus browser e2e demo test all-pytest test-quick quick-pytest test-java lint lint-imports test-unit test-integration cluster-up cluster-down airflow bench clean help

help:
	@echo "make demo          set up, start the local 3-broker cluster, run the main job, stop it"
	@echo "make test          set up, lint (ruff, mypy, lint-imports) and run every test (Java, unit, real-cluster integration), TEST_WORKERS in parallel"
	@echo "make test-quick    the fast inner loop (a few minutes): lint, the Java unit tests, the Python unit tests and the DAG integrity tests"
	@echo "make lint          ruff, mypy and the layer contracts (lint-imports), as pyproject.toml configures them"
	@echo "make setup         .venv/ with pinned packages, and the Kafka/Spark jars from Maven Central"
	@echo "make postgres      the PostgreSQL server binaries the store tests start a throw-away server from (apt-get, as root)"
	@echo "make redis         Debian's redis-server, Celery's broker in the deployment tests (apt-get, as root)"
	@echo "make sshd          Debian's openssh-server, the remote hosts of the role's SSH tests (apt-get, as root)"
	@echo "make prometheus    Debian's prometheus server and node exporter, which the Prometheus and deployment tests start on loopback (apt-get, as root)"
	@echo "make e2e          only the deployment tests (tests/deployment: Postgres, Redis, Celery, separate Airflow components, the browser)"
	@echo "make browser       Debian's chromium and chromium-driver for the browser test (apt-get, as root)"
	@echo "make cluster-up    start the local cluster (127.0.0.1:19092,19094,19096) and leave it running"
	@echo "make cluster-down  stop it"
	@echo "make airflow       airflow standalone on 127.0.0.1:8080 with the kafkaops DAGs and plugin (local cluster as kafka_default)"
	@echo "make bench         run the benchmarks; they append to benchmarks/RESULTS.md"

setup: $(VENV_STAMP) $(JARS_STAMP)

$(VENV_STAMP): pyproject.toml
	@test -n "$(PYTHON)" || { echo "error: python3.11 not found; install Python 3.11 (e.g. apt-get install python3.11 python3.11-venv)"; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' || { echo "error: kafkaops needs Python 3.11, $(PYTHON) is $$($(PYTHON) --version); set PYTHON=/path/to/python3.11"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip wheel
	$(PY) -m pip install --quiet --no-compile -e '.[test]'
	$(PY) -m pip install --quiet --no-compile --no-deps $(SPARK_PROVIDER)
	@# pip compiles each installed module on one core (30 of its 52 s of CPU, measured): compileall uses both
	@# (-qq: a few packages ship files for other Pythons, which pip's own compile skips silently too)
	$(PY) -m compileall -qq -j 0 $$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') || true
	$(PY) -c 'import airflow.providers.apache.spark.hooks.spark_submit'
	touch $@

$(JARS_STAMP): jvm/pom.xml jvm/broker/pom.xml jvm/broker-3.9/pom.xml jvm/tools/pom.xml jvm/tiered-storage/pom.xml jvm/jmx-exporter/pom.xml jvm/spark/pom.xml jvm/spark-udf/pom.xml $(wildcard jvm/spark-udf/src/main/java/io/kafkaops/spark/*.java) $(wildcard jvm/spark-udf/src/test/java/io/kafkaops/spark/*.java) jvm/spark-udf/src/test/resources/key_rules_vectors.json \
  jvm/streams-app/pom.xml $(wildcard jvm/streams-app/src/main/java/io/kafkaops/streams/*.java) $(wildcard jvm/streams-app/src/test/java/io/kafkaops/streams/*.java) $(wildcard jvm/streams-app/src/*/resources/*)
	@command -v java >/dev/null || { echo "error: java not found; install a JDK 17+ (e.g. apt-get install openjdk-17-jdk-headless)"; exit 1; }
	@command -v mvn >/dev/null || { echo "error: mvn not found; install Maven 3.8+ (e.g. apt-get install maven)"; exit 1; }
	@java -version 2>&1 | awk -F'"' '/version/ {split($$2, v, "."); if (v[1] < 17) {print "error: Kafka 4 needs Java 17+, found " $$2; exit 1}}'
	rm -rf $(JARS_DIR)/broker $(JARS_DIR)/broker-3.9 $(JARS_DIR)/tools $(JARS_DIR)/tiered-storage $(JARS_DIR)/jmx-exporter $(JARS_DIR)/spark $(JARS_DIR)/streams-app
	mvn -q -B -f jvm/pom.xml package -Djars.dir=$(JARS_DIR)
	touch $@

# The store tests start a throw-away PostgreSQL server (kafkaops/testing/postgres.py) from initdb/pg_ctl on PATH or
# in /usr/lib/postgresql/*/bin. Installed without Debian's "main" cluster: nothing starts a server here.
postgres:
	@if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
	  if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	    echo "error: initdb not found; the store tests need the PostgreSQL server: install it (e.g. sudo apt-get install postgresql), or run make test as root on Debian/Ubuntu"; exit 1; \
	  fi; \
	  mkdir -p /etc/postgresql-common/createcluster.d && \
	  echo "create_main_cluster = off" > /etc/postgresql-common/createcluster.d/kafkaops-no-main-cluster.conf && \
	  export DEBIAN_FRONTEND=noninteractive && \
	  { apt-get install -y --no-install-recommends postgresql || \
	    { apt-get update && apt-get install -y --no-install-recommends postgresql; }; }; \
	fi

# The deployment tests (tests/deployment) start Debian's redis-server as Celery's broker; none runs as a service.
redis:
	@if ! command -v redis-server >/dev/null; then \
	  if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	    echo "error: redis-server not found; the deployment tests need it: install it (e.g. sudo apt-get install redis-server), or run make test as root on Debian/Ubuntu"; exit 1; \
	  fi; \
	  export DEBIAN_FRONTEND=noninteractive && \
	  { apt-get install -y --no-install-recommends redis-server || \
	    { apt-get update && apt-get install -y --no-install-recommends redis-server; }; }; \
	fi

# The remote-host tests (tests/integration/platform/test_remote_hosts.py) run Debian's sshd with a config of
# their own (tests/sshd.py) as one Unix user per "host"; none runs as a service.
sshd:
	@if [ ! -x /usr/sbin/sshd ]; then \
	  if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	    echo "note: sshd not found; the remote-host tests skip: install it (e.g. sudo apt-get install openssh-server) and run them as root"; \
	  else \
	    export DEBIAN_FRONTEND=noninteractive && \
	    { apt-get install -y --no-install-recommends openssh-server || \
	      { apt-get update && apt-get install -y --no-install-recommends openssh-server; }; }; \
	  fi; \
	fi

# The Prometheus tests (tests/integration/platform/test_prometheus.py) and the deployment tests start Debian's
# prometheus and prometheus-node-exporter on loopback with settings of their own (kafkaops/testing/prometheus.py);
# Debian's services are neither needed nor started.
prometheus:
	@if ! command -v prometheus >/dev/null || [ ! -x /usr/bin/prometheus-node-exporter ]; then \
	  if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	    echo "error: prometheus or prometheus-node-exporter not found; the Prometheus tests need both: install them (e.g. sudo apt-get install prometheus prometheus-node-exporter), or run make test as root on Debian/Ubuntu"; exit 1; \
	  fi; \
	  export DEBIAN_FRONTEND=noninteractive && \
	  { apt-get install -y --no-install-recommends prometheus prometheus-node-exporter || \
	    { apt-get update && apt-get install -y --no-install-recommends prometheus prometheus-node-exporter; }; }; \
	fi

# The browser test (tests/deployment) drives Debian's chromium through its chromedriver with Selenium;
# nothing downloads a browser. Without them (and not root on Debian) it says what to install and skips.
browser:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  if [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then \
	    echo "note: chromium or chromedriver not found; the browser test skips: install them (e.g. sudo apt-get install chromium chromium-driver)"; \
	  else \
	    export DEBIAN_FRONTEND=noninteractive && \
	    { apt-get install -y --no-install-recommends chromium chromium-driver || \
	      { apt-get update && apt-get install -y --no-install-recommends chromium chromium-driver; }; }; \
	  fi; \
	fi

demo: setup
	$(PY) -m kafkaops demo

# Lint (a cold mypy takes 2-3 minutes of one core) runs beside the tests, not before them; make test fails
# when either does.
# The venv and the jars are made side by side (pip works on one core, Maven beside it).
test:
	@$(MAKE) --no-print-directory -j2 --output-sync=target setup
	@$(MAKE) --no-print-directory postgres redis sshd prometheus browser
	@$(MAKE) --no-print-directory -j2 lint all-pytest

all-pytest: setup $(JVM_ARCHIVES)
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

# Class-data archives of a broker's and a Spark driver's JVM, made once per jar cache and venv: the tests'
# JVMs start on a third of the CPU (kafkaops/testing/jvm.py). pytest runs without them too, only slower.
$(JVM_ARCHIVES): $(VENV_STAMP) $(JARS_STAMP)
	rm -rf $(JARS_DIR)/cds
	$(PY) -m kafkaops.testing.jvm
	touch $@

# What a change is checked with before make test: no cluster starts. The three parts run side by side.
test-quick: setup
	@start=$$(date +%s); $(MAKE) --no-print-directory -j3 --output-sync=target lint test-java quick-pytest; \
	  status=$$?; echo "test-quick: $$(( $$(date +%s) - start )) s"; exit $$status

quick-pytest: setup
	$(PY) -m pytest $(XDIST) tests/unit tests/dags/test_dag_integrity.py $(PYTEST_ARGS)

# The JUnit tests of the Spark UDF jar and of the tests' Kafka Streams app (make setup's package runs them too,
# when it builds the jars).
test-java:
	@command -v mvn >/dev/null || { echo "error: mvn not found; install Maven 3.8+ (e.g. apt-get install maven)"; exit 1; }
	mvn -q -B -f jvm/pom.xml test -pl spark-udf,streams-app -Djars.dir=$(JARS_DIR)
	@cat jvm/spark-udf/target/surefire-reports/*.txt jvm/streams-app/target/surefire-reports/*.txt | grep -h "Tests run" | sed 's/^/java: /'

lint: lint-imports
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

e2e: setup postgres redis prometheus browser
	$(PY) -m pytest -m deployment tests/deployment $(PYTEST_ARGS)

# The layer contracts of pyproject.toml's [tool.importlinter] (docs/architecture.md).
lint-imports: setup
	PYTHONPATH=plugins:. $(VENV)/bin/lint-imports --no-logo --no-cache

test-unit: setup
	$(PY) -m pytest $(XDIST) tests/unit $(PYTEST_ARGS)

test-integration: setup postgres prometheus
	$(PY) -m pytest $(XDIST) tests/integration $(PYTEST_ARGS)

cluster-up: setup
	$(PY) -m kafkaops cluster up

cluster-down: setup
	$(PY) -m kafkaops cluster down

# The plugin comes with the package (its airflow.plugins entry point): no plugins folder.
AIRFLOW_ENV = PATH=$(CURDIR)/$(VENV)/bin:$$PATH AIRFLOW_HOME=$(KAFKAOPS_CACHE)/airflow AIRFLOW__CORE__DAGS_FOLDER=$(CURDIR)/dags \
	AIRFLOW__CORE__LOAD_EXAMPLES=False \
	AIRFLOW__API__HOST=127.0.0.1 AIRFLOW__API__PORT=8080 \
	AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT=30 AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT=120 \
	AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT=180 \
	AIRFLOW_CONN_KAFKA_DEFAULT='{"conn_type": "kafka", "extra": {"bootstrap.servers": "127.0.0.1:19092,127.0.0.1:19094,127.0.0.1:19096"}}'

airflow: setup
	$(AIRFLOW_ENV) $(VENV)/bin/airflow standalone

bench: setup
	$(PY) -m benchmarks

clean:
	-$(PY) -m kafkaops cluster down --purge
	rm -rf $(KAFKAOPS_CACHE)/cluster .pytest_cache
