"""The bench console door: server-rendered pages for the people who decide.

``create_console(gateway, tokens, stopping)`` returns an ASGI app that the composition root
mounts at ``/``. It talks to the gateway core only; it imports no other door.
"""

from ._app import create_console

__all__ = ["create_console"]
