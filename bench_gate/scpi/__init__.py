"""SCPI for the gateway: parse a program message, classify each unit by its profile's
effect, and render the canonical SCPI that is the only thing ever sent to an instrument.

>>> from bench_gate.scpi import is_read_only
>>> is_read_only("MEAS:VOLT? (@1)", profile="e36312a")
True
>>> is_read_only("VOLT? (@1);:OUTP ON,(@1)", profile="e36312a")
False
"""

from ._classify import classify, is_read_only
from ._errors import ERROR_NAMES, ScpiError, ScpiExecutionError, ScpiSyntaxError
from ._excitation import (
    Excites,
    applied,
    as_exciting,
    excitation_now,
    measures_now,
    measuring,
    unanswered,
)
from ._lexer import MAX_MESSAGE_LENGTH, RawUnit, lex
from ._patterns import canonical_header
from ._profile import Profile, available_profiles, get_profile
from ._schema import (
    CommandSpec,
    Effect,
    FieldSpec,
    FormSpec,
    ParamSpec,
    ProfileError,
    SafeActionSpec,
)
from ._timing import Timing
from ._units import Classification, Unit, Value, format_number, render_value

__all__ = [
    "ERROR_NAMES",
    "MAX_MESSAGE_LENGTH",
    "Classification",
    "CommandSpec",
    "Effect",
    "Excites",
    "FieldSpec",
    "FormSpec",
    "ParamSpec",
    "Profile",
    "ProfileError",
    "RawUnit",
    "SafeActionSpec",
    "ScpiError",
    "ScpiExecutionError",
    "ScpiSyntaxError",
    "Timing",
    "Unit",
    "Value",
    "applied",
    "as_exciting",
    "available_profiles",
    "canonical_header",
    "classify",
    "excitation_now",
    "format_number",
    "get_profile",
    "is_read_only",
    "lex",
    "measures_now",
    "measuring",
    "render_value",
    "unanswered",
]
