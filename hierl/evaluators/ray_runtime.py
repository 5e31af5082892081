"""Starting or joining Ray, with the settings hierl needs on a small local machine."""

from __future__ import annotations

import os
from typing import Any

# Ray 2.60 enables token auth by default (a warning and a token file in $HOME); local
# runs do not need it.  Usage stats phone home.  Set before ray is imported anywhere.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_COLOR_PREFIX", "0")

DEFAULT_GET_TIMEOUT_S = 600.0
"""Upper bound on any blocking ``ray.get`` hierl makes (a dead actor must not hang us)."""


def ensure_ray(address: str | None = None, **init_kwargs: Any) -> None:
    """Start a local Ray instance, or join ``address``, unless Ray is already up."""
    import ray

    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {"logging_level": "ERROR", "include_dashboard": False}
    kwargs.update(init_kwargs)
    if address:
        ray.init(address=address, **kwargs)
    else:
        ray.init(**kwargs)
