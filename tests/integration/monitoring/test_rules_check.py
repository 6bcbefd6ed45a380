"""`make lint`'s check of the chart's alert rules: helm renders them, promtool judges them."""

from __future__ import annotations

import pytest
from floe_stack import alertrules

from .conftest import CHART

pytestmark = [pytest.mark.helm, pytest.mark.prometheus]


def test_the_charts_rules_pass_promtool_with_the_values_applied(helm: str, stack_env: dict[str, str]) -> None:
    rules = alertrules.render(helm, CHART, values={"stallFor": "7s"})
    by_name = {r["alert"]: r for g in rules["groups"] for r in g["rules"]}
    assert by_name["FloePartitionStalled"]["for"] == "7s"
    # every rule the chart renders, each alert once (promtool counts the rules it accepted)
    assert len(by_name) == sum(len(g["rules"]) for g in rules["groups"]) == 8
    assert f"SUCCESS: {len(by_name)} rules found" in alertrules.check(stack_env["FLOE_PROMTOOL"], rules)


def test_a_rule_promtool_cannot_parse_is_refused_naming_it(helm: str, stack_env: dict[str, str]) -> None:
    rules = alertrules.render(helm, CHART)
    rules["groups"][0]["rules"][0]["expr"] = "max by (app (floe_consumergroup_sum_lag"
    with pytest.raises(alertrules.RulesError, match=r"FloeLagGrowing.*could not parse"):
        alertrules.check(stack_env["FLOE_PROMTOOL"], rules)
