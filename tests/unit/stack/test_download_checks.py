"""The stack's Go builds refuse settings that would let a module in unchecked by the Go checksum
database (the stack's go.mod wrappers have no committed go.sum, so the database is the check)."""

from __future__ import annotations

import pytest
from floe_stack.artifacts import go_checksum_problem

DEFAULT = {"GOSUMDB": "sum.golang.org", "GONOSUMDB": "", "GOPRIVATE": "", "GOINSECURE": ""}


def test_the_default_go_settings_check_every_module() -> None:
    assert go_checksum_problem(DEFAULT) is None


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("GOSUMDB", "off", "GOSUMDB is off"),
        ("GONOSUMDB", "k8s.io", "GONOSUMDB=k8s.io exempts"),
        ("GOPRIVATE", "github.com/*", "GOPRIVATE=github.com/* exempts"),
        ("GOINSECURE", "*", "GOINSECURE=* exempts"),
    ],
)
def test_a_setting_that_skips_the_checksum_database_is_refused_by_name(name: str, value: str, says: str) -> None:
    problem = go_checksum_problem({**DEFAULT, name: value})
    assert problem is not None and says in problem
