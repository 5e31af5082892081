"""The ALPHAZERO loop's runtime: Ray calls, or the same calls run eagerly in-process.

With ``num_self_play_workers=0`` every component is a plain object in the driver and
each call runs at once (its result wrapped in a ``LocalRef``); waits return the oldest
result.  The loop's code is the same either way.
"""

from __future__ import annotations

from typing import Any


class LocalRef:
    """A finished in-process call (the ``num_self_play_workers=0`` runtime)."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


class Runtime:
    """Calls, waits and gets: Ray's, or their in-process (eager, FIFO) equivalents."""

    def __init__(self, use_ray: bool, timeout_s: float):
        self.use_ray = use_ray
        self.timeout_s = timeout_s

    def call(self, handle: Any, method: str, *args: Any, num_returns: int = 1) -> Any:
        if self.use_ray:
            fn = getattr(handle, method)
            if num_returns != 1:
                fn = fn.options(num_returns=num_returns)
            return fn.remote(*args)
        args = tuple(a.value if isinstance(a, LocalRef) else a for a in args)
        out = getattr(handle, method)(*args)
        return tuple(LocalRef(v) for v in out) if num_returns != 1 else LocalRef(out)

    def wait(self, refs: list[Any]) -> Any:
        """One finished ref of ``refs`` (in-process: the oldest)."""
        if not self.use_ray:
            return refs[0]
        import ray

        ready, _ = ray.wait(refs, num_returns=1, timeout=self.timeout_s)
        if not ready:
            raise TimeoutError(f"no AlphaZero task finished within {self.timeout_s}s")
        return ready[0]

    def get(self, ref: Any) -> Any:
        if not self.use_ray:
            return ref.value
        import ray

        return ray.get(ref, timeout=self.timeout_s)

    def put(self, value: Any) -> Any:
        if not self.use_ray:
            return LocalRef(value)
        import ray

        return ray.put(value)
