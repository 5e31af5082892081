"""Observation preprocessing and env-side actions: numpy only, no torch.

* Preprocessors (``get_preprocessor``) -- numpy, batched conversion of observations in
  Gymnasium's *vectorized* layout into float32 arrays that can be fed to a network.
* ``to_env_action`` -- maps sampled actions onto what the environment accepts (clipping
  to Box bounds, shifting by ``start`` for discrete spaces).

The samplers and the PolicyEvaluator import this module directly (it imports no torch).
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = [
    "BoxPreprocessor",
    "DictPreprocessor",
    "DiscretePreprocessor",
    "ImagePreprocessor",
    "MultiBinaryPreprocessor",
    "MultiDiscretePreprocessor",
    "Preprocessor",
    "TuplePreprocessor",
    "get_preprocessor",
    "is_image_space",
    "to_env_action",
]


def is_image_space(space: gym.Space) -> bool:
    """Whether ``space`` is an image: a uint8 Box of 3 dims (channel-first ``(C, H, W)``
    or channel-last ``(H, W, C)``: see ``hierl.models.networks.image_layout``) or of
    2 dims (one ``(H, W)`` frame)."""
    return isinstance(space, spaces.Box) and len(space.shape) in (2, 3) and space.dtype == np.uint8


MIN_IMAGE_SIDE = 16
"""A 3-dim Box that is not uint8 but whose two largest dims are at least this is taken for
an image of the wrong dtype (an error); smaller ones (board planes) are vectors."""


def _reject_non_uint8_image(space: gym.Space) -> None:
    """ValueError for a 3-dim, image-sized Box that is not uint8 (see MIN_IMAGE_SIDE)."""
    if not (isinstance(space, spaces.Box) and len(space.shape) == 3) or space.dtype == np.uint8:
        return
    if min(sorted(space.shape)[1:]) >= MIN_IMAGE_SIDE:
        raise ValueError(
            f"observation space {space} has the shape of an image {space.shape} but dtype "
            f"{space.dtype}: images must be uint8 (values 0..255), (C, H, W) or (H, W, C); "
            "cast the frames to uint8, or flatten a non-image observation "
            "(gymnasium.wrappers.FlattenObservation)"
        )


class Preprocessor:
    """Converts batched observations of one space into a float32 array.

    Attributes:
        shape: Output shape of a single item (without the batch dimension).
        size: Number of elements of a single item (``prod(shape)``).
    """

    shape: tuple[int, ...]

    def __init__(self, space: gym.Space, shape: tuple[int, ...]) -> None:
        """Store the space and the per-item output shape."""
        self.space = space
        self.shape = tuple(int(s) for s in shape)

    @property
    def size(self) -> int:
        """Number of output elements per item."""
        return math.prod(self.shape)

    def transform(self, batched_obs: Any) -> np.ndarray:
        """Convert a batch of observations to a float32 array of shape ``(N, *shape)``."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(space={self.space}, shape={self.shape})"


class BoxPreprocessor(Preprocessor):
    """Flattens a (non-image) Box observation to ``(N, prod(shape))`` float32.

    Float32 input that is already 2-D is returned without copying.
    """

    def __init__(self, space: spaces.Box) -> None:
        """Create a flattening preprocessor for ``space``."""
        super().__init__(space, (math.prod(space.shape),))

    def transform(self, batched_obs: Any) -> np.ndarray:
        """Return ``batched_obs`` as float32 of shape ``(N, size)`` (a view when possible)."""
        x = np.asarray(batched_obs, dtype=np.float32)
        return x.reshape(-1, self.shape[0])


class ImagePreprocessor(Preprocessor):
    """Keeps uint8 images as they are: no copy, no float conversion (the model converts
    them once, on its device, and scales by 1/255)."""

    def __init__(self, space: spaces.Box) -> None:
        """Create an image preprocessor for a uint8 Box of 2 or 3 dims."""
        super().__init__(space, space.shape)

    def transform(self, batched_obs: Any) -> np.ndarray:
        """Return the images as uint8 of shape ``(N, *space.shape)`` (a view when possible).

        Raises:
            ValueError: the frames are not uint8 (the message names the dtype).
        """
        x = np.asarray(batched_obs)
        if x.dtype != np.uint8:
            raise ValueError(
                f"image observations must be uint8 (values 0..255) as their space {self.space} "
                f"declares, got dtype {x.dtype} (shape {x.shape})"
            )
        return x.reshape(-1, *self.shape)


class DiscretePreprocessor(Preprocessor):
    """One-hot encodes a Discrete observation (respecting ``space.start``)."""

    def __init__(self, space: spaces.Discrete) -> None:
        """Create a one-hot preprocessor with ``space.n`` columns."""
        super().__init__(space, (int(space.n),))
        self.n = int(space.n)
        self.start = int(space.start)

    def transform(self, batched_obs: Any) -> np.ndarray:
        """Return one-hot rows of shape ``(N, n)``; column ``obs - start`` is set to 1."""
        idx = np.asarray(batched_obs, dtype=np.int64).reshape(-1) - self.start
        if idx.size and (idx.min() < 0 or idx.max() >= self.n):
            raise ValueError(f"observation out of range for {self.space}")
        out = np.zeros((idx.shape[0], self.n), dtype=np.float32)
        out[np.arange(idx.shape[0]), idx] = 1.0
        return out


class MultiDiscretePreprocessor(Preprocessor):
    """Concatenates one one-hot vector per component of a MultiDiscrete observation."""

    def __init__(self, space: spaces.MultiDiscrete) -> None:
        """Create a preprocessor producing ``sum(nvec)`` columns."""
        nvec = np.asarray(space.nvec, dtype=np.int64).reshape(-1)
        super().__init__(space, (int(nvec.sum()),))
        self.nvec = nvec
        self.start = np.asarray(space.start, dtype=np.int64).reshape(-1)
        self.offsets = np.concatenate(([0], np.cumsum(nvec)[:-1])).astype(np.int64)

    def transform(self, batched_obs: Any) -> np.ndarray:
        """Return concatenated one-hots of shape ``(N, sum(nvec))``."""
        x = np.asarray(batched_obs, dtype=np.int64).reshape(-1, self.nvec.size) - self.start
        if x.size and ((x < 0).any() or (x >= self.nvec).any()):
            raise ValueError(f"observation out of range for {self.space}")
        out = np.zeros((x.shape[0], self.shape[0]), dtype=np.float32)
        out[np.arange(x.shape[0])[:, None], x + self.offsets] = 1.0
        return out


class MultiBinaryPreprocessor(Preprocessor):
    """Flattens a MultiBinary observation to float32."""

    def __init__(self, space: spaces.MultiBinary) -> None:
        """Create a preprocessor producing ``prod(space.shape)`` columns."""
        super().__init__(space, (math.prod(space.shape),))

    def transform(self, batched_obs: Any) -> np.ndarray:
        """Return the bits as float32 of shape ``(N, size)``."""
        x = np.asarray(batched_obs, dtype=np.float32)
        return x.reshape(-1, self.shape[0])


class _ConcatPreprocessor(Preprocessor):
    """Shared logic of Dict/Tuple preprocessors: concatenation of flat sub-preprocessors."""

    def __init__(self, space: gym.Space, children: list[Preprocessor]) -> None:
        super().__init__(space, (sum(c.size for c in children),))
        self.children = children

    def _parts(self, batched_obs: Any) -> list[Any]:
        raise NotImplementedError

    def transform(self, batched_obs: Any) -> np.ndarray:
        """Return the concatenation of every sub-space's flat encoding, ``(N, size)``."""
        parts = [
            c.transform(o) for c, o in zip(self.children, self._parts(batched_obs), strict=True)
        ]
        if not parts:
            raise ValueError(f"cannot preprocess empty space {self.space}")
        return np.concatenate(parts, axis=1)


class DictPreprocessor(_ConcatPreprocessor):
    """Concatenates the flat encodings of a Dict space's entries in the space's key order."""

    def __init__(self, space: spaces.Dict) -> None:
        """Create sub-preprocessors for every entry (nested images are rejected)."""
        self.keys = list(space.spaces.keys())
        super().__init__(space, [_flat_preprocessor(s) for s in space.spaces.values()])

    def _parts(self, batched_obs: Any) -> list[Any]:
        return [batched_obs[k] for k in self.keys]


class TuplePreprocessor(_ConcatPreprocessor):
    """Concatenates the flat encodings of a Tuple space's entries in order."""

    def __init__(self, space: spaces.Tuple) -> None:
        """Create sub-preprocessors for every entry (nested images are rejected)."""
        super().__init__(space, [_flat_preprocessor(s) for s in space.spaces])

    def _parts(self, batched_obs: Any) -> list[Any]:
        if len(batched_obs) != len(self.children):
            raise ValueError(f"expected {len(self.children)} tuple entries, got {len(batched_obs)}")
        return list(batched_obs)


_SUPPORTED_OBS = "Box, Discrete, MultiDiscrete, MultiBinary, Dict, Tuple"


def _flat_preprocessor(space: gym.Space) -> Preprocessor:
    """Preprocessor for a space nested inside a Dict/Tuple (must produce a flat vector)."""
    if is_image_space(space):
        raise ValueError(
            f"nested images are not supported: image space {space} inside a Dict/Tuple "
            "observation space"
        )
    return get_preprocessor(space)


def get_preprocessor(space: gym.Space) -> Preprocessor:
    """Return the preprocessor for an observation space.

    * uint8 Box of 2 or 3 dims: an image, kept as uint8 (``ImagePreprocessor``);
      a 3-dim Box of another dtype is an error when image-sized (``MIN_IMAGE_SIDE``).
    * Other Box: flattened to ``(prod(shape),)`` float32 (no copy for 2-D float32 input).
    * Discrete: one-hot of size ``n`` (value ``start`` maps to column 0).
    * MultiDiscrete: concatenated one-hots, ``sum(nvec)`` columns.
    * MultiBinary: flattened float32.
    * Dict / Tuple: concatenation of the flat sub-encodings (Dict in its key order).

    Raises:
        ValueError: For unsupported spaces, images nested in Dict/Tuple spaces, or an
            image-sized 3-dim Box that is not uint8.
    """
    if isinstance(space, spaces.Box):
        _reject_non_uint8_image(space)
        return ImagePreprocessor(space) if is_image_space(space) else BoxPreprocessor(space)
    if isinstance(space, spaces.Discrete):
        return DiscretePreprocessor(space)
    if isinstance(space, spaces.MultiDiscrete):
        return MultiDiscretePreprocessor(space)
    if isinstance(space, spaces.MultiBinary):
        return MultiBinaryPreprocessor(space)
    if isinstance(space, spaces.Dict):
        return DictPreprocessor(space)
    if isinstance(space, spaces.Tuple):
        return TuplePreprocessor(space)
    raise ValueError(
        f"Unsupported observation space {space!r} ({type(space).__name__}); "
        f"supported spaces are: {_SUPPORTED_OBS}"
    )


_SUPPORTED_ACTIONS = "Discrete, MultiDiscrete, Box"


def to_env_action(action_space: gym.Space, actions: np.ndarray) -> np.ndarray:
    """Map a batch of sampled actions onto values the environment accepts.

    * Box: each action is reshaped to ``action_space.shape``, clipped to ``[low, high]``
      (infinite bounds leave values untouched) and cast to the space's dtype (rounded first
      for integer dtypes).
    * Discrete: ``action_space.start`` is added (sampled indices ``0..n-1`` map onto the
      space) and the result is int64 of shape ``(N,)``.
    * MultiDiscrete: ``action_space.start`` is added per component; int64 ``(N, *nvec.shape)``.

    Only the environment sees the clipped/shifted action: the training batch should keep the
    *unclipped* sample so that its log-probability under the policy stays correct (the
    standard SB3/CleanRL choice).

    Raises:
        ValueError: For unsupported action spaces.
    """
    if isinstance(action_space, spaces.Box):
        a = np.asarray(actions).reshape(-1, *action_space.shape)
        dtype = action_space.dtype
        a = np.rint(a) if dtype.kind in "iu" else a.astype(dtype, copy=False)
        # np.maximum/np.minimum (new arrays: the policy's actions stay unclipped) rather
        # than np.clip, whose dispatch costs more than one env's action
        a = np.maximum(a, action_space.low)
        np.minimum(a, action_space.high, out=a)
        return a.astype(dtype, copy=False)
    if isinstance(action_space, spaces.Discrete):
        a = np.asarray(actions, dtype=np.int64).reshape(-1)
        start = int(action_space.start)
        return a + start if start else a
    if isinstance(action_space, spaces.MultiDiscrete):
        a = np.asarray(actions, dtype=np.int64).reshape(-1, *action_space.nvec.shape)
        start = np.asarray(action_space.start, dtype=np.int64)
        return a + start if start.any() else a
    raise ValueError(
        f"Unsupported action space {action_space!r} ({type(action_space).__name__}); "
        f"supported action spaces are: {_SUPPORTED_ACTIONS}"
    )
