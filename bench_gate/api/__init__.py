"""The HTTP door: a FastAPI app over the gateway core.

>>> app = create_app(gateway, tokens, doors_info={"psu": ("127.0.0.1", 5025)})
"""

from ._app import create_app
from ._limits import BodyLimit  # the body cap, an ASGI middleware any app may wrap

__all__ = ["BodyLimit", "create_app"]
