"""A checkpoint's policy as a Ray Serve application with an HTTP JSON endpoint.

``deploy(checkpoint)`` (and ``hierl serve CHECKPOINT``) starts Serve (HTTP on
``127.0.0.1:8000`` unless told otherwise) and runs the app: ``num_replicas`` replicas of
``PolicyServer``, each holding a ``ServedPolicy`` rebuilt
from the checkpoint.  Routes, under the app's ``route_prefix``:

* ``POST /act``: observations -> actions (see ``hierl.serve.policy`` for the JSON);
  concurrent requests are batched into one forward pass by Serve's dynamic batching
  (``max_batch_size`` requests, waiting at most ``batch_wait_timeout_s``);
* ``GET /spec``: the spaces, the checkpoint's algorithm, iteration and content hash;
* ``GET /healthz``: ``{"status": "ok", "version": ...}`` (needs no token).

Bad requests get HTTP 400 with ``{"error": ..., "field": ...}`` naming the field and what
was expected; with an ``auth_token``, requests without ``Authorization: Bearer <token>``
get 401 before anything else (an unknown route too).  Slow clients: a body not whole
within ``body_timeout_s`` gets 408, a request not answered within ``request_timeout_s``
503, and a client address with ``max_body_reads_per_client`` bodies still arriving 429
(Serve's proxy has no deadline for unfinished headers: such connections hold one of its
connections, not a replica's slot).

A trainer with ``serve_deployment={"app": name}`` pushes new weights to every replica
(``hierl.algorithms.serving``): each replica swaps them in between batches, and every
answer names the ``version`` that computed it.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import ipaddress
import json
import logging
import signal
import threading
import time
from pathlib import Path
from typing import Any

from ray import serve
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse

from hierl.algorithms.alphazero.player import is_alphazero_checkpoint
from hierl.algorithms.serving import DEPLOYMENT_NAME, PolicySnapshot
from hierl.auth import bearer_matches
from hierl.evaluators.ray_runtime import ensure_ray
from hierl.evaluators.wire import WireError, encode, loads, short_repr
from hierl.serve.options import TOKEN_ENV, ServeOptions
from hierl.serve.policy import ServedPolicy
from hierl.serve.search import ServedSearch

logger = logging.getLogger(__name__)


class ServeError(RuntimeError):
    """Serve could not start the app (the message says why and what to change)."""


class _JSON(JSONResponse):
    """Standard JSON only: non-finite floats become null."""

    def render(self, content: Any) -> bytes:
        try:
            text = json.dumps(content, allow_nan=False, separators=(",", ":"))
        except ValueError:
            text = json.dumps(encode(content), allow_nan=False, separators=(",", ":"))
        return text.encode()


def _error(status: int, message: str, field: str | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": message}
    if field is not None:
        body["field"] = field
    return _JSON(body, status_code=status)


@serve.deployment(name=DEPLOYMENT_NAME)
class PolicyServer:
    """One replica: the checkpoint's policies behind ``/act``, ``/spec`` and ``/healthz``.

    Args:
        checkpoint: the checkpoint directory (readable from every node with a replica).
        options: the app's settings (batching, token, limits).
    """

    def __init__(self, checkpoint: str, options: ServeOptions):
        import torch

        torch.set_num_threads(max(1, round(options.num_cpus_per_replica)))
        self.options = options
        self.policy = load_served(checkpoint, options)
        self._prefix = options.route_prefix.rstrip("/")
        self._token = options.auth_token.encode() if options.auth_token else None
        self.act_batch.set_max_batch_size(options.max_batch_size)
        self.act_batch.set_batch_wait_timeout_s(options.batch_wait_timeout_s)
        self._receiving: collections.Counter[str] = collections.Counter()
        """Requests per client address whose bodies are still arriving."""

    async def __call__(self, request: Request) -> JSONResponse:
        # CRUCIAL: the replica's own deadline: a client can lift the proxy's
        # (Serve honours an ``X-Request-Timeout-Seconds`` header).
        try:
            async with asyncio.timeout(self.options.request_timeout_s):
                return await self._route(request)
        except TimeoutError:
            return _error(
                503,
                f"not answered within request_timeout_s = {self.options.request_timeout_s:g} "
                "s (the replica is overloaded); retry later",
            )

    async def _route(self, request: Request) -> JSONResponse:
        path = request.url.path
        if self._prefix and path.startswith(self._prefix):
            path = path[len(self._prefix) :]
        path = path.rstrip("/") or "/"
        if path == "/healthz" and request.method == "GET":
            return _JSON({"status": "ok", "version": self.policy.version})
        # the token before anything else: without it a client learns nothing, not even
        # which routes exist
        if not self._authorized(request):
            return _error(401, "missing or wrong token: send 'Authorization: Bearer <token>'")
        routes = {"/act": "POST", "/spec": "GET", "/healthz": "GET"}
        if path not in routes:
            return _error(
                404, f"no route {short_repr(path)}; routes: POST /act, GET /spec, GET /healthz"
            )
        if request.method != routes[path]:
            return _error(405, f"{path} takes {routes[path]}, not {short_repr(request.method)}")
        if path == "/spec":
            return _JSON(self.policy.spec())
        return await self._act(request)

    def _authorized(self, request: Request) -> bool:
        if self._token is None:
            return True
        return bearer_matches(request.headers.get("authorization", ""), self.options.auth_token)

    async def _act(self, request: Request) -> JSONResponse:
        size = request.headers.get("content-length", "")
        if size.isdigit() and int(size) > self.options.max_request_bytes:
            return _error(
                413,
                f"request body of {size} bytes; at most {self.options.max_request_bytes}",
                "body",
            )
        client = request.client.host if request.client else "unknown"
        limit = self.options.max_body_reads_per_client
        if self._receiving[client] >= limit:
            return _error(
                429,
                f"{limit} requests from {client} are still sending their bodies "
                "(max_body_reads_per_client); finish those first",
                "body",
            )
        self._receiving[client] += 1
        try:
            body = await asyncio.wait_for(self._read_body(request), self.options.body_timeout_s)
        except TimeoutError:
            return _error(
                408,
                f"request body not received within body_timeout_s = "
                f"{self.options.body_timeout_s:g} s",
                "body",
            )
        except ClientDisconnect:
            return _error(400, "the client closed the connection before its body ended", "body")
        finally:
            self._receiving[client] -= 1
            if not self._receiving[client]:
                del self._receiving[client]
        if body is None:
            return _error(
                413,
                f"request body over {self.options.max_request_bytes} bytes; at most "
                f"{self.options.max_request_bytes}",
                "body",
            )
        try:
            query = self.policy.parse(loads(body))
        except WireError as e:
            return _error(400, str(e), e.field)
        return _JSON(await self.act_batch(query))

    async def _read_body(self, request: Request) -> bytes | None:
        """The body, or None once it passes ``max_request_bytes``: a chunked request
        has no Content-Length, so the cap counts the bytes as they arrive."""
        limit, size, chunks = self.options.max_request_bytes, 0, []
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.005)
    async def act_batch(self, queries: list[Any]) -> list[dict[str, Any]]:
        """Dynamic batching: the queries of concurrent requests, answered together
        (``set_max_batch_size`` / ``set_batch_wait_timeout_s`` apply the options)."""
        return self.policy.act(queries)

    def update_policy(self, snapshot: PolicySnapshot) -> dict[str, Any]:  # UPDATE_METHOD
        """A trainer's push (``hierl.algorithms.serving.suggest_model``): swap the weights
        in between two batches; returns the new version."""
        return self.policy.update(snapshot)


@dataclasses.dataclass
class ServedApp:
    """A running app: where it answers and what it serves."""

    options: ServeOptions
    spec: dict[str, Any]
    """The app's ``/spec`` at start (spaces, algorithm, iteration, hash)."""

    @property
    def url(self) -> str:
        """The base URL: ``{url}/act``, ``{url}/spec``, ``{url}/healthz``."""
        return self.options.url

    @property
    def name(self) -> str:
        """The Serve application's name (what ``serve_deployment.app`` names)."""
        return self.options.name

    def delete(self) -> None:
        """Stop the app (Serve and the other apps keep running)."""
        serve.delete(self.options.name)


def load_served(checkpoint: str | Path, options: ServeOptions) -> ServedPolicy | ServedSearch:
    """What a replica serves: an ALPHAZERO checkpoint's player with its search
    (``ServedSearch``), else the checkpoint's policies."""
    if is_alphazero_checkpoint(checkpoint):
        return ServedSearch.from_checkpoint(
            checkpoint, options.max_simulations, options.allow_imports
        )
    return ServedPolicy.from_checkpoint(checkpoint, options.max_observations, options.allow_imports)


def deploy(
    checkpoint: str | Path, options: ServeOptions | None = None, **settings: Any
) -> ServedApp:
    """Serve the policy of ``checkpoint`` over HTTP; returns when every replica answers.

    ``settings`` are ``ServeOptions`` fields (``host``,
    ``port``, ``num_replicas``, ``max_batch_size``, ``auth_token``...), over ``options``.

    Raises:
        CheckpointError: the checkpoint is missing, corrupt or holds no servable policy
            (checked in this process first, so the error is the checkpoint's own).
        ConfigError: a setting is invalid.
        ServeError: Serve already runs with other HTTP settings, or the app failed.
    """
    base = (options or ServeOptions()).to_dict()
    options = ServeOptions.from_dict({**base, **settings})
    if not options.auth_token and not _is_loopback(options.host):
        logger.warning(
            "serving on %s without an auth token: anyone who can reach this address can "
            "query the policy; set auth_token (--auth-token or %s)",
            options.host,
            TOKEN_ENV,
        )
    path = Path(checkpoint).expanduser().resolve()
    # Fails here with the checkpoint's own error: a replica would fail the same way, but
    # Serve reports a replica's failure as a remote traceback in a string.
    probe = load_served(path, options)
    try:
        spec = probe.spec()
    finally:
        probe.stop()
    ensure_ray(options.ray_address)
    # Serve's proxy takes the request_timeout_s of the deploy that starts it; every
    # replica keeps its own app's (``PolicyServer.__call__``).
    serve.start(
        http_options={
            "host": options.host,
            "port": options.port,
            "request_timeout_s": options.request_timeout_s,
        }
    )
    _check_http(options)
    app = PolicyServer.options(
        num_replicas=options.num_replicas,
        ray_actor_options={"num_cpus": options.num_cpus_per_replica},
        max_ongoing_requests=options.max_ongoing_requests,
    ).bind(str(path), options)
    try:
        serve.run(
            app,
            name=options.name,
            route_prefix=options.route_prefix,
            # no log line per request: at thousands of requests/s it costs throughput
            logging_config={"enable_access_log": False},
        )
    except Exception as e:  # Serve raises several types: one message
        raise ServeError(f"Serve app '{options.name}' for '{path}' failed to start: {e}") from e
    return ServedApp(options, spec)


def _is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an IP address) only listens on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # another host name: it may resolve to any interface
        return False


def _check_http(options: ServeOptions) -> None:
    """ServeError if Serve already runs in this Ray cluster with another host or port
    (its HTTP settings cannot change while it runs)."""
    from ray.serve.context import _get_global_client  # no public getter in Ray 2.60

    config = _get_global_client().http_config
    if (config.host, config.port) != (options.host, options.port):
        raise ServeError(
            f"Serve already runs in this Ray cluster on {config.host}:{config.port}; it "
            f"cannot also listen on {options.host}:{options.port}: use --host "
            f"{config.host} --port {config.port} or stop Serve first (serve.shutdown())"
        )


def serve_until_interrupted(app: ServedApp, poll_s: float = 1.0) -> None:
    """Block until Ctrl-C or SIGTERM, then stop: delete the app on a cluster that was
    joined (``ray_address``: other apps keep running), else shut Serve down."""

    def terminate(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, terminate) if in_main else None
    try:
        while True:
            time.sleep(poll_s)
    except KeyboardInterrupt:
        pass
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if app.options.ray_address:
            app.delete()
        else:
            serve.shutdown()
