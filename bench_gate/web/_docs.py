"""The API's reference pages, ``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), and the
favicon, served from the installed packages: nothing is fetched from a CDN, so they work on
a bench with no internet.

The Swagger UI and ReDoc bundles are those of the ``fastapi-offline`` distribution (MIT; the
bundles keep their own Apache-2.0 and MIT notices). The HTTP API serves ``/openapi.json``.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import APIRouter
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, Response

__all__ = ["ASSETS", "ASSETS_URL", "router"]

#: The Swagger UI and ReDoc bundles, from the installed fastapi-offline package.
ASSETS = Path(str(files("fastapi_offline") / "static"))
ASSETS_URL = "/docs-assets"
_HERE = Path(__file__).parent
_ICON = "/static/favicon.svg"
_TITLE = "bench-gate HTTP API"

router = APIRouter()


#: The pages may load nothing from elsewhere: ReDoc's own footer links a logo on its CDN,
#: which the browser then never asks for (and the footer is hidden).
_LOCAL_ONLY = ("default-src 'self'; script-src 'self' 'unsafe-inline' blob:; "
               "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
               "font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'")
_HIDE_BRANDING = "<style>a[href*='redocly.com'] { display: none; }</style>"


def _local(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = _LOCAL_ONLY
    return page


@router.get("/docs", include_in_schema=False)
async def swagger() -> HTMLResponse:
    return _local(get_swagger_ui_html(
        openapi_url="/openapi.json", title=_TITLE,
        swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS_URL}/swagger-ui.css", swagger_favicon_url=_ICON))


@router.get("/redoc", include_in_schema=False)
async def redoc() -> HTMLResponse:
    page = get_redoc_html(openapi_url="/openapi.json", title=_TITLE,
                          redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js",
                          redoc_favicon_url=_ICON, with_google_fonts=False)
    html = bytes(page.body).decode().replace("</head>", _HIDE_BRANDING + "</head>", 1)
    return _local(HTMLResponse(html))


@router.get("/favicon.ico", include_in_schema=False)
async def favicon() -> Response:
    """Browsers ask for ``/favicon.ico`` on their own; pages link the SVG."""
    return FileResponse(_HERE / "static" / "favicon.png", media_type="image/png",
                        headers={"Cache-Control": "public, max-age=86400"})
