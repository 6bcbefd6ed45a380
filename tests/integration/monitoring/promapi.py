"""A small client of the local stack's Prometheus HTTP API, as the monitoring tests read it."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from typing import Any


class PromAPI:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def _get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as r:
            body = json.load(r)
        assert body.get("status") == "success", f"{path} {params}: {body}"
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector (or scalar, as one sample) of ``expr`` now."""
        data = self._get("/api/v1/query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return list(data["result"])

    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts (pending and firing) with their labels and state."""
        return list(self._get("/api/v1/alerts")["alerts"])

    def declared(self, metric: str) -> bool:
        """Whether a scraped target declared ``metric`` (its HELP and TYPE), samples or not.
        A counter is declared under its name with or without ``_total``, by exposition format."""
        names = {metric, metric.removesuffix("_total")}
        return any(self._get("/api/v1/targets/metadata", metric=n) for n in names)

    def rule_groups(self) -> list[dict[str, Any]]:
        return list(self._get("/api/v1/rules")["groups"])

    def targets(self) -> list[dict[str, Any]]:
        return list(self._get("/api/v1/targets", state="active")["activeTargets"])

    def reload(self) -> None:
        req = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 200
