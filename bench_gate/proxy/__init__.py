"""The SCPI socket door: unmodified VISA clients and instrument drivers through the gate.

Point a resource string at the gateway (``TCPIP0::127.0.0.1::5025::SOCKET``) and change
nothing else: queries pass at once, writes wait for a person, in order, per connection.

>>> doors = await start_doors(gateway, tokens, config)      # doctest: +SKIP
>>> doors.addresses                                          # doctest: +SKIP
{'psu': ('127.0.0.1', 5025), 'dmm': ('127.0.0.1', 5026)}
"""

from ._door import Connection
from ._errors import ERROR_QUEUE_DEPTH, ErrorQueue
from ._gate import GateCommand, GateOp, is_gate_message, parse_gate
from ._listen import Doors, start_doors
from ._status import Role, StatusPlan, split_answers, status_plan
from ._status import answer as status_answer
from ._stream import EOF, MAX_QUEUED, Inbox

__all__ = [
    "EOF",
    "ERROR_QUEUE_DEPTH",
    "MAX_QUEUED",
    "Connection",
    "Doors",
    "ErrorQueue",
    "GateCommand",
    "GateOp",
    "Inbox",
    "Role",
    "StatusPlan",
    "is_gate_message",
    "parse_gate",
    "split_answers",
    "start_doors",
    "status_answer",
    "status_plan",
]
