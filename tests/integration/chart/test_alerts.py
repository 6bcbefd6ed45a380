"""The chart's alerts, evaluated by Prometheus's own rule engine (`promtool test rules`) over
series that should fire each alert and series that should not: an alert that could never fire,
or that fires on a healthy app, fails here."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from ...unit.chart import chartkit

pytestmark = pytest.mark.helm

APP = 'namespace="shop",app="orders"'
OTHER = 'namespace="shop",app="calm"'
PART = 'namespace="shop",app="orders",topic="in",partition="0"'
APP_LABELS = {"namespace": "shop", "app": "orders"}
RULE_VALUES = {"prometheusRule": {"enabled": True}}


def _cases() -> list[dict[str, Any]]:
    """promtool test cases: input series (1m apart), and what is firing at given times."""
    minute = "1m"
    return [
        {  # the backlog grows for 20 min while the oldest record is 10 min old; a calm app stays quiet
            "interval": minute,
            "input_series": [
                {"series": f"floe_consumergroup_max_lag_seconds{{{APP}}}", "values": "600+0x30"},
                {"series": f"floe_consumergroup_sum_lag{{{APP}}}", "values": "1000+100x30"},
                {"series": f"floe_consumergroup_max_lag_seconds{{{OTHER}}}", "values": "600+0x30"},
                {"series": f"floe_consumergroup_sum_lag{{{OTHER}}}", "values": "5000-100x30"},
            ],
            "alert_rule_test": [
                {"eval_time": "5m", "alertname": "FloeLagGrowing", "exp_alerts": []},
                {"eval_time": "25m", "alertname": "FloeLagGrowing", "exp_alerts": [APP_LABELS]},
            ],
        },
        {  # a partition stalls for 10 min
            "interval": minute,
            "input_series": [
                {"series": f'floe_consumergroup_partition_status{{{PART},status="STALL"}}', "values": "0x5 1x10"},
                {"series": f'floe_consumergroup_partition_status{{{PART},status="OK"}}', "values": "1x5 0x10"},
            ],
            "alert_rule_test": [
                {"eval_time": "8m", "alertname": "FloePartitionStalled", "exp_alerts": []},
                {
                    "eval_time": "14m",
                    "alertname": "FloePartitionStalled",
                    "exp_alerts": [{**APP_LABELS, "topic": "in", "partition": "0"}],
                },
            ],
        },
        {  # Degraded for 15 min; not-Ready replicas for 20 min; another app healthy
            "interval": minute,
            "input_series": [
                {"series": f'floe_app_condition{{{APP},condition="Degraded"}}', "values": "0x4 1x20"},
                {"series": f'floe_app_condition{{{OTHER},condition="Degraded"}}', "values": "0x24"},
                {"series": f"floe_app_replicas{{{APP}}}", "values": "3x24"},
                {"series": f"floe_app_ready_replicas{{{APP}}}", "values": "3x2 1x22"},
                {"series": f"floe_app_replicas{{{OTHER}}}", "values": "2x24"},
                {"series": f"floe_app_ready_replicas{{{OTHER}}}", "values": "2x24"},
                {"series": f"floe_lag_metrics_stale{{{APP}}}", "values": "0x24"},
            ],
            "alert_rule_test": [
                {"eval_time": "10m", "alertname": "FloeAppDegraded", "exp_alerts": []},
                {"eval_time": "16m", "alertname": "FloeAppDegraded", "exp_alerts": [APP_LABELS]},
                {"eval_time": "10m", "alertname": "FloeReplicasNotReady", "exp_alerts": []},
                {"eval_time": "20m", "alertname": "FloeReplicasNotReady", "exp_alerts": [APP_LABELS]},
                {"eval_time": "20m", "alertname": "FloeLagMetricsStale", "exp_alerts": []},
            ],
        },
        {  # the lag cannot be measured for 15 min
            "interval": minute,
            "input_series": [{"series": f"floe_lag_metrics_stale{{{APP}}}", "values": "1x15"}],
            "alert_rule_test": [{"eval_time": "12m", "alertname": "FloeLagMetricsStale", "exp_alerts": [APP_LABELS]}],
        },
        {  # the operator is scraped, then not at all
            "interval": minute,
            "input_series": [{"series": 'up{job="floe"}', "values": "1x5 0x10"}],
            "alert_rule_test": [
                {"eval_time": "4m", "alertname": "FloeOperatorDown", "exp_alerts": []},
                {"eval_time": "14m", "alertname": "FloeOperatorDown", "exp_alerts": [{}]},
            ],
        },
    ]


def test_each_alert_fires_on_its_fault_and_not_on_a_healthy_app(
    helm: str, stack_env: dict[str, str], tmp_path: Path
) -> None:
    docs = chartkit.helm_template(helm, RULE_VALUES, tmp_path)
    rule = chartkit.one(docs, "PrometheusRule")
    severities = {r["alert"]: r["labels"]["severity"] for g in rule["spec"]["groups"] for r in g["rules"]}
    # when the alerts fire is under test here; their texts are the render test's
    groups = [
        {**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]}
        for g in rule["spec"]["groups"]
    ]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    tests = []
    for case in _cases():
        for check in case["alert_rule_test"]:
            name = check["alertname"]
            check["exp_alerts"] = [
                {"exp_labels": {**labels, "severity": severities[name]}} for labels in check["exp_alerts"]
            ]
        tests.append(case)
    fired = {c["alertname"] for t in tests for c in t["alert_rule_test"] if c["exp_alerts"]}
    assert fired == set(severities), "every alert is shown to fire"
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "tests": tests}))
    proc = subprocess.run(
        [stack_env["FLOE_PROMTOOL"], "test", "rules", "tests.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
