"""The settings of a served policy (``hierl serve`` flags, ``hierl.serve.deploy`` args)."""

from __future__ import annotations

import dataclasses

from hierl.auth import TOKEN_ENV, token_from_env
from hierl.config import Config
from hierl.evaluators.wire import MAX_BATCH

__all__ = ["TOKEN_ENV", "ServeOptions"]


@dataclasses.dataclass
class ServeOptions(Config):
    """How a checkpoint's policy is served: where, by how many replicas, how batched."""

    name: str = "hierl"
    """The Serve application's name (a trainer's ``serve_deployment.app`` pushes to it)."""
    host: str = "127.0.0.1"
    """Address the HTTP proxy binds to: localhost only unless told otherwise (``0.0.0.0``
    serves every interface)."""
    port: int = 8000
    """HTTP port."""
    route_prefix: str = "/"
    """The app's URL prefix: ``/act``, ``/spec`` and ``/healthz`` are under it."""
    num_replicas: int = 1
    """Replica actors, each holding the policy; requests are spread over them."""
    num_cpus_per_replica: float = 1.0
    """CPUs each replica reserves (fractions allowed); torch uses that many threads."""
    max_batch_size: int = 32
    """Requests one forward pass may take together (Serve's dynamic batching); 1: none."""
    batch_wait_timeout_s: float = 0.005
    """How long a batch waits for more requests once it has one."""
    max_ongoing_requests: int = 100
    """Requests a replica holds at once (queued for a batch or being answered); more
    wait in Serve's proxy.  At least ``max_batch_size``, or a batch could never fill."""
    max_observations: int = MAX_BATCH
    """Observations one ``/act`` request may carry (more: HTTP 400)."""
    max_simulations: int = 1000
    """ALPHAZERO checkpoints: the most MCTS simulations one ``/act`` request may ask for
    (more: HTTP 400); a request without ``simulations`` gets the run's ``num_simulations``,
    at most this."""
    max_request_bytes: int = 16 * 1024 * 1024
    """Request bodies larger than this are refused (HTTP 413) before they are read."""
    body_timeout_s: float = 10.0
    """A request body must arrive whole within this long once its request reaches a
    replica (else HTTP 408): a stalled or trickling client frees its slot."""
    request_timeout_s: float = 30.0
    """A request not answered within this long gets HTTP 503 from its replica (and 408
    from Serve's proxy while it waits there; the proxy keeps the value of the deploy
    that started Serve)."""
    max_body_reads_per_client: int | None = None
    """Requests whose bodies are still arriving that one client address may have at a
    replica at once; more get HTTP 429 at once.  It bounds the slots
    (``max_ongoing_requests``) that slow clients on one address can hold; None: a third
    of ``max_ongoing_requests`` (33 by default).  The address
    is the one Serve's proxy sees: behind a reverse proxy on this machine, the
    ``X-Forwarded-For`` it sets (trusted from 127.0.0.1 only)."""
    auth_token: str | None = dataclasses.field(default=None, repr=False)
    """A shared secret every request except ``/healthz`` must send as ``Authorization:
    Bearer <token>`` (else HTTP 401); None: the ``HIERL_SERVE_TOKEN`` environment
    variable, if set; ``""``: no token."""
    ray_address: str | None = None
    """Join this Ray cluster instead of starting a local instance."""
    allow_imports: tuple[str, ...] = ()
    """Modules the checkpoint's config may import (``callbacks``, ``model.custom_model``,
    ``env`` as ``"module:name"``); others are refused (``hierl serve --allow-import``)."""

    def __post_init__(self) -> None:
        if self.auth_token is None:
            self.auth_token = token_from_env() or ""
        self.check("name", bool(self.name), "must not be empty")
        self.check("port", 0 < self.port < 65536, "must be in 1..65535")
        self.check("route_prefix", self.route_prefix.startswith("/"), "must start with '/'")
        self.check("num_replicas", self.num_replicas >= 1, "must be >= 1")
        self.check("num_cpus_per_replica", self.num_cpus_per_replica > 0, "must be > 0")
        self.check("max_batch_size", self.max_batch_size >= 1, "must be >= 1")
        self.check("batch_wait_timeout_s", self.batch_wait_timeout_s >= 0, "must be >= 0")
        self.check(
            "max_ongoing_requests",
            self.max_ongoing_requests >= self.max_batch_size,
            f"must be >= max_batch_size ({self.max_batch_size}), or a batch could never fill",
        )
        self.check("max_observations", self.max_observations >= 1, "must be >= 1")
        self.check("max_simulations", self.max_simulations >= 1, "must be >= 1")
        self.check("max_request_bytes", self.max_request_bytes >= 1024, "must be >= 1024")
        self.check("request_timeout_s", self.request_timeout_s > 0, "must be > 0")
        self.check(
            "body_timeout_s",
            0 < self.body_timeout_s <= self.request_timeout_s,
            f"must be > 0 and <= request_timeout_s ({self.request_timeout_s:g})",
        )
        if self.max_body_reads_per_client is None:
            self.max_body_reads_per_client = max(1, self.max_ongoing_requests // 3)
        self.check("max_body_reads_per_client", self.max_body_reads_per_client >= 1, "must be >= 1")

    @property
    def url(self) -> str:
        """The app's base URL (without a trailing slash)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{self.route_prefix.rstrip('/')}"

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self) if f.repr
        )
        token = ", auth_token=<set>" if self.auth_token else ""
        return f"ServeOptions({fields}{token})"
