"""``is_gate_message``'s shortcut (a message with no G in it skips the search) gives the
search's own answer for every text: a GATE unit is never taken for an instrument command."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from bench_gate.proxy import is_gate_message

#: The rule as stated before the shortcut: a unit at the message's start or after a ';'
#: whose header is GATE (any case, an optional leading ':'), not a longer word.
_GATE_UNIT = re.compile(r"(?:^|;)[ \t]*:?[ \t]*GATE(?![A-Za-z0-9_])", re.IGNORECASE)

#: Pieces of messages that come near the GATE namespace, in any case, with the separators.
_PIECES = st.sampled_from(["GATE", "gate", "GaTe", "G", "g", "ATE", "GAT", ":", ";", " ",
                           "\t", "?", "VOLT", "*IDN?", "(@1)", "_", "1", "\x00", "\xff"])


@given(st.one_of(st.text(max_size=40), st.lists(_PIECES, max_size=12).map("".join)))
def test_the_shortcut_answers_as_the_search_does(text: str) -> None:
    assert is_gate_message(text) == (_GATE_UNIT.search(text) is not None)
