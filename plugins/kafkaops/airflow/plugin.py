"""The kafkaops Airflow plugin: the operation-record pages, a tab on every DAG run."""
from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin


class KafkaOpsPlugin(AirflowPlugin):
    name = "kafkaops"

    @property
    def fastapi_apps(self) -> list[dict]:  # type: ignore[override]
        from kafkaops.airflow.ui import app

        return [{"app": app, "url_prefix": "/kafkaops", "name": "kafkaops operation records"}]

    external_views = [
        {"name": "Operation record", "href": "/kafkaops/records/{DAG_ID}/{RUN_ID}", "destination": "dag_run",
         "url_route": "kafkaops_record"},
        {"name": "kafkaops records", "href": "/kafkaops/records", "destination": "nav", "category": "browse",
         "url_route": "kafkaops_records"},
    ]
