"""The HTTP JSON endpoint of an external-env evaluator (standard library only).

One :class:`ExternalServer` per evaluator that samples, each request on its own thread
(``http.server.ThreadingHTTPServer``, HTTP/1.1 keep-alive).  The routes, all JSON
except ``GET /policy``::

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
401 (missing or wrong token; every route but ``/healthz`` needs it when set), 404
(unknown route or episode), 409, 413, 503.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import socket
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from hierl.auth import TOKEN_ENV, bearer_matches
from hierl.evaluators.external.episodes import EpisodeError
from hierl.evaluators.wire import WireError, encode

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 << 20
"""Largest request body accepted (HTTP 413 above)."""

EPISODE_COMMANDS = ("action", "log_action", "returns", "end")
"""The calls on one episode (``POST /episodes/<id>/<command>``)."""


class ExternalApp(Protocol):
    """What the server serves (an :class:`~hierl.evaluators.external.evaluator.
    ExternalEvaluator`)."""

    def handle(self, command: str, episode_id: str | None, body: dict[str, Any]) -> Any:
        """Run one call (``start``, an episode command or ``events``); raises WireError
        or EpisodeError for bad calls."""

    def describe(self) -> dict[str, Any]:
        """The ``GET /spec`` answer."""

    def policy_model(self) -> tuple[bytes, dict[str, str]]:
        """The TorchScript bytes of the current policy and the headers that describe it."""


class ExternalServer:
    """Serves ``app`` over HTTP on ``host:port`` in a daemon thread.

    Args:
        app: handles the calls (see the module docstring for the routes).
        host, port: where to listen (port 0: a free port; see :attr:`address`).
        token: shared token required as ``Authorization: Bearer <token>`` (None: none;
            a warning is logged when the address is not a loopback one).
        name: who listens (error messages).
        idle_timeout_s: a connection that sends nothing for this long (an idle
            keep-alive, a slow or stalled client) is closed, freeing its thread.

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
    ):
        handler = type(
            "Handler", (_Handler,), {"app": app, "token": token, "timeout": idle_timeout_s}
        )
        try:
            self.httpd = _Server((host, port), handler)
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

    def close(self) -> None:
        """Stop serving, release the port and close the clients' open connections (a
        client waiting on one gets an error instead of waiting for its timeout)."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.httpd.close_connections()
        self._thread.join(timeout=10)


def _is_loopback(host: str) -> bool:
    """Whether ``host`` (an address) only takes connections from this machine."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class _Server(ThreadingHTTPServer):
    """A ThreadingHTTPServer that knows its open (keep-alive) connections."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]):
        self.connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, handler)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self.connections.add(request)
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._connections_lock:
                self.connections.discard(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that broke (a client that went away, or :meth:`close`) is not
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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: one connection per client
    # CRUCIAL: headers and body go out in two writes; with Nagle's algorithm the second
    # waits for the client's delayed ACK (40 ms per request on Linux).
    disable_nagle_algorithm = True
    server_version = "hierl-external"
    app: ExternalApp
    token: str | None
    timeout: float  # CRUCIAL: set on the socket; without it an idle client holds a thread

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s %s", self.address_string(), format % args)

    # -- routes -----------------------------------------------------------------------
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
            if parts == ["episodes"]:
                self._json(200, self.app.handle("start", None, body))
            elif len(parts) == 3 and parts[0] == "episodes" and parts[2] in EPISODE_COMMANDS:
                self._json(200, self.app.handle(parts[2], parts[1], body))
            elif parts == ["events"]:
                self._json(200, self.app.handle("events", None, body))
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
        if int(length) > MAX_BODY_BYTES:
            self.close_connection = True
            self._error(413, f"body of {length} bytes; at most {MAX_BODY_BYTES}")
            return None
        raw = self.rfile.read(int(length))
        try:
            body = json.loads(raw or b"{}")
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            self._error(400, f"body is not valid JSON: {e}", field="body")
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
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
