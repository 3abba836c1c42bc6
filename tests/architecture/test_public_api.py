"""``bench_gate`` re-exports its public API, and its errors are one tree."""

from __future__ import annotations

import bench_gate
from bench_gate import GatewayError, Refused, ScpiError, ScpiSyntaxError


def test_every_public_name_resolves() -> None:
    assert sorted(bench_gate.__all__) == bench_gate.__all__
    for name in bench_gate.__all__:
        assert getattr(bench_gate, name) is not None, name
    assert set(dir(bench_gate)) >= set(bench_gate.__all__)


def test_one_exceptions_tree() -> None:
    errors = [getattr(bench_gate, n) for n in bench_gate.__all__
              if isinstance(getattr(bench_gate, n), type)
              and issubclass(getattr(bench_gate, n), Exception)
              and n not in ("ApiError", "ProposalChangedError")]  # the client's, over HTTP
    assert errors and all(issubclass(e, GatewayError) for e in errors)
    exc = ScpiSyntaxError(-113, "no such header", "FOO 1", 0)
    assert isinstance(exc, Refused) and exc.code == -113
    assert exc.message == "Undefined header; no such header at column 1"
    assert str(exc) == '-113,"Undefined header; no such header at column 1"'
    assert issubclass(ScpiError, Refused)
