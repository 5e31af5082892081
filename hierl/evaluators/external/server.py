"""The HTTP JSON endpoint of an external-env evaluator (standard library only).

One ``ExternalServer`` per evaluator that samples, each request on its own thread
(``http.server.ThreadingHTTPServer``, HTTP/1.1 keep-alive).  The routes, all JSON
except ``GET /policy``:

    GET  /healthz                          {"ok": true}
    GET  /spec                             the spaces, the worker index, the policy version
    GET  /policy                           the current policy as TorchScript (local inference)
    POST /episodes                         {"episode_id"?, "training_enabled"?} -> {"episode_id"}
    POST /episodes/<id>/action             {"observation", "reward"?} -> {"action"}
    POST /episodes/<id>/log_action         {"observation", "action", "reward"?}
    POST /episodes/<id>/returns            {"reward", "info"?}
    POST /episodes/<id>/end                {"observation", "reward"?, "truncated"?, "info"?}
    POST /events                           {"events": [{"command", "episode_id", ...}, ...],
                                            "batch_id"?} -> {"results", "failed"}

``reward`` sent with a call is added to the episode's current step before the call
(a client sends its logged returns with its next call); ``log_action`` may carry the
behaviour policy's ``action_logp`` and ``action_dist_inputs`` (local inference).
``/events`` applies every call it can and answers one result per call (a failed one as
``{"error", "status", "field"?}``; ``failed`` lists their indices).  Errors answer
``{"error": message}`` (plus ``"field"`` for a bad value) with status 400 (bad JSON, a
value that does not fit its space: the message names the field and the expected shape),
401 (missing or wrong token; every route but ``/healthz`` needs it when set, and it is
checked before the route), 404 (unknown route or episode; with a token, also another
client's episode: see ``CLIENT_HEADER``), 408 (a body not received within
``request_timeout_s``), 409, 411, 413 (a body, an episode's info or its steps past their
limits), 503 (too many episodes or connections, or the evaluator is busy).
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import json
import logging
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from hierl.auth import CLIENT_HEADER, TOKEN_ENV, bearer_matches
from hierl.evaluators.external.episodes import EpisodeError
from hierl.evaluators.wire import WireError, encode, loads

logger = logging.getLogger(__name__)

EPISODE_COMMANDS = ("action", "log_action", "returns", "end")
"""The calls on one episode (``POST /episodes/<id>/<command>``)."""


class ExternalApp(Protocol):
    """What the server serves (an ``
    ExternalEvaluator``)."""

    def handle(
        self, command: str, episode_id: str | None, body: dict[str, Any], client: str | None
    ) -> Any:
        """Run one call (``start``, an episode command or ``events``) for ``client`` (the
        ``X-Hierl-Client`` header, None without one); raises WireError or EpisodeError
        for bad calls."""

    def describe(self) -> dict[str, Any]:
        """The ``GET /spec`` answer."""

    def policy_model(self) -> tuple[bytes, dict[str, str]]:
        """The TorchScript bytes of the current policy and the headers that describe it."""


class ExternalServer:
    """Serves ``app`` over HTTP on ``host:port`` in a daemon thread.

    Args:
        app: handles the calls (see the module docstring for the routes).
        host, port: where to listen (port 0: a free port; see ``address``).
        token: shared token required as ``Authorization: Bearer <token>`` (None: none;
            a warning is logged when the address is not a loopback one).
        name: who listens (error messages).
        idle_timeout_s: a connection that sends nothing for this long (an idle
            keep-alive, a slow or stalled client) is closed, freeing its thread.
        request_timeout_s: once the first byte of a request arrives, the whole request
            (line, headers, body) must arrive within this long (else 408 and closed).
        max_connections: connections served at once; past it the idlest keep-alive one
            is closed for the new one, or the new one gets 503 when none is idle.
        max_request_bytes: larger bodies are refused (413) unread.

    Raises:
        OSError: the address cannot be bound (the message names it).
    """

    def __init__(
        self,
        app: ExternalApp,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        name: str = "external input",
        idle_timeout_s: float = 60.0,
        request_timeout_s: float = 30.0,
        max_connections: int = 1024,
        max_request_bytes: int = 64 << 20,
    ):
        settings = {
            "app": app,
            "token": token,
            "timeout": idle_timeout_s,
            "request_timeout_s": request_timeout_s,
            "max_request_bytes": max_request_bytes,
        }
        handler = type("Handler", (_Handler,), settings)
        try:
            self.httpd = _Server((host, port), handler, max_connections)
        except OSError as e:
            raise OSError(e.errno, f"{name} cannot listen on {host}:{port}: {e.strerror}") from e
        if not token and not _is_loopback(self.address[0]):
            logger.warning(
                "%s listens on %s:%d without an auth token: anyone who can reach it can "
                "drive training episodes; set input_external.auth_token or $%s",
                name,
                *self.address,
                TOKEN_ENV,
            )
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True
        )
        self._thread.start()

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` the server listens on."""
        host, port = self.httpd.server_address[:2]
        return str(host), int(port)

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop serving, release the port, close the clients' open connections (a
        client waiting on one gets an error instead of waiting for its timeout) and wait,
        at most ``timeout_s`` in all, for the connections' threads to finish the calls
        they are in."""
        deadline = time.monotonic() + timeout_s
        self.httpd.shutdown()
        self.httpd.server_close()
        self.httpd.close_connections()
        self._thread.join(timeout=timeout_s)
        # CRUCIAL: a connection thread still computing an action when the interpreter
        # exits is killed inside torch, which aborts the process
        self.httpd.join_connection_threads(deadline)


def _is_loopback(host: str) -> bool:
    """Whether ``host`` (an address) only takes connections from this machine."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class _DeadlineReader(io.RawIOBase):
    """A connection's reads with two limits: ``idle_s`` for the first byte of a request
    (an idle keep-alive connection) and, from that byte on, a deadline for the whole
    request (``expect_request`` starts the next one).  A client that trickles a
    byte at a time can hold its thread no longer than ``request_s``."""

    def __init__(self, sock: socket.socket, idle_s: float, request_s: float):
        self.sock, self.idle_s, self.request_s = sock, idle_s, request_s
        self.deadline: float | None = None
        self.idle_since = time.monotonic()

    def readable(self) -> bool:
        return True

    def expect_request(self) -> None:
        """The next bytes begin a new request: idle until they arrive."""
        self.deadline = None
        self.idle_since = time.monotonic()

    def begin_request(self) -> None:
        """A request is under way (its deadline runs from its first byte, or now)."""
        if self.deadline is None:
            self.deadline = time.monotonic() + self.request_s

    @property
    def idle(self) -> bool:
        """Waiting for a request (no request under way)."""
        return self.deadline is None

    def readinto(self, buffer: Any) -> int:
        if self.deadline is None:
            self.sock.settimeout(self.idle_s)
        else:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"request not received within {self.request_s:g} s")
            self.sock.settimeout(left)
        n = self.sock.recv_into(buffer)
        if n:
            self.begin_request()
        return n


class _Server(ThreadingHTTPServer):
    """A ThreadingHTTPServer that knows its open (keep-alive) connections and serves at
    most ``max_connections`` of them (one thread each)."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        max_connections: int = 1024,
    ):
        self.connections: dict[socket.socket, _DeadlineReader | None] = {}
        self.threads: set[threading.Thread] = set()
        """The connections' threads still running."""
        self.max_connections = max_connections
        self._connections_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Start the connection's thread, making room for it first (see the class)."""
        with self._connections_lock:
            if len(self.connections) >= self.max_connections:
                idle = [(r.idle_since, c) for c, r in self.connections.items() if r and r.idle]
                if not idle:
                    _refuse(request, self.max_connections)
                    self.shutdown_request(request)
                    return
                # CRUCIAL: connections that send nothing must not keep new clients out
                _, oldest = min(idle, key=lambda pair: pair[0])
                del self.connections[oldest]
                with contextlib.suppress(OSError):
                    oldest.shutdown(socket.SHUT_RDWR)
            self.connections[request] = None
        super().process_request(request, client_address)

    def track(self, request: socket.socket, reader: _DeadlineReader) -> None:
        """The connection's reader (whether it is idle), from its thread."""
        with self._connections_lock:
            if request in self.connections:
                self.connections[request] = reader

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self.threads.add(threading.current_thread())
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._connections_lock:
                self.connections.pop(request, None)
                self.threads.discard(threading.current_thread())

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that broke (a client that went away, or ``close``) is not
        an error worth a traceback; anything else is logged."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            logger.debug("connection from %s closed: %s", client_address, error)
        else:
            logger.exception("external input: connection from %s failed", client_address)

    def close_connections(self) -> None:
        """Shut down every open connection."""
        with self._connections_lock:
            connections = list(self.connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def join_connection_threads(self, deadline: float) -> None:
        """Wait until the connections' threads have ended, or ``deadline`` (monotonic)."""
        with self._connections_lock:
            threads = list(self.threads)
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))


def _refuse(request: socket.socket, limit: int) -> None:
    """Answer 503 on a connection that cannot be served (all of them are busy)."""
    body = json.dumps({"error": f"{limit} connections are busy (max_connections); retry"})
    head = (
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\nRetry-After: 1\r\n\r\n"
    )
    with contextlib.suppress(OSError):
        request.settimeout(1.0)
        request.sendall((head + body).encode())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: one connection per client
    # CRUCIAL: headers and body go out in two writes; with Nagle's algorithm the second
    # waits for the client's delayed ACK (40 ms per request on Linux).
    disable_nagle_algorithm = True
    server_version = "hierl-external"
    app: ExternalApp
    token: str | None
    timeout: float  # CRUCIAL: set on the socket; without it an idle client holds a thread
    request_timeout_s: float
    max_request_bytes: int
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # the socket's own reader, replaced by one with a deadline
        self._reader = _DeadlineReader(self.connection, self.timeout, self.request_timeout_s)
        self.rfile = io.BufferedReader(self._reader)
        self.server.track(self.connection, self._reader)

    def handle_one_request(self) -> None:
        self._reader.expect_request()
        super().handle_one_request()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The standard library's protocol errors (a malformed request line, 431 for
        too many or too long headers, 501) as JSON too, closing the connection."""
        self.close_connection = True
        if self.request_version == "HTTP/0.9":  # an unparsable request line: answer 1.1
            self.request_version = self.protocol_version
        phrase = message or self.responses.get(code, ("error",))[0]
        self._error(code, phrase + (f": {explain}" if explain and not message else ""))

    def parse_request(self) -> bool:
        self._reader.begin_request()  # a request read from the buffer alone is under way too
        return super().parse_request()

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s %s", self.address_string(), format % args)

    # -- routes -----------------------------------------------------------------------
    def _client(self) -> str | None:
        return self.headers.get(CLIENT_HEADER)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path != "/healthz" and not self._authorized():
            return
        try:
            if path == "/healthz":
                self._json(200, {"ok": True})
            elif path == "/spec":
                self._json(200, self.app.describe())
            elif path == "/policy":
                model, headers = self.app.policy_model()
                self._send(200, model, "application/octet-stream", headers)
            else:
                self._error(404, f"no route GET {path}; routes: /healthz, /spec, /policy")
        except Exception as e:  # answered, never a dropped connection
            self._fail(e)

    def do_POST(self) -> None:
        if not self._authorized():
            self.close_connection = True  # the body is left unread
            return
        body = self._read_body()
        if body is None:
            return
        parts = [urllib.parse.unquote(p) for p in self.path.split("?", 1)[0].split("/")[1:]]
        try:
            client = self._client()
            if parts == ["episodes"]:
                self._json(200, self.app.handle("start", None, body, client))
            elif len(parts) == 3 and parts[0] == "episodes" and parts[2] in EPISODE_COMMANDS:
                self._json(200, self.app.handle(parts[2], parts[1], body, client))
            elif parts == ["events"]:
                self._json(200, self.app.handle("events", None, body, client))
            else:
                self._error(
                    404,
                    f"no route POST {self.path}; routes: /episodes, /episodes/<id>/"
                    f"{{{','.join(EPISODE_COMMANDS)}}}, /events",
                )
        except Exception as e:
            self._fail(e)

    # -- helpers ----------------------------------------------------------------------
    def _authorized(self) -> bool:
        if not self.token:
            return True
        given = self.headers.get("Authorization", "")
        if bearer_matches(given, self.token):
            return True
        what = "missing" if not given else "wrong"
        self._error(401, f"{what} token: send the header 'Authorization: Bearer <token>'")
        return False

    def _read_body(self) -> dict[str, Any] | None:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True  # a body of unknown length is left unread
            self._error(411, "a POST needs a Content-Length header")
            return None
        if int(length) > self.max_request_bytes:
            self.close_connection = True
            self._error(413, f"body of {length} bytes; at most {self.max_request_bytes}", "body")
            return None
        try:
            raw = self.rfile.read(int(length))
        except TimeoutError:
            self.close_connection = True
            self._error(
                408,
                f"the request was not received within {self.request_timeout_s:g} s "
                "(input_external.request_timeout_s)",
                "body",
            )
            return None
        if len(raw) < int(length):  # the client closed its side early
            self.close_connection = True
            return None
        try:
            body = loads(raw or b"{}")
        except WireError as e:
            self._error(400, str(e), field=e.field)
            return None
        if not isinstance(body, dict):
            self._error(400, f"body must be a JSON object, got {type(body).__name__}", "body")
            return None
        return body

    def _fail(self, error: Exception) -> None:
        if isinstance(error, ConnectionError):
            raise error  # the client is gone: nobody to answer (``handle_error``)
        if isinstance(error, WireError):
            self._error(400, str(error), field=error.field)
        elif isinstance(error, EpisodeError):
            self._error(error.status, str(error))
        else:
            logger.exception("external input: request %s failed", self.path)
            self._error(500, f"{type(error).__name__}: {error}")

    def _error(self, status: int, message: str, field: str | None = None) -> None:
        payload: dict[str, Any] = {"error": message}
        if field is not None:
            payload["field"] = field
        extra = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        self._send(status, json.dumps(payload).encode(), "application/json", extra)

    def _json(self, status: int, payload: Any) -> None:
        # standard JSON only: a Box's infinite bounds become null, never ``Infinity``
        data = json.dumps(encode(payload), allow_nan=False).encode()
        self._send(status, data, "application/json")

    def _send(
        self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        # the answer gets its own time limit, whatever the request's reading left
        self.connection.settimeout(self.request_timeout_s)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
