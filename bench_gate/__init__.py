"""bench-gate: an approval gateway in front of SCPI lab instruments. Queries pass, writes
wait for a person.

The public API, by what it is for::

    from bench_gate import Gateway, load_config, open_store   # run the gateway in-process
    from bench_gate import Client                              # talk to a running server
    from bench_gate import Refused, GatewayError               # the one exceptions tree

Everything else (``bench_gate.api``, ``bench_gate.intake``...) is implementation. The names
are loaded on first use, so ``import bench_gate.client`` (and the CLI) stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Deliberate declarative repetition: the same names as _EXPORTS (and as the modules'
# own import lists), imported here only for type checkers; at run time __getattr__ loads
# each name on first use.
if TYPE_CHECKING:
    from .client import ApiError, Client, ProposalChangedError
    from .config import BenchConfig, load_config
    from .errors import (
        BenchTaken,
        GatewayError,
        IdempotencyKeyReused,
        InstrumentError,
        InvalidInput,
        NotFound,
        PermissionDenied,
        ProposalChanged,
        QuotaExceeded,
        Refused,
        StoreError,
        TransitionError,
        WrongInstrument,
    )
    from .gateway import Gateway, GrantResult
    from .intake import SubmitResult
    from .models import (
        Action,
        Approval,
        ApprovalKind,
        Event,
        EventType,
        Principal,
        Receipt,
        Role,
        Run,
        RunKind,
        RunStatus,
        Snapshot,
        Status,
        TakeoverRequest,
    )
    from .plans import Plan, PlanScope, PlanStatus
    from .questions import QuestionSet, QuestionStatus
    from .scpi import ScpiError, ScpiExecutionError, ScpiSyntaxError
    from .states import Outcome
    from .store import Store, open_store

#: Each public name and the module that defines it.
_EXPORTS: dict[str, str] = {
    # the gateway core and what it answers
    "Gateway": "gateway", "GrantResult": "gateway", "SubmitResult": "intake",
    "Outcome": "states", "BenchConfig": "config", "load_config": "config",
    "Store": "store", "open_store": "store",
    # the models
    "Action": "models", "Approval": "models", "ApprovalKind": "models", "Event": "models",
    "EventType": "models", "Principal": "models", "Receipt": "models", "Role": "models",
    "Run": "models", "RunKind": "models", "RunStatus": "models", "Snapshot": "models",
    "Status": "models", "TakeoverRequest": "models",
    "Plan": "plans", "PlanScope": "plans", "PlanStatus": "plans",
    "QuestionSet": "questions", "QuestionStatus": "questions",
    # the errors
    "GatewayError": "errors", "NotFound": "errors", "InvalidInput": "errors",
    "IdempotencyKeyReused": "errors", "Refused": "errors", "PermissionDenied": "errors",
    "QuotaExceeded": "errors", "TransitionError": "errors", "ProposalChanged": "errors",
    "InstrumentError": "errors", "BenchTaken": "errors", "StoreError": "errors",
    "WrongInstrument": "errors",
    "ScpiError": "scpi", "ScpiSyntaxError": "scpi", "ScpiExecutionError": "scpi",
    # the client of a running server
    "Client": "client", "ApiError": "client", "ProposalChangedError": "client",
}

__all__ = [
    "Action",
    "ApiError",
    "Approval",
    "ApprovalKind",
    "BenchConfig",
    "BenchTaken",
    "Client",
    "Event",
    "EventType",
    "Gateway",
    "GatewayError",
    "GrantResult",
    "IdempotencyKeyReused",
    "InstrumentError",
    "InvalidInput",
    "NotFound",
    "Outcome",
    "PermissionDenied",
    "Plan",
    "PlanScope",
    "PlanStatus",
    "Principal",
    "ProposalChanged",
    "ProposalChangedError",
    "QuestionSet",
    "QuestionStatus",
    "QuotaExceeded",
    "Receipt",
    "Refused",
    "Role",
    "Run",
    "RunKind",
    "RunStatus",
    "ScpiError",
    "ScpiExecutionError",
    "ScpiSyntaxError",
    "Snapshot",
    "Status",
    "Store",
    "StoreError",
    "SubmitResult",
    "TakeoverRequest",
    "TransitionError",
    "WrongInstrument",
    "load_config",
    "open_store",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'bench_gate' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
