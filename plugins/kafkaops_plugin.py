"""Airflow loads plugins from every .py file in plugins/; this is kafkaops' only entry point
(plugins/.airflowignore keeps Airflow from importing the kafkaops package file by file)."""
from kafkaops.airflow.plugin import KafkaOpsPlugin

__all__ = ["KafkaOpsPlugin"]
