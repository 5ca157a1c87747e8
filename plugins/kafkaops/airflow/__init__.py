"""Airflow wiring over kafkaops: hooks, operators, triggers, the UI plugin. No logic of its own."""
