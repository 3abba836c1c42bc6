"""The HTTP door: a FastAPI app over the gateway core.

>>> app = create_app(gateway, tokens, doors_info={"psu": ("127.0.0.1", 5025)})
"""

from ._app import create_app

__all__ = ["create_app"]
