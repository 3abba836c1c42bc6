"""Holes of standing plans found by the attack review (docs/plans.md), each proved on the
simulated bench."""

from __future__ import annotations

import pytest

from bench_gate.errors import InvalidInput
from bench_gate.gateway import Gateway
from bench_gate.models import Principal, Status
from tests.core.test_plans import SWEEP_SCOPE


@pytest.mark.parametrize("channels", [[1, 1], [1, 2, 1], [2] * 40])
async def test_a_scope_names_each_channel_once(gateway: Gateway, script: Principal,
                                               channels: list[int]) -> None:
    """``(@1,1,1,...)`` was a scope whose words a person reads as "psu CH1, CH1, CH1, ..."
    (thousands of times over the socket door's 8192 characters): a plan's scope is a few
    short lines, so a channel named twice is refused, naming the field."""
    run = gateway.create_run(script, "script")
    with pytest.raises(InvalidInput) as refused:
        await gateway.request_plan(run.id, {**SWEEP_SCOPE, "channels": channels})
    assert refused.value.field == "channels"
    assert "more than once" in refused.value.message
    assert gateway.list_plans(run.id) == []
    assert gateway.list_requests(status=Status.PENDING) == []
