"""The Starlette apps: HTTPS (admission, extender, health) and plain-HTTP metrics.

Routes are thin: read a capped body, call an HTTP-free decision, write JSON. Decisions that only
compute (admission) run on the event loop; extender calls that talk to the API server run in a
worker thread.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from webhooks import admission, review
from webhooks.bounded import BadBody, decode_json
from webhooks.extender import MAX_BODY_BYTES as MAX_EXTENDER_BODY
from webhooks.extender import BadArgs, WireError
from webhooks.metrics import Metrics

_Handler = Callable[[Request], Awaitable[Response]]

log = logging.getLogger(__name__)
JSON = "application/json"


class Extender(Protocol):
    def filter(self, args: dict[str, Any]) -> dict[str, Any]: ...

    def filter_inline(self, args: dict[str, Any]) -> dict[str, Any] | None:
        """The filter's answer when it needs no API call, run on the event loop; None: the server
        runs `filter` in a worker thread instead."""
        ...

    def bind(self, args: dict[str, Any]) -> dict[str, Any]: ...


@dataclass
class Server:
    """What the routes need; `main` builds it from flags, tests build it directly."""

    policy: admission.AdmissionPolicy
    metrics: Metrics
    extender: Extender | None = None
    ready: Callable[[], tuple[bool, str]] = lambda: (True, "ok")
    # the prioritize verb for DRA pods (webhooks/prioritize.py); None: every pod gets no scores
    prioritize: Callable[[Any], list[dict[str, Any]]] | None = None


def _json(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body, separators=(",", ":")).encode(), status, media_type=JSON)


def _bad_request(message: str) -> Response:
    return PlainTextResponse(message + "\n", status_code=400)


async def read_body(request: Request, limit: int = review.MAX_BODY_BYTES) -> bytes:
    """The request body, refused (BadReview) as soon as it passes `limit` bytes."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise review.BadReview(f"body is {declared[:20]} bytes; the limit is {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise review.BadReview(f"body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _admission_route(server: Server, route: str) -> _Handler:
    counter = server.metrics.admission
    latency = server.metrics.admission_latency.labels(route)

    async def handle(request: Request) -> Response:
        started = time.perf_counter()
        try:
            review.check_content_type(request.headers.get("content-type"))
            rev = review.parse_review(await read_body(request))
        except review.BadReview as error:
            counter.labels(route, "bad-request").inc()
            return _bad_request(f"{route}: {error}")
        try:
            decision = admission.decide(route, rev, server.policy)
        except Exception:  # a bug must deny one request, not take the server down
            log.exception("admission %s failed for %s %s/%s", route, rev.kind, rev.namespace, rev.name)
            decision = review.Decision.deny(
                "dynmig could not evaluate this request (internal error); see the dynmig-scheduler logs",
                code=500,
                result="error",
            )
        counter.labels(route, decision.result).inc()
        latency.observe(time.perf_counter() - started)
        return _json(review.response(rev, decision))

    return handle


def _extender_route(server: Server, verb: str) -> _Handler:
    async def handle(request: Request) -> Response:
        if server.extender is None:
            return _json({"Error": "this dynmig server does not run the scheduler extender"})
        try:
            args = decode_json(await read_body(request, MAX_EXTENDER_BODY), MAX_EXTENDER_BODY)
        except (review.BadReview, BadBody) as error:
            return _bad_request(f"{verb}: bad request body: {error}")
        if not isinstance(args, dict):
            return _bad_request(f"{verb}: bad request body: must be a JSON object")
        handler = server.extender.filter if verb == "filter" else server.extender.bind
        try:
            # A filter that needs no API call runs here, on the event loop: kube-scheduler waits for
            # each filter before its next scheduling cycle, and a hand-off to a worker thread costs
            # that cycle a thread switch (and the GIL) each way. Binds call the API: a worker each.
            result = server.extender.filter_inline(args) if verb == "filter" else None
            if result is None:
                result = await run_in_threadpool(handler, args)
        except WireError as error:
            return _bad_request(f"{verb}: {error}")
        except Exception as error:  # the extender protocol carries errors in the body, HTTP 200
            log.exception("extender %s failed", verb)
            result = {"Error": f"{verb}: internal error: {str(error)[:200]}"}
        return _json(result)

    return handle


def _prioritize_route(server: Server) -> _Handler:
    """POST /prioritize: a HostPriorityList (a bare JSON list, as kube-scheduler decodes it). Read
    only: it changes nothing, so it needs no leadership; scores come from caches, off the loop."""

    async def handle(request: Request) -> Response:
        try:
            args = decode_json(await read_body(request, MAX_EXTENDER_BODY), MAX_EXTENDER_BODY)
        except (review.BadReview, BadBody) as error:
            return _bad_request(f"prioritize: bad request body: {error}")
        if not isinstance(args, dict):
            return _bad_request("prioritize: bad request body: must be a JSON object")
        if server.prioritize is None:
            return _json([])
        try:
            result = await run_in_threadpool(server.prioritize, args)
        except BadArgs as error:
            return _bad_request(f"prioritize: {error}")
        except Exception:  # a bug: no scores for this pod (the entry is ignorable), never a crash
            log.exception("extender prioritize failed")
            return PlainTextResponse("prioritize: internal error\n", status_code=500)
        return _json(result)

    return handle


def create_app(server: Server) -> Starlette:
    async def healthz(_: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def readyz(_: Request) -> Response:
        ok, why = server.ready()
        return PlainTextResponse(why + "\n", status_code=200 if ok else 503)

    routes = [
        Route("/mutate", _admission_route(server, "mutate"), methods=["POST"]),
        Route("/validate", _admission_route(server, "validate"), methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
    ]
    app = Starlette(routes=routes)
    app.state.server = server
    return app


def create_extender_app(server: Server) -> Starlette:
    """The scheduler extender (/filter, /bind, /prioritize), served on its own listener (loopback by default):
    only kube-scheduler may reach the verbs that change reservations."""

    async def healthz(_: Request) -> Response:
        return PlainTextResponse("ok\n")

    routes = [
        Route("/filter", _extender_route(server, "filter"), methods=["POST"]),
        Route("/bind", _extender_route(server, "bind"), methods=["POST"]),
        Route("/prioritize", _prioritize_route(server), methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
    ]
    app = Starlette(routes=routes)
    app.state.server = server
    return app


def create_metrics_app(metrics: Metrics) -> Starlette:
    async def scrape(_: Request) -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return Starlette(routes=[Route("/metrics", scrape, methods=["GET"])])
