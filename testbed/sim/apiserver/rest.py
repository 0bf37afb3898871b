"""The HTTP face of the simulated API server: routing Kubernetes REST paths to registry verbs,
discovery, Table output, chunked watch streams, authentication by bearer token, faults."""

from __future__ import annotations

import json
import logging
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from sim.apiserver import (
    discovery,
    disruption,
    errors,
    headers,
    logs,
    media,
    openapi,
    openapi_v2,
    protobuf,
    reviews,
    scale,
    schemas,
)
from sim.apiserver.errors import ApiError
from sim.apiserver.params import flag, whole_number
from sim.apiserver.registry import Request, Result, WatchOptions
from sim.apiserver.resources import BY_KEY, ResourceType, lookup
from sim.apiserver.store import Frame

if TYPE_CHECKING:
    from sim.apiserver.server import ApiServer

log = logging.getLogger("sim.apiserver")
# kube-apiserver's default --max-request-body-bytes (MaxRequestBodyBytes): 3 MiB; a larger body
# is refused with 413 before it is decoded.
MAX_BODY = 3 * 1024 * 1024
DEFAULT_WATCH_TIMEOUT = 1800.0
# Streams into a container need a container runtime, which the simulation has not got
STREAMING = ("exec", "attach", "portforward")
STREAMING_REFUSAL = (
    "pods/{what} is not simulated: pod {name}'s containers are simulated processes with no container "
    "runtime to open a stream into; read their output with `kubectl logs {name}`"
)


def _warning(text: str) -> str:
    """A Warning header value (RFC 7234 warn-code 299, quoted-string escaped; one line)."""
    clean = "".join(c if " " <= c <= "~" else "?" for c in text[:2048])
    return '299 - "{}"'.format(clean.replace("\\", "\\\\").replace('"', '\\"'))


def _field_validation(value: str) -> str:
    """The fieldValidation directive; kube-apiserver's default is Warn."""
    if value in ("", "Warn"):
        return "Warn"
    if value in ("Strict", "Ignore"):
        return value
    raise ApiError(400, f'fieldValidation={value[:32]!r}: supported values are "Ignore", "Warn", "Strict"')


def _limit(value: str | None) -> int:
    return whole_number("limit", value, "items") if value else 0


def _seconds(value: str | None, default: float) -> float:
    """timeoutSeconds; absent or 0 is the default."""
    if not value:
        return default
    return float(whole_number("timeoutSeconds", value, "seconds")) or default


def _http_version(text: str) -> tuple[int, int] | None:
    """`HTTP/<major>.<minor>` as numbers (RFC 2145: separate integers, leading zeros ignored)."""
    if not text.startswith("HTTP/"):
        return None
    parts = text.split("/", 1)[1].split(".")
    if len(parts) != 2 or not all(p.isdigit() and len(p) <= 10 for p in parts):
        return None
    return int(parts[0]), int(parts[1])


class Route:
    """A parsed resource path."""

    def __init__(self, rt: ResourceType, namespace: str, name: str, subresource: str):
        self.rt, self.namespace, self.name, self.subresource = rt, namespace, name, subresource


def _route(path: str) -> tuple[str, Any]:
    """Classify a path; resource paths are /api/v1/... or /apis/<g>/<v>/... followed by
    [namespaces/<ns>/]<plural>[/<name>[/<subresource>]]."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return "other", parts
    if not rest:
        return "resourcelist", (group, version)
    ns = ""
    if (
        rest[0] == "namespaces"
        and len(rest) >= 3
        and (group, rest[2]) in BY_KEY
        and BY_KEY[(group, rest[2])].namespaced
    ):
        ns, rest = rest[1], rest[2:]
    rt = lookup(group, version, rest[0])
    if rt is None or len(rest) > 3:
        return "notfound", path
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if sub and sub not in rt.subresources:
        return "notfound", path
    return "resource", Route(rt, ns, name, sub)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "dynmig-sim-apiserver"
    api: ApiServer  # set on the subclass made per server

    def parse_request(self) -> bool:
        """The request line and headers, as BaseHTTPRequestHandler.parse_request reads them, with
        the headers read by sim.apiserver.headers instead of the standard library's email parser."""
        self.command = None  # type: ignore[assignment]  # set in case of an error on the first line
        self.request_version = version = self.default_request_version
        self.close_connection = True
        requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        self.requestline = requestline
        words = requestline.split()
        if not words:
            return False
        if len(words) >= 3:  # enough to tell the protocol version
            version = words[-1]
            number = _http_version(version)
            if number is None:
                self.send_error(HTTPStatus.BAD_REQUEST, f"Bad request version ({version!r})")
                return False
            if number >= (1, 1) and self.protocol_version >= "HTTP/1.1":
                self.close_connection = False
            if number >= (2, 0):
                self.send_error(
                    HTTPStatus.HTTP_VERSION_NOT_SUPPORTED,
                    f"Invalid HTTP version ({version.split('/', 1)[1]})",
                )
                return False
            self.request_version = version
        if not 2 <= len(words) <= 3:
            self.send_error(HTTPStatus.BAD_REQUEST, f"Bad request syntax ({requestline!r})")
            return False
        command, path = words[:2]
        if len(words) == 2:
            self.close_connection = True
            if command != "GET":
                self.send_error(HTTPStatus.BAD_REQUEST, f"Bad HTTP/0.9 request type ({command!r})")
                return False
        self.command, self.path = command, path
        if self.path.startswith("//"):
            self.path = "/" + self.path.lstrip("/")  # as the standard library: no open redirects
        try:
            self.headers = headers.read(self.rfile)  # type: ignore[assignment]
        except headers.TooLarge as err:
            self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, err.reason, str(err))
            return False
        conntype = (self.headers.get("Connection") or "").lower()
        if conntype == "close":
            self.close_connection = True
        elif conntype == "keep-alive" and self.protocol_version >= "HTTP/1.1":
            self.close_connection = False
        expect = (self.headers.get("Expect") or "").lower()
        if (
            expect == "100-continue"
            and self.protocol_version >= "HTTP/1.1"
            and self.request_version >= "HTTP/1.1"
        ):
            return bool(self.handle_expect_100())
        return True

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def setup(self) -> None:
        super().setup()
        self.api._track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.api._track(self.connection, False)

    # ---- plumbing ------------------------------------------------------------------------------
    def _send_json(self, code: int, obj: Any, warnings: tuple[str, ...] = ()) -> None:
        body = json.dumps(obj, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for w in warnings:
            self.send_header("Warning", _warning(w))
        # Headers and body in one write: fewer syscalls, no Nagle/delayed-ACK stalls.
        self._headers_buffer.append(b"\r\n")
        if self.command != "HEAD":
            self._headers_buffer.append(body)
        self.flush_headers()

    def _send_error(self, err: ApiError) -> None:
        self._send_json(err.code, err.status())

    def _content_length(self) -> int:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0:
            self.close_connection = True
            raise ApiError(400, "the Content-Length header is not a whole number of bytes")
        return length

    def _body(self) -> bytes:
        if self._chunked():
            self._body_read = True
            return self._read_chunks()
        length = self._content_length()
        if length > MAX_BODY:
            raise ApiError(413, f"Request entity too large: limit is {MAX_BODY}", "RequestEntityTooLarge")
        raw = self.rfile.read(length) if length else b""
        self._body_read = True  # read once: an error reply must not wait for it again
        return raw

    def _chunked(self) -> bool:
        """Whether the body comes in chunks (a Go client streaming a body of unknown length, e.g.
        `kubectl replace --raw -f -`, sends it so, and Go's server reads it)."""
        return "chunked" in self.headers.get("Transfer-Encoding", "").lower()

    def _read_chunks(self) -> bytes:
        """A chunked body, bounded: MAX_BODY bytes in all, size lines and trailers of bounded length;
        anything malformed ends the connection with a 400 (the stream's framing is lost)."""
        data = bytearray()
        while True:
            line = self.rfile.readline(1026)
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                size = -1
            if size < 0 or not line.endswith(b"\n"):
                self.close_connection = True
                raise ApiError(400, "the chunked request body is malformed (a chunk size line)")
            if size == 0:
                break
            if len(data) + size > MAX_BODY:
                self.close_connection = True
                raise ApiError(413, f"Request entity too large: limit is {MAX_BODY}", "RequestEntityTooLarge")
            data += self.rfile.read(size)
            if self.rfile.readline(3) not in (b"\r\n", b"\n"):
                self.close_connection = True
                raise ApiError(400, "the chunked request body is malformed (a chunk's end)")
        for _ in range(64):  # trailers, up to the blank line
            if self.rfile.readline(8194) in (b"\r\n", b"\n", b""):
                return bytes(data)
        self.close_connection = True
        raise ApiError(400, "the chunked request body has too many trailer lines")

    def _json_body(self, req: Request | None = None) -> Any:
        raw = self._body()
        kind = media.body_media_type(self.headers.get("Content-Type", ""))
        if kind == media.PROTOBUF:
            if req is None:
                raise ApiError(415, "this request takes a JSON body", "UnsupportedMediaType")
            return protobuf.decode(raw, req.rt.group_version, req.rt.kind)
        duplicates: list[str] = []
        try:
            body = json.loads(raw or b"{}", object_pairs_hook=schemas.duplicate_fields_hook(duplicates))
        except RecursionError as exc:
            raise ApiError(400, "the request body nests too deeply to be a Kubernetes object") from exc
        except ValueError as exc:
            raise ApiError(400, f"the request body is not valid JSON: {exc}") from exc
        if req is not None:
            req.duplicate_fields = duplicates
        return body

    def do_GET(self) -> None:
        self._dispatch()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_GET

    def _dispatch(self) -> None:
        self._body_read = False
        try:
            self._serve()
        except ApiError as err:
            self._drain()
            self._send_error(err)
        except (TimeoutError, BrokenPipeError, ConnectionResetError, OSError) as exc:
            log.debug("client went away: %s", exc)
            self.close_connection = True
        except RecursionError:
            self._send_error(ApiError(400, "the request body nests too deeply to be a Kubernetes object"))
        except Exception as exc:
            log.exception("internal error serving %s %s", self.command, self.path)
            self._send_error(ApiError(500, f"Internal error occurred: {exc}"))

    def _drain(self) -> None:
        if getattr(self, "_body_read", False):
            return
        if self._chunked():
            self.close_connection = True  # unread chunks: the next request cannot be found after them
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if 0 <= length <= MAX_BODY:
            try:
                self.rfile.read(length)
                return
            except OSError:
                pass
        self.close_connection = True

    # ---- serving -------------------------------------------------------------------------------
    def _serve(self) -> None:
        if self.api._unavailable:
            raise ApiError(503, "the simulated API server is down (down())", "ServiceUnavailable")
        user = self.api._authenticate(self.headers.get("Authorization", ""))
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        kind, target = _route(url.path)
        if kind == "other":
            self._serve_other(target)
            return
        if kind == "resourcelist":
            doc = discovery.resource_list(*target)
            if doc is None:
                raise errors.no_route()
            self._send_json(200, doc)
            return
        if kind == "notfound":
            raise errors.no_route()
        route: Route = target
        if route.subresource in STREAMING:
            raise ApiError(
                400, STREAMING_REFUSAL.format(what=route.subresource, name=route.name), "BadRequest"
            )
        media.check_accept(self.headers.get("Accept", ""))
        verb = self._verb(route, query)
        resource = route.rt.plural + (f"/{route.subresource}" if route.subresource else "")
        self.api.faults.check(verb, resource, route.namespace)
        req = Request(
            user,
            route.rt,
            route.namespace,
            route.name,
            route.subresource,
            dry_run="All" in query.get("dryRun", ""),
            field_validation=_field_validation(query.get("fieldValidation", "")),
            field_manager=query.get("fieldManager", ""),
            user_agent=self.headers.get("User-Agent", ""),
            force=flag(query, "force"),
        )
        getattr(self, f"_verb_{verb}")(req, query)

    def _verb(self, route: Route, query: dict[str, str]) -> str:
        method = self.command
        if method in ("GET", "HEAD"):
            if route.name:
                return "get"
            return "watch" if flag(query, "watch") else "list"
        if route.subresource in ("binding", "eviction") or route.rt.plural == "bindings":
            if method != "POST":
                raise ApiError(
                    405, f"{method} is not allowed on {route.rt.plural}/{route.subresource or 'binding'}"
                )
            return "create"
        if method == "POST":
            if route.name and not route.subresource:
                raise ApiError(405, "POST on a named object is not allowed: POST to the collection")
            return "create"
        if not route.name and method == "DELETE":
            return "deletecollection"
        if not route.name:
            raise ApiError(405, f"{method} needs an object name in the path")
        return {"PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]

    def _serve_other(self, parts: list[str]) -> None:
        path = "/" + "/".join(parts)
        if parts[:2] == ["openapi", "v3"]:
            self._serve_openapi("/".join(parts[2:]))
        elif path == "/openapi/v2":
            self._serve_openapi_v2()
        elif path == "/version":
            self._send_json(200, discovery.version())
        elif path in ("/healthz", "/livez", "/readyz"):
            body = b"ok"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif path == "/api":
            self._send_json(200, discovery.api_versions(f"{self.api.host}:{self.api.port}"))
        elif path == "/apis":
            self._send_json(200, discovery.api_group_list())
        elif len(parts) == 2 and parts[0] == "apis" and discovery.api_group(parts[1]):
            self._send_json(200, discovery.api_group(parts[1]))
        else:
            raise errors.no_route()

    def _serve_openapi(self, gv_path: str) -> None:
        if not gv_path:
            self._send_json(200, openapi.root())
            return
        body = openapi.document(gv_path)
        if body is None:
            raise ApiError(404, f"the server could not find the OpenAPI v3 document {gv_path!r}", "NotFound")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header(
            "Cache-Control", "public, immutable" if "hash=" in self.path else "no-cache, private"
        )
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _serve_openapi_v2(self) -> None:
        served = openapi_v2.negotiate(self.headers.get("Accept", ""))
        if served is None:
            self.send_response(406)
            self.send_header("Vary", "Accept")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body, etag = openapi_v2.encoded(served)
        # If-None-Match as Go's http.ServeContent reads it: "*" or any tag, weakly compared
        tags = {t.strip().removeprefix("W/") for t in self.headers.get("If-None-Match", "").split(",")[:64]}
        fresh = "*" in tags or etag in tags
        self.send_response(304 if fresh else 200)
        self.send_header("Vary", "Accept")
        self.send_header("Etag", etag)
        if not fresh:
            self.send_header("Content-Type", served)
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and not fresh:
            self.wfile.write(body)

    def _wants_table(self) -> bool:
        return media.wants_table(self.headers.get("Accept", ""))

    def _reply(self, result: Result) -> None:
        self._send_json(result.code, result.obj, result.warnings)

    def _verb_get(self, req: Request, query: dict[str, str]) -> None:
        if req.subresource == "log":
            self._serve_log(req, query)
            return
        obj = self.api.registry.get(req)
        if req.subresource == "scale":
            self._send_json(200, scale.view(obj))
            return
        if self._wants_table() and not req.subresource:
            self._send_json(
                200,
                discovery.table(
                    req.rt,
                    [obj],
                    {"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                    include=discovery.table_include(query),
                ),
            )
            return
        self._send_json(200, obj)

    def _serve_log(self, req: Request, query: dict[str, str]) -> None:
        pod = self.api.registry.get(req)
        container = logs.choose_container(pod, query.get("container", ""))
        meta = pod["metadata"]
        path = logs.log_path(self.api.logs_dir, meta["namespace"], meta["name"], meta["uid"], container)

        def still_running() -> bool:
            if self.api._stopping or self.api._unavailable:
                return False
            now = self.api.get("pods", meta["name"], meta["namespace"])
            return bool(
                now
                and now["metadata"]["uid"] == meta["uid"]
                and (now.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            )

        chunks = logs.stream(path, pod, container, query, still_running)
        first = next(chunks, None)  # refusals (waiting to start, bad options) are raised here
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._write_chunk(first or b"")
        for chunk in chunks:
            self._write_chunk(chunk)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _write_chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

    def _verb_list(self, req: Request, query: dict[str, str]) -> None:
        doc = self.api.registry.list(
            req,
            query.get("labelSelector"),
            query.get("fieldSelector"),
            _limit(query.get("limit")),
            query.get("continue", ""),
        )
        if self._wants_table():
            doc = discovery.table(
                req.rt, doc["items"], doc["metadata"], include=discovery.table_include(query)
            )
        self._send_json(200, doc)

    def _verb_create(self, req: Request, query: dict[str, str]) -> None:
        body = self._json_body(req if req.subresource in ("", "status") else None)
        if req.subresource == "binding" or req.rt.plural == "bindings":
            self._reply(self.api.registry.bind(req, body))
        elif req.subresource == "eviction":
            self._reply(disruption.evict(self.api.registry, req, body))
        elif req.rt.plural in reviews.KINDS and req.rt.group in (
            reviews.AUTHORIZATION,
            reviews.AUTHENTICATION,
        ):
            self._send_json(201, reviews.answer(req.rt.plural, req.user, req.namespace, body))
        else:
            self._reply(self.api.registry.create(req, body))

    def _verb_update(self, req: Request, query: dict[str, str]) -> None:
        body = self._json_body(req if req.subresource in ("", "status") else None)
        if req.subresource == "scale":
            replicas, pinned = scale.from_body(req.name, body)
            self._reply(self.api.registry.scale(req, lambda current: (replicas, ""), pinned))
            return
        self._reply(self.api.registry.update(req, body))

    def _verb_patch(self, req: Request, query: dict[str, str]) -> None:
        raw = self._body()
        if req.subresource == "scale":
            change = scale.patcher(req.name, self.headers.get("Content-Type", ""), raw)
            self._reply(self.api.registry.scale(req, change))
            return
        self._reply(self.api.registry.patch(req, self.headers.get("Content-Type", ""), raw))

    def _delete_options(self, query: dict[str, str]) -> dict[str, Any]:
        raw = self._body()
        options: dict[str, Any] = {}
        if raw.strip():
            if media.body_media_type(self.headers.get("Content-Type", "")) == media.PROTOBUF:
                options = protobuf.decode_delete_options(raw)
            else:
                try:
                    options = json.loads(raw)
                except ValueError as exc:
                    raise ApiError(400, f"the DeleteOptions body is not valid JSON: {exc}") from exc
        if "gracePeriodSeconds" in query:
            try:
                options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
            except ValueError as exc:
                raise ApiError(
                    400, f"gracePeriodSeconds={query['gracePeriodSeconds'][:32]!r}: a whole number of seconds"
                ) from exc
        return options if isinstance(options, dict) else {}

    def _verb_delete(self, req: Request, query: dict[str, str]) -> None:
        self._reply(self.api.registry.delete(req, self._delete_options(query)))

    def _verb_deletecollection(self, req: Request, query: dict[str, str]) -> None:
        options = self._delete_options(query)
        doc = self.api.registry.list(req, query.get("labelSelector"), query.get("fieldSelector"))
        for item in doc["items"]:
            one = Request(
                req.user,
                req.rt,
                item["metadata"].get("namespace", ""),
                item["metadata"]["name"],
                "",
                req.dry_run,
            )
            try:
                self.api.registry.delete(one, options)
            except ApiError as err:
                if err.code != 404:
                    raise
        self._send_json(200, doc)

    def _verb_watch(self, req: Request, query: dict[str, str]) -> None:
        opts = WatchOptions(
            resource_version=query.get("resourceVersion", ""),
            resource_version_match=query.get("resourceVersionMatch", ""),
            send_initial_events=flag(query, "sendInitialEvents"),
            bookmarks=bool(flag(query, "allowWatchBookmarks")),
            label_selector=query.get("labelSelector"),
            field_selector=query.get("fieldSelector"),
            timeout=_seconds(query.get("timeoutSeconds"), DEFAULT_WATCH_TIMEOUT),
            bookmark_interval=self.api.bookmark_interval,
        )
        generation = self.api.faults.watch_generation
        started = [False]
        as_table = [self._wants_table()]  # the first Table carries the column definitions
        include = discovery.table_include(query) if as_table[0] else ""

        def start() -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            started[0] = True

        def render(event: dict[str, Any]) -> dict[str, Any]:
            if not as_table[0] or event["type"] in ("BOOKMARK", "ERROR"):
                return event
            obj = event["object"]
            doc = discovery.table(
                req.rt,
                [obj],
                {"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                headers=as_table[0] == "first",
                include=include,
            )
            as_table[0] = "later"
            return {"type": event["type"], "object": doc}

        if as_table[0]:
            as_table[0] = "first"

        def line(event: dict[str, Any]) -> bytes:
            if as_table[0]:
                return json.dumps(render(event), separators=(",", ":")).encode() + b"\n"
            cached = getattr(event, "line", None)
            if cached is None:
                cached = json.dumps(event, separators=(",", ":")).encode() + b"\n"
                if isinstance(event, Frame):
                    event.line = cached  # the same bytes for every watcher of this event
            return cached

        def send(events: list[dict[str, Any]]) -> None:
            if not started[0]:
                start()
            if not events:
                return
            data = b"".join(line(e) for e in events)
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def stopped() -> bool:
            return (
                self.api._stopping or self.api._unavailable or self.api.faults.watch_generation != generation
            )

        try:
            self.api.registry.watch(req, send, opts, stopped)
        except ApiError as err:
            if err.code != 410 and not started[0]:
                raise
            # The apiserver answers a too-old watch with 200 and one ERROR event (code 410).
            send([{"type": "ERROR", "object": err.status()}])
        if not started[0]:
            start()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        if self.api.faults.watch_generation != generation or self.api._unavailable:
            self.close_connection = True
