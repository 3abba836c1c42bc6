"""A short schemathesis run against /openapi.json: no input makes the server answer 500."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from ..._http_bench import Bench, start_bench


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    yield from start_bench(tmp_path_factory.mktemp("fuzz"))


@pytest.fixture(scope="module")
def api_schema(bench: Bench) -> Any:
    schema = schemathesis.openapi.from_url(bench.url + "/openapi.json")
    return schema.exclude(path="/v1/events")  # an endless stream


def test_no_server_errors(api_schema: Any, bench: Bench) -> None:
    """Every operation, a few generated cases each (schemathesis' pytest plugin does not
    load under pytest 9, so the strategies are driven by hypothesis directly)."""
    headers = {"Authorization": f"Bearer {bench.tokens['ada']}"}
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) > 15
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=8, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        def check(case: Any) -> None:
            response = case.call(headers=headers, timeout=70)
            case.validate_response(response, checks=[not_a_server_error])

        check()
