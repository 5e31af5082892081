"""The settings of ``input: "external"``: where the evaluators listen for PolicyClients.

The trainer holds one ``ExternalInputConfig`` as its config field
``input_external`` and passes it, with its ``sample_timeout_s``, to every evaluator in
the ``InputSpec`` (``InputSpec.external``).
"""

from __future__ import annotations

import dataclasses

from hierl.auth import TOKEN_ENV, token_from_env
from hierl.config import ConfigError

EXTERNAL = "external"
"""The input name of external environments (``input: "external"``)."""

AUTH_TOKEN_ENV = TOKEN_ENV
"""The environment variable read for the shared token when ``auth_token`` is None
(``hierl.auth.TOKEN_ENV``, as for ``hierl serve`` and PolicyClient)."""


@dataclasses.dataclass
class ExternalInputConfig:
    """Where and how evaluators serve external episodes (``input: "external"``).

    Each evaluator that samples runs one HTTP server: with ``num_evaluators=0`` the
    driver's local evaluator on ``port``; with ``num_evaluators=N`` remote evaluator ``i``
    (1..N) on ``port + i`` (and the local one none).
    """

    host: str = "127.0.0.1"
    """Address to bind; the default takes connections from this machine only (use
    ``0.0.0.0`` to accept others, ideally with an ``auth_token``)."""
    port: int = 9900
    """The first port (evaluator ``i`` listens on ``port + i``); 0: a free port per
    evaluator, read back with ``ExternalEvaluator.address``."""
    episode_timeout_s: float = 60.0
    """An episode with no call for this long is dropped (a client that vanished): its
    steps never reach a training batch."""
    auth_token: str | None = None
    """Shared token clients send as ``Authorization: Bearer <token>`` (others get 401);
    None: the ``HIERL_SERVE_TOKEN`` environment variable if set, else no token.  Prefer
    the variable: a token set here is stored in checkpoints with the rest of the config."""
    max_episodes: int = 10_000
    """Episodes open at once; starting one more is refused (HTTP 503)."""
    max_episode_steps: int = 100_000
    """Steps one episode may hold; a call that would open one more is refused (HTTP 413):
    end the episode (``truncated=True``) and start another."""
    max_info_bytes: int = 64 * 1024
    """The JSON size of one episode's ``info`` (merged over its ``log_returns`` and
    ``end_episode`` calls); a call that would pass it is refused (HTTP 413) and the
    episode keeps its info."""
    max_request_bytes: int = 64 * 1024 * 1024
    """Request bodies larger than this are refused (HTTP 413) before they are read."""
    request_timeout_s: float = 30.0
    """Once a request's first byte arrives, its request line, headers and body must all
    arrive within this long, or the connection is closed (HTTP 408 when the headers
    were read): a client that trickles a request holds its thread no longer."""
    max_connections: int = 1024
    """Connections served at once (one thread each); when all are taken, the idlest
    keep-alive connection is closed for a new one, or, if none is idle, the new one is
    answered 503 and closed."""

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"config field 'input_external.port' = {self.port} is not a port")
        if self.episode_timeout_s <= 0:
            raise ConfigError(
                f"config field 'input_external.episode_timeout_s' = {self.episode_timeout_s} "
                "must be > 0"
            )
        for name, least in [
            ("max_episodes", 1),
            ("max_episode_steps", 1),
            ("max_info_bytes", 2),
            ("max_request_bytes", 1024),
            ("max_connections", 1),
        ]:
            if getattr(self, name) < least:
                raise ConfigError(
                    f"config field 'input_external.{name}' = {getattr(self, name)} must be "
                    f">= {least}"
                )
        if not self.request_timeout_s > 0:
            raise ConfigError(
                f"config field 'input_external.request_timeout_s' = {self.request_timeout_s} "
                "must be > 0"
            )

    def token(self) -> str | None:
        """The token in force: ``auth_token``, else ``$HIERL_SERVE_TOKEN``, else None."""
        return self.auth_token or token_from_env()

    def port_for(self, worker_index: int) -> int:
        """The port evaluator ``worker_index`` listens on (0 stays 0: a free port)."""
        return self.port + worker_index if self.port else 0
