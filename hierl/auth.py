"""The shared token of hierl's HTTP servers (``hierl serve`` and ``input: "external"``).

Standard library only: ``hierl.serve.client.PolicyClient`` imports it inside apps
that have neither numpy, torch nor Ray.
"""

from __future__ import annotations

import hmac
import os

TOKEN_ENV = "HIERL_SERVE_TOKEN"
"""The environment variable read for the shared token when none is given (by the
servers and by PolicyClient)."""


CLIENT_HEADER = "X-Hierl-Client"
"""The header a ``PolicyClient`` names itself with (its
``client_id``): with a token set, the external-env server binds each episode to the
client that started it (clients share the token, so it cannot tell them apart)."""


def token_from_env() -> str | None:
    """``$HIERL_SERVE_TOKEN``, or None when it is unset or empty."""
    return os.environ.get(TOKEN_ENV) or None


def bearer_matches(header: str, token: str) -> bool:
    """Whether an ``Authorization`` header value is ``Bearer <token>`` (the scheme in any
    case)."""
    scheme, _, given = header.partition(" ")
    # CRUCIAL: a constant-time comparison: the answer's timing does not leak the token.
    return scheme.lower() == "bearer" and hmac.compare_digest(given.encode(), token.encode())
