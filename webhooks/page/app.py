"""The page's Starlette app: the HTML shell, its script and stylesheet, and the event stream.

Read-only: GET only, nothing in a request changes what is shown. No external assets, so the page
works offline, and a Content-Security-Policy that lets the page load only its own script, style and
stream: a name that slipped past escaping still could not run a script or fetch anything.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from webhooks.page.render import page
from webhooks.page.stream import DEFAULT_TIMING, Feed, StreamLimit, Timing, events

MAX_STREAMS = 16  # browsers watching at once; one more gets 503 and retries
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def _asset(name: str) -> bytes:
    return (resources.files(__package__) / name).read_bytes()


def create_page_app(
    render: Callable[[], str],
    max_streams: int = MAX_STREAMS,
    interval: float = 1.0,
    timing: Timing = DEFAULT_TIMING,
) -> Starlette:
    """`render` returns the live part of the page (HTML with inline SVG, already escaped); it is
    called from a worker thread at most once per `interval`, however many browsers watch."""
    feed = Feed(render, interval)
    limit = StreamLimit(max_streams)
    script, style = _asset("page.js"), _asset("page.css")

    async def index(_: Request) -> Response:
        fragment = feed.current()[1]
        return Response(page(fragment), media_type="text/html; charset=utf-8", headers=HEADERS)

    async def asset_js(_: Request) -> Response:
        return Response(script, media_type="text/javascript; charset=utf-8", headers=HEADERS)

    async def asset_css(_: Request) -> Response:
        return Response(style, media_type="text/css; charset=utf-8", headers=HEADERS)

    async def stream(_: Request) -> Response:
        if not limit.acquire():
            return PlainTextResponse(
                f"{limit.limit} browsers already watch this page; try again shortly\n",
                status_code=503,
                headers={**HEADERS, "Retry-After": "10"},
            )
        return StreamingResponse(
            events(feed, limit, timing),
            media_type="text/event-stream",
            headers={**HEADERS, "X-Accel-Buffering": "no"},  # proxies must pass events on at once
        )

    async def healthz(_: Request) -> Response:
        return PlainTextResponse("ok\n", headers=HEADERS)

    async def no_icon(_: Request) -> Response:
        return Response(status_code=204, headers=HEADERS)  # browsers ask; there is none

    app = Starlette(
        routes=[
            Route("/", index, methods=["GET"]),
            Route("/page.js", asset_js, methods=["GET"]),
            Route("/page.css", asset_css, methods=["GET"]),
            Route("/events", stream, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/favicon.ico", no_icon, methods=["GET"]),
        ]
    )
    app.state.feed, app.state.streams = feed, limit
    return app
