"""SCPI for the gateway: parse a program message, classify each unit by its profile's
effect, and render the canonical SCPI that is the only thing ever sent to an instrument.

>>> from bench_gate.scpi import is_read_only
>>> is_read_only("MEAS:VOLT? (@1)", profile="e36312a")
True
>>> is_read_only("VOLT? (@1);:OUTP ON,(@1)", profile="e36312a")
False
"""

from ._classify import classify, classify_uncached, is_read_only
from ._errors import ERROR_NAMES, ScpiError, ScpiExecutionError, ScpiSyntaxError
from ._examples import PASSING, Example, command_examples, query_examples, sample_value
from ._excitation import (
    ExcitationSpec,
    Excites,
    applied,
    as_exciting,
    excitation_now,
    measures_now,
    measuring,
    unanswered,
)
from ._lexer import (
    MAX_MESSAGE_LENGTH,
    Block,
    ChannelList,
    CharData,
    Data,
    Expression,
    Number,
    QuotedString,
    RawUnit,
    lex,
)
from ._patterns import Node, canonical_header, keyword_short, parse_pattern, pattern_spellings
from ._profile import Profile, available_profiles, get_profile
from ._schema import (
    CommandSpec,
    Effect,
    FieldSpec,
    FormSpec,
    MeterSafeSpec,
    ParamSpec,
    ProfileError,
    SafeActionSpec,
)
from ._timing import Timing
from .units import Classification, Unit, Value, format_number, render_value

__all__ = [
    "ERROR_NAMES",
    "MAX_MESSAGE_LENGTH",
    "PASSING",
    "Block",
    "ChannelList",
    "CharData",
    "Classification",
    "CommandSpec",
    "Data",
    "Effect",
    "Example",
    "ExcitationSpec",
    "Excites",
    "Expression",
    "FieldSpec",
    "FormSpec",
    "MeterSafeSpec",
    "Node",
    "Number",
    "ParamSpec",
    "Profile",
    "ProfileError",
    "QuotedString",
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
    "classify_uncached",
    "command_examples",
    "excitation_now",
    "format_number",
    "get_profile",
    "is_read_only",
    "keyword_short",
    "lex",
    "measures_now",
    "measuring",
    "parse_pattern",
    "pattern_spellings",
    "query_examples",
    "render_value",
    "sample_value",
    "unanswered",
]
