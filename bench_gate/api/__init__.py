"""The HTTP door: a FastAPI app over the gateway core.

>>> app = create_app(gateway, tokens, doors_info={"psu": ("127.0.0.1", 5025)})
"""

from ._app import create_app
from ._limits import BodyLimit  # the body cap, an ASGI middleware any app may wrap
from ._schemas import takeover_out  # a request as the API shows it (a whole one or a listed one)

__all__ = ["BodyLimit", "create_app", "takeover_out"]
