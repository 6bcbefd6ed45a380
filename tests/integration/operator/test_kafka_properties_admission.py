"""spec.kafka.properties at admission: the real API server refuses a key Floe owns or a security
setting with the CEL rules generated from `floe_jobs.kafkaprops`, naming the key and what to use
instead, and accepts client properties Floe leaves to the app."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from .kube import Kubectl
from .test_bad_specs import GOOD

pytestmark = pytest.mark.k8s


def _app(namespace: str, properties: dict[str, str]) -> str:
    obj: dict[str, Any] = copy.deepcopy(GOOD)
    obj["metadata"] = {"name": "props", "namespace": namespace}
    obj["spec"]["kafka"]["properties"] = properties
    return yaml.safe_dump(obj)


@pytest.mark.parametrize(
    ("properties", "expected"),
    [
        (
            {"fetch.max.bytes": "1048576", "isolation.level": "read_uncommitted"},
            "spec.kafka.properties.isolation.level is owned by Floe: Floe reads committed records only",
        ),
        (
            {"Group.Id": "other"},
            "spec.kafka.properties.Group.Id is owned by Floe: set spec.kafka.consumerGroup",
        ),
        (
            {"sasl.password": "hunter2"},
            "spec.kafka.properties.sasl.password may not be set: set spec.kafka.security.sasl",
        ),
        (
            {"ssl.ca.location": "/etc/ssl/ca.pem"},
            "spec.kafka.properties.ssl.ca.location may not be set: set spec.kafka.security.tls",
        ),
        (
            {"enable.ssl.certificate.verification": "false"},
            "spec.kafka.properties.enable.ssl.certificate.verification may not be set: "
            "set spec.kafka.security.tls (verifyHostname)",
        ),
    ],
    ids=["isolation-level", "group-id-any-case", "sasl-password", "ssl-location", "tls-verification-off"],
)
def test_a_denied_property_is_refused_naming_the_key(
    kube: Kubectl, namespace: str, properties: dict[str, str], expected: str
) -> None:
    proc = kube.run("create", "--dry-run=server", "-f", "-", stdin=_app(namespace, properties), check=False)
    assert proc.returncode != 0, f"accepted: {properties}"
    assert expected in proc.stderr, proc.stderr


def test_client_properties_floe_leaves_to_the_app_are_accepted(kube: Kubectl, namespace: str) -> None:
    properties = {
        "fetch.max.bytes": "52428800",
        "compression.type": "zstd",
        "socket.keepalive.enable": "true",
        "client.rack": "eu-west-1a",
        "client.id": "team-a",
    }
    proc = kube.run("create", "--dry-run=server", "-o", "yaml", "-f", "-", stdin=_app(namespace, properties))
    assert yaml.safe_load(proc.stdout)["spec"]["kafka"]["properties"] == properties
