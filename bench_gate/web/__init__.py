"""The bench console door: server-rendered pages for the people who decide.

``create_console(gateway, tokens, stopping)`` returns an ASGI app that the composition root
mounts at ``/``. It talks to the gateway core only; it imports no other door.
"""

from ._app import create_console

# The console's pure parts (plots and what a page shows), public so they can be used and
# tested on their own.
from ._plots import WINDOW_S, Samples, span_of, ticks, trend
from ._views import (
    badges,
    decider_names,
    deciders,
    limits_of,
    outcome_words,
    over_envelope,
    utc,
    waterfall,
    what_changes,
)

__all__ = ["WINDOW_S", "Samples", "badges", "create_console", "decider_names", "deciders",
           "limits_of", "outcome_words", "over_envelope", "span_of", "ticks", "trend", "utc",
           "waterfall", "what_changes"]
