"""The Grafana dashboard, Prometheus, collector and the compose profile "observability"
agree with the metrics the code exposes and with each other (no Docker needed)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("prometheus_client")

from agentworker.ops import metrics  # noqa: E402
from agentworker.settings import Settings  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "deploy" / "grafana" / "dashboards"
PROVISIONING = ROOT / "deploy" / "grafana" / "provisioning"
OBSERVABILITY = ("prometheus", "grafana", "otel-collector", "jaeger")
METRIC = re.compile(r"\bagentworker_[a-z_]+")
SUFFIXES = ("_bucket", "_count", "_sum", "_total")


def exposed() -> set[str]:
    """Every sample name the registry can produce (counters with _total, histograms' parts)."""
    m = metrics.metrics()
    assert m is not None
    names = {"agentworker_turns"}
    for metric in vars(m).values():
        for family in metric.describe():
            if family.type == "counter":
                names.add(family.name + "_total")
            elif family.type == "histogram":
                names.update(family.name + s for s in ("_bucket", "_count", "_sum"))
            else:
                names.add(family.name)
    return names


def compose() -> dict[str, Any]:
    loaded = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(loaded, dict)
    return loaded


def dashboards() -> list[dict[str, Any]]:
    found = [json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))]
    assert found, "no dashboard in deploy/grafana/dashboards"
    return found


def test_every_panel_queries_metrics_the_code_exposes() -> None:
    names = exposed()
    queried: set[str] = set()
    for dashboard in dashboards():
        assert dashboard["uid"] and dashboard["title"] and dashboard["panels"]
        ids = [p["id"] for p in dashboard["panels"]]
        assert len(ids) == len(set(ids)), "panel ids repeat"
        for panel in dashboard["panels"]:
            assert panel["targets"], panel["title"]
            assert panel["datasource"]["uid"] == "prometheus", panel["title"]
            for target in panel["targets"]:
                found = METRIC.findall(target["expr"])
                assert found, (panel["title"], target["expr"])
                unknown = set(found) - names
                assert not unknown, (panel["title"], sorted(unknown))
                queried.update(found)
    # and every metric family is on the dashboard
    families = {n.removesuffix(s) for n in names for s in SUFFIXES if n.endswith(s)} | {
        n for n in names if not n.endswith(SUFFIXES)
    }
    shown = {n.removesuffix(s) for n in queried for s in SUFFIXES if n.endswith(s)} | {
        n for n in queried if not n.endswith(SUFFIXES)
    }
    assert families <= shown, sorted(families - shown)


def test_panel_labels_are_labels_of_their_metrics() -> None:
    m = metrics.metrics()
    assert m is not None
    labels: dict[str, set[str]] = {"agentworker_turns": {"state"}}
    for metric in vars(m).values():
        for family in metric.describe():
            labels[family.name] = set(metric._labelnames)
    for dashboard in dashboards():
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                expr = target["expr"]
                groups = re.findall(r"by \(([^)]*)\)", expr)
                by = set().union(*({x.strip() for x in g.split(",")} for g in groups))
                by.discard("le")
                base = METRIC.findall(expr)[0]
                for suffix in SUFFIXES:
                    base = base.removesuffix(suffix)
                assert by <= labels[base], (panel["title"], sorted(by - labels[base]))


def test_grafana_provisioning_points_at_the_dashboards_and_prometheus() -> None:
    sources = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yml").read_text())
    by_uid = {s["uid"]: s for s in sources["datasources"]}
    assert by_uid["prometheus"]["url"] == "http://prometheus:9090"
    providers = yaml.safe_load((PROVISIONING / "dashboards" / "agentworker.yml").read_text())
    paths = {p["options"]["path"] for p in providers["providers"]}
    grafana = compose()["services"]["grafana"]
    mounts = dict(v.split(":")[:2] for v in grafana["volumes"] if v.startswith("./"))
    assert mounts["./deploy/grafana/dashboards"] in paths
    assert mounts["./deploy/grafana/provisioning"] == "/etc/grafana/provisioning"


def test_prometheus_scrapes_the_workers_metrics_port() -> None:
    config = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    env = compose()["x-agentworker-env"]
    port = int(env["AGENTWORKER_METRICS_PORT"])
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    [sd] = jobs["agentworker-workers"]["dns_sd_configs"]
    assert sd["names"] == ["worker"] and sd["port"] == port
    settings = Settings(metrics_port=port, metrics_addr=env["AGENTWORKER_METRICS_ADDR"])
    assert settings.metrics_addr == "0.0.0.0"  # reachable from the prometheus container


def test_traces_go_from_the_fleet_through_the_collector_to_jaeger() -> None:
    services = compose()["services"]
    env = compose()["x-agentworker-env"]
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
    assert env["OTEL_TRACES_EXPORTER"] == "${OTEL_TRACES_EXPORTER:-none}"  # off unless asked
    collector = yaml.safe_load((ROOT / "deploy" / "otel-collector.yml").read_text())
    assert collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(":4318")
    pipeline = collector["service"]["pipelines"]["traces"]
    for exporter in pipeline["exporters"]:
        host = collector["exporters"][exporter]["endpoint"].split(":")[0]
        assert host in services, exporter
    mounts = [v.split(":")[0] for v in services["otel-collector"]["volumes"]]
    assert mounts == ["./deploy/otel-collector.yml"]


def test_the_observability_profile_is_off_by_default_and_published_on_loopback() -> None:
    services = compose()["services"]
    for name in OBSERVABILITY:
        service = services[name]
        assert service["profiles"] == ["observability"], name
        assert service["restart"] == "unless-stopped", name
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), (name, source)
    assert "GRAFANA_PASSWORD:?" in services["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"]
