"""Signing in and out of the console, and the emergency stop every signed-in page offers
(and, to operators while a stop is in force, clearing it)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException

from ._console import (
    checked_form,
    console_of,
    first,
    form_of,
    require_decider,
    same_origin,
    shown_error,
)
from ._session import COOKIE, LOGIN_CSRF_COOKIE, Sessions, new_token

__all__ = ["router"]

router = APIRouter()


@router.get("/login", response_class=HTMLResponse)
async def login_form(request: Request, next: str = "/") -> Response:
    console = console_of(request)
    token = request.cookies.get(LOGIN_CSRF_COOKIE) or new_token()
    response = console.page(request, "login.html", {"login_csrf": token, "next": next,
                                                    "error": None})
    response.set_cookie(LOGIN_CSRF_COOKIE, token, httponly=True, samesite="strict",
                        path="/login")
    return response


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    console = console_of(request)
    form = await form_of(request)
    target = first(form, "next", "/")
    if not target.startswith("/") or target.startswith("//"):
        target = "/"
    if not same_origin(request) or not Sessions.csrf_ok(
            request.cookies.get(LOGIN_CSRF_COOKIE), first(form, "csrf")):
        raise HTTPException(403, "the sign-in form's CSRF token is missing or wrong: "
                                 "reload the sign-in page")
    opened = console.sessions.open(first(form, "token"))
    if opened is None:
        return console.page(request, "login.html", {
            "login_csrf": request.cookies.get(LOGIN_CSRF_COOKIE), "next": target,
            "error": "That token is not valid or was revoked."}, status_code=401)
    session, _ = opened
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(COOKIE, session.id, httponly=True, samesite="strict", path="/",
                        secure=request.url.scheme == "https")
    response.delete_cookie(LOGIN_CSRF_COOKIE, path="/login")
    return response


@router.post("/stop", response_class=HTMLResponse)
async def emergency_stop(request: Request) -> Response:
    """The emergency stop, for anyone signed in: no approval, never waits."""
    console, session, me, _ = await checked_form(request, stop=True)
    done = await console.gateway.emergency_stop(me, "console")
    names = ", ".join(done["instruments"])
    console.say(session, "error", f"EMERGENCY STOP by {me.name}: {names} made safe in "
                f"{done['seconds'] * 1000:.0f} ms, {len(done['cancelled'])} requests "
                "cancelled; writes are refused until an operator clears the stop "
                "(Clear stop, here or bench-gate stop --clear)")
    return RedirectResponse("/", status_code=303)


@router.post("/stop/clear", response_class=HTMLResponse)
async def clear_stop(request: Request) -> Response:
    """Ending the emergency stop: operators only (as `bench-gate stop --clear`)."""
    console, session, me, _ = await checked_form(request)
    require_decider(me, "clearing the emergency stop")
    cleared = shown_error(console.gateway.clear_stop, me)  # a fenced gateway: -203
    console.say(session, "ok", f"Stop cleared by {me.name}: "
                f"{', '.join(cleared) or 'nothing was stopped'}; writes are judged again")
    return RedirectResponse("/", status_code=303)


@router.post("/logout")
async def logout(request: Request) -> Response:
    console, session, _, _ = await checked_form(request)
    console.sessions.close(session.id)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response
