"""The JSON wire format of spaces, observations and actions (logged data, serving,
external envs).

Observations travel as nested JSON lists in Gymnasium's batched layout: a batch of
``n`` observations of a ``Box(shape)`` space is an ``(n, *shape)`` list, of a
``Discrete`` space a list of ``n`` integers.  ``decode_observations`` turns such a
value into the array a policy takes, or raises ``WireError`` naming the field and
what was expected (the HTTP layers answer it with status 400); ``encode`` turns
actions and other arrays back into JSON values.  Numpy and Gymnasium only: no torch,
no Ray, so external clients and servers can use it.
"""

from __future__ import annotations

import json
import math
import reprlib
from typing import Any

import gymnasium as gym
import numpy as np

MAX_BATCH = 4096
"""Default limit on the observations of one request (``decode_observations``)."""


class WireError(ValueError):
    """A value on the wire does not fit: ``field`` names it, the message says what was
    expected (shape, dtype, range)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


# -- spaces ------------------------------------------------------------------------------
def space_to_json(space: gym.Space) -> dict[str, Any]:
    """A JSON description of a Box / Discrete / MultiDiscrete / MultiBinary space."""
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": str(space.dtype),
            "low": space.low.tolist(),
            "high": space.high.tolist(),
        }
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist()}
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    return {"type": type(space).__name__, "shape": list(space.shape or ())}


def describe_space(space: gym.Space | dict[str, Any]) -> str:
    """``Box(uint8, (84, 84, 4))`` / ``Discrete(2)``: for error messages."""
    data = space if isinstance(space, dict) else space_to_json(space)
    if data.get("type") == "Discrete":
        return f"Discrete({data['n']})"
    if data.get("type") == "Box":
        return f"Box({data['dtype']}, {tuple(data['shape'])})"
    return f"{data.get('type')}({data.get('shape', data.get('nvec', data.get('n')))})"


# -- values ------------------------------------------------------------------------------
def _row_layout(space: gym.Space) -> tuple[tuple[int, ...], np.dtype]:
    """The per-row shape and dtype of ``space``'s batched array."""
    if isinstance(space, gym.spaces.Discrete):
        return (), np.dtype(np.int64)
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        return tuple(space.shape), np.dtype(space.dtype)
    raise WireError(
        "space",
        f"{type(space).__name__} spaces have no JSON wire format (Box, Discrete, "
        "MultiDiscrete and MultiBinary have): flatten it (gymnasium.wrappers."
        "FlattenObservation)",
    )


def decode_observations(
    value: Any, space: gym.Space, field: str = "observations", max_batch: int = MAX_BATCH
) -> np.ndarray:
    """A batch of observations of ``space`` from its JSON value (a list of rows).

    Raises:
        WireError: not a list of rows of the space's shape, more than ``max_batch``
            rows, values of the wrong kind (non-numbers; fractions for an integer
            space), NaN or infinite numbers (once cast to the space's dtype: ``1e300``
            is infinite in float32), or values outside the bounds of an integer space
            (uint8 images: 0..255).
    """
    shape, dtype = _row_layout(space)
    expected = f"a list of observations of shape {list(shape)} ({describe_space(space)})"
    if not isinstance(value, list) or not value:
        raise WireError(field, f"expected {expected}, got {short_repr(value)}")
    if len(value) > max_batch:
        raise WireError(field, f"{len(value)} observations; at most {max_batch} per request")
    try:
        array = np.asarray(value, dtype=np.float64)
    except OverflowError:  # an integer beyond float64 (JSON has no size limit)
        raise WireError(field, f"holds a number too large for {dtype}") from None
    except (TypeError, ValueError, RecursionError):
        raise WireError(
            field, f"expected {expected} of numbers; rows are ragged or hold non-numbers"
        ) from None
    if array.shape[1:] != shape:
        raise WireError(
            field,
            f"observations of shape {list(array.shape[1:])}; expected {list(shape)} "
            f"({describe_space(space)})",
        )
    if dtype.kind in "iub":
        if not np.isfinite(array).all():
            raise WireError(field, "holds NaN or infinite values; observations must be finite")
        if not np.array_equal(array, np.round(array)):
            raise WireError(field, f"{describe_space(space)} takes integers, got fractions")
        low, high = (np.broadcast_to(b, shape) for b in _integer_bounds(space, dtype))
        bad = (array < low) | (array > high)
        if bad.any():
            row, *index = (int(i) for i in np.argwhere(bad)[0])
            where = f"observation {row}" + (f", element {tuple(index)}" if index else "")
            raise WireError(
                field,
                f"value {array[(row, *index)]:g} in {where}; {describe_space(space)} takes "
                f"[{low[tuple(index)]:g}, {high[tuple(index)]:g}] there",
            )
    return _stored(array, dtype, field)


def _stored(array: np.ndarray, dtype: np.dtype, field: str) -> np.ndarray:
    """``array`` (float64, as parsed) cast to ``dtype``, checked *after* the cast: a
    number finite in JSON may not be in float32 (``1e300`` becomes inf), and an integer
    at the edge of float64's precision may not fit an int64."""
    with np.errstate(over="ignore", invalid="ignore"):
        stored = array.astype(dtype)
    if dtype.kind == "f":
        bad = ~np.isfinite(stored)
    elif dtype.kind in "iu":
        bad = stored.astype(np.float64) != array
    else:
        return stored
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        value = array[index]
        where = f"value {value:g}" + (f" at {list(index)}" if index else "")
        if not np.isfinite(value):
            raise WireError(field, f"holds NaN or infinite values ({where}); they must be finite")
        if dtype.kind == "f":
            why = f"|x| <= {np.finfo(dtype).max:.4g}): it would become infinite"
        else:
            why = f"{np.iinfo(dtype).min}..{np.iinfo(dtype).max}): it would wrap around"
        raise WireError(field, f"{where} does not fit {dtype}, the dtype it is stored in ({why}")
    return stored


def decode_number(
    value: Any, field: str, dtype: np.dtype | type = np.float32, required: bool = False
) -> float:
    """A JSON number stored as ``dtype`` (rewards, log-likelihoods: float32), checked
    after the cast; a missing (null) value is 0.0 unless ``required``.

    Raises:
        WireError: not a number, NaN or infinite, or beyond ``dtype`` (``1e300`` for
            float32).
    """
    if value is None:
        if required:
            raise WireError(field, "missing; expected a finite number")
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise WireError(field, f"expected a finite number, got {short_repr(value)}")
    try:
        array = np.asarray(float(value), dtype=np.float64)
    except OverflowError:
        raise WireError(field, f"expected a finite number, got {short_repr(value)}") from None
    return float(_stored(array, np.dtype(dtype), field))


def decode_floats(value: Any, field: str, size: int | None, dtype: np.dtype | type) -> np.ndarray:
    """A flat JSON list of ``size`` numbers (None: any) as a 1-d ``dtype`` array, checked
    after the cast (``action_dist_inputs``).

    Raises:
        WireError: not a flat list of that many numbers, or a value that is NaN or
            infinite once stored as ``dtype``.
    """
    expected = f"a list of {size if size is not None else 'some'} numbers"
    if not isinstance(value, list):
        raise WireError(field, f"expected {expected}, got {short_repr(value)}")
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError, OverflowError, RecursionError):
        raise WireError(field, f"expected {expected}") from None
    if array.ndim != 1 or (size is not None and array.size != size):
        raise WireError(field, f"expected {expected}, got shape {list(array.shape)}")
    return _stored(array, np.dtype(dtype), field)


def loads(body: bytes) -> Any:
    """The JSON value of a request body.

    Raises:
        WireError: ``body``: not UTF-8, malformed, an integer of more than 4300 digits
            or nested too deeply to parse (each an HTTP 400, never a server error).
    """
    try:
        return json.loads(body)
    except UnicodeDecodeError as e:
        raise WireError("body", f"malformed JSON: not UTF-8 ({e.reason})") from None
    except ValueError as e:  # JSONDecodeError, or an integer beyond the 4300-digit limit
        raise WireError("body", f"malformed JSON: {e}") from None
    except RecursionError:
        raise WireError("body", "malformed JSON: nested too deeply") from None


def _integer_bounds(space: gym.Space, dtype: np.dtype) -> tuple[Any, Any]:
    """The lowest and highest valid values: scalars, or per element (MultiDiscrete)."""
    if isinstance(space, gym.spaces.Discrete):
        return float(space.start), float(space.start + space.n - 1)
    if isinstance(space, gym.spaces.MultiDiscrete):
        start = np.asarray(getattr(space, "start", 0), np.float64)
        return start, start + space.nvec - 1
    if isinstance(space, gym.spaces.MultiBinary):
        return 0.0, 1.0
    if dtype.kind == "b":
        return 0.0, 1.0
    info = np.iinfo(dtype)
    return float(info.min), float(info.max)


def encode(value: Any) -> Any:
    """A standard JSON value for arrays, numpy scalars and containers of them (nested
    lists of Python numbers): NaN and infinite floats, in arrays too, become null (JSON
    has no such numbers; a Box's infinite bound reads as "unbounded"), so the result
    dumps with ``json.dumps(..., allow_nan=False)``."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            return encode(value.tolist())
        return value.tolist()
    if isinstance(value, np.generic):
        return encode(value.item())
    if isinstance(value, dict):
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


_REPR = reprlib.Repr()  # keyword arguments only from Python 3.12
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlist, _REPR.maxdict = 3, 60, 60, 6, 4


def short_repr(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to about ``limit`` characters, however large or deeply nested
    the value (a client's value quoted in an error message)."""
    text = _REPR.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
