"""Neural network models, observation preprocessing and action distributions.

This module contains everything a policy needs to turn raw Gymnasium observations into
action distributions and value estimates:

* :class:`ModelConfig` -- a plain dataclass describing the network architecture.
* Preprocessors (:func:`get_preprocessor`) -- numpy, batched conversion of observations in
  Gymnasium's *vectorized* layout into float32 arrays that can be fed to a network.
* Torch modules -- :class:`MLP`, :class:`NatureCNN`, :class:`ActorCritic` and its recurrent
  variant :class:`RecurrentActorCritic` (picked by :func:`make_actor_critic` when
  ``ModelConfig.use_lstm`` is set).
* Action distributions -- :class:`Categorical`, :class:`MultiCategorical` and
  :class:`DiagGaussian`, selected for an action space by :func:`get_action_dist`.
* :func:`to_env_action` -- maps sampled actions onto what the environment accepts (clipping
  to Box bounds, shifting by ``start`` for discrete spaces).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import nn
from torch.nn import functional as F

__all__ = [
    "MLP",
    "ActionDistribution",
    "ActorCritic",
    "BoxPreprocessor",
    "Categorical",
    "DiagGaussian",
    "DictPreprocessor",
    "DiscretePreprocessor",
    "ImagePreprocessor",
    "ModelConfig",
    "MultiBinaryPreprocessor",
    "MultiCategorical",
    "MultiDiscretePreprocessor",
    "NatureCNN",
    "Preprocessor",
    "RecurrentActorCritic",
    "TuplePreprocessor",
    "get_action_dist",
    "get_activation",
    "get_preprocessor",
    "is_image_space",
    "make_actor_critic",
    "to_env_action",
]

# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------

_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "elu": nn.ELU,
    "silu": nn.SiLU,
}

#: Default convolution stack of the Nature DQN network: (out_channels, kernel, stride).
NATURE_CNN_FILTERS: tuple[tuple[int, int, int], ...] = ((32, 8, 4), (64, 4, 2), (64, 3, 1))


def get_activation(name: str) -> type[nn.Module]:
    """Return the ``nn.Module`` class for an activation name.

    Args:
        name: One of ``"tanh"``, ``"relu"``, ``"elu"``, ``"silu"`` (case-insensitive).

    Raises:
        ValueError: If the name is unknown; the message lists the valid names.
    """
    key = name.lower() if isinstance(name, str) else name
    try:
        return _ACTIVATIONS[key]
    except (KeyError, TypeError):
        valid = ", ".join(repr(k) for k in _ACTIVATIONS)
        raise ValueError(f"Unknown activation {name!r}; valid activations are: {valid}") from None


@dataclass
class ModelConfig:
    """Architecture of an :class:`ActorCritic` model.

    Attributes:
        hiddens: Sizes of the hidden layers of the fully connected torso. For image
            observations the CNN replaces the fully connected torso.
        activation: Hidden-layer activation: ``"tanh"``, ``"relu"``, ``"elu"`` or ``"silu"``.
        vf_share_layers: If True, the policy and value heads share a single torso; otherwise
            each head gets its own torso of the same architecture.
        conv_filters: Convolution stack for image observations as ``(out_channels, kernel,
            stride)`` per layer. ``None`` selects the Nature-CNN defaults
            ``((32, 8, 4), (64, 4, 2), (64, 3, 1))``.
        free_log_std: For continuous (Box) actions, use a state-independent learned
            log-standard-deviation parameter (PPO style) instead of predicting it.
        init_log_std: Initial value of the free log-std parameter.
        use_lstm: Recurrent model: an LSTM follows the torso and both heads read its
            output (:class:`RecurrentActorCritic`; with it the heads always share the torso
            and the LSTM, so ``vf_share_layers`` does not apply). Policies then carry state
            through ``compute_actions`` and train on sequences (truncated BPTT).
        lstm_cell_size: Hidden (and cell) state size of the LSTM.
        max_seq_len: Longest sequence of consecutive steps the loss unrolls the LSTM over
            (truncated backpropagation through time); longer episode segments are cut into
            several sequences, each started from its recorded state.

    Lists are accepted for the tuple fields and normalised to tuples.
    """

    hiddens: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    vf_share_layers: bool = False
    conv_filters: tuple[tuple[int, int, int], ...] | None = None
    free_log_std: bool = True
    init_log_std: float = 0.0
    use_lstm: bool = False
    lstm_cell_size: int = 64
    max_seq_len: int = 20

    def __post_init__(self) -> None:
        """Normalise list-valued fields to tuples and validate the configuration."""
        self.hiddens = tuple(int(h) for h in self.hiddens)
        if any(h <= 0 for h in self.hiddens):
            raise ValueError(f"hiddens must be positive integers, got {self.hiddens}")
        get_activation(self.activation)
        self.activation = self.activation.lower()
        if self.conv_filters is not None:
            filters = []
            for layer in self.conv_filters:
                layer = tuple(int(v) for v in layer)
                if len(layer) != 3 or any(v <= 0 for v in layer):
                    raise ValueError(
                        "each conv_filters entry must be (out_channels, kernel, stride) of "
                        f"positive integers, got {layer}"
                    )
                filters.append(layer)
            if not filters:
                raise ValueError("conv_filters must not be empty (use None for the defaults)")
            self.conv_filters = tuple(filters)
        self.vf_share_layers = bool(self.vf_share_layers)
        self.free_log_std = bool(self.free_log_std)
        self.init_log_std = float(self.init_log_std)
        self.use_lstm = bool(self.use_lstm)
        self.lstm_cell_size = int(self.lstm_cell_size)
        if self.lstm_cell_size <= 0:
            raise ValueError(
                f"lstm_cell_size must be a positive integer, got {self.lstm_cell_size}"
            )
        self.max_seq_len = int(self.max_seq_len)
        if self.max_seq_len <= 0:
            raise ValueError(f"max_seq_len must be a positive integer, got {self.max_seq_len}")


# ---------------------------------------------------------------------------------------------
# Preprocessors
# ---------------------------------------------------------------------------------------------


def is_image_space(space: gym.Space) -> bool:
    """Return True for a Box of shape ``(H, W, C)`` and dtype uint8 (treated as an image)."""
    return isinstance(space, spaces.Box) and len(space.shape) == 3 and space.dtype == np.uint8


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
    """Keeps a uint8 ``(H, W, C)`` image as is, cast to float32 (scaling happens in the CNN)."""

    def __init__(self, space: spaces.Box) -> None:
        """Create an image preprocessor for an ``(H, W, C)`` uint8 Box."""
        super().__init__(space, space.shape)

    def transform(self, batched_obs: Any) -> np.ndarray:
        """Return the images as float32 of shape ``(N, H, W, C)``."""
        x = np.asarray(batched_obs, dtype=np.float32)
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

    * Box of shape ``(H, W, C)`` and dtype uint8: image, kept as ``(H, W, C)`` float32.
    * Other Box: flattened to ``(prod(shape),)`` float32 (no copy for 2-D float32 input).
    * Discrete: one-hot of size ``n`` (value ``start`` maps to column 0).
    * MultiDiscrete: concatenated one-hots, ``sum(nvec)`` columns.
    * MultiBinary: flattened float32.
    * Dict / Tuple: concatenation of the flat sub-encodings (Dict in its key order).

    Raises:
        ValueError: For unsupported spaces or images nested in Dict/Tuple spaces.
    """
    if isinstance(space, spaces.Box):
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


# ---------------------------------------------------------------------------------------------
# Torch modules
# ---------------------------------------------------------------------------------------------


def _init_layer(layer: nn.Linear | nn.Conv2d, gain: float) -> nn.Linear | nn.Conv2d:
    """Orthogonal weight init with ``gain`` and zero bias; returns the layer."""
    nn.init.orthogonal_(layer.weight, gain=gain)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)
    return layer


class MLP(nn.Module):
    """Fully connected network with orthogonal initialisation.

    Hidden layers are ``Linear -> activation`` (orthogonal gain ``sqrt(2)``, zero bias). When
    ``out_size`` is given, a final linear layer without activation (gain ``out_gain``) is added.

    Attributes:
        out_features: Size of the output (``out_size``, else the last hidden size, else
            ``in_size`` when there are no layers at all).
    """

    def __init__(
        self,
        in_size: int,
        hiddens: Sequence[int],
        activation: str,
        out_size: int | None = None,
        out_gain: float = 1.0,
    ) -> None:
        """Build the layers; see the class docstring."""
        super().__init__()
        act_cls = get_activation(activation)
        layers: list[nn.Module] = []
        last = int(in_size)
        for h in hiddens:
            layers.append(_init_layer(nn.Linear(last, int(h)), math.sqrt(2.0)))
            layers.append(act_cls())
            last = int(h)
        if out_size is not None:
            layers.append(_init_layer(nn.Linear(last, int(out_size)), out_gain))
            last = int(out_size)
        self.in_features = int(in_size)
        self.out_features = last
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the network to ``x`` of shape ``(B, in_size)``."""
        return self.net(x)


class NatureCNN(nn.Module):
    """Convolutional torso for ``(N, H, W, C)`` images with values in ``[0, 255]``.

    The input is scaled by ``1/255`` and permuted to NCHW, then passed through the conv stack
    (ReLU after each layer), flattened, and projected by ``Linear -> 512 -> ReLU``.

    Attributes:
        out_features: Output size (512).
    """

    hidden_size = 512

    def __init__(
        self,
        obs_shape: Sequence[int],
        conv_filters: Sequence[Sequence[int]] | None = None,
    ) -> None:
        """Build the network for images of shape ``(H, W, C)``.

        Args:
            obs_shape: Image shape ``(H, W, C)``.
            conv_filters: ``(out_channels, kernel, stride)`` per conv layer; ``None`` uses the
                Nature DQN stack ``((32, 8, 4), (64, 4, 2), (64, 3, 1))``.

        Raises:
            ValueError: If the shape is not 3-D or the image is too small for the filters.
        """
        super().__init__()
        if len(obs_shape) != 3:
            raise ValueError(f"NatureCNN expects an (H, W, C) shape, got {tuple(obs_shape)}")
        h, w, c = (int(v) for v in obs_shape)
        filters = NATURE_CNN_FILTERS if conv_filters is None else conv_filters
        layers: list[nn.Module] = []
        in_ch = c
        for out_ch, kernel, stride in filters:
            layers.append(
                _init_layer(nn.Conv2d(in_ch, int(out_ch), int(kernel), int(stride)), math.sqrt(2.0))
            )
            layers.append(nn.ReLU())
            in_ch = int(out_ch)
        layers.append(nn.Flatten())
        self.conv = nn.Sequential(*layers)
        try:
            with torch.no_grad():
                n_flat = int(self.conv(torch.zeros(1, c, h, w)).shape[1])
        except RuntimeError as e:
            raise ValueError(
                f"image shape {(h, w, c)} is too small for conv_filters {tuple(filters)}: {e}"
            ) from e
        self.obs_shape = (h, w, c)
        self.fc = nn.Sequential(
            _init_layer(nn.Linear(n_flat, self.hidden_size), math.sqrt(2.0)), nn.ReLU()
        )
        self.out_features = self.hidden_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the network to images ``x`` of shape ``(N, H, W, C)``."""
        x = x.float().div(255.0).permute(0, 3, 1, 2)
        return self.fc(self.conv(x))


class ActorCritic(nn.Module):
    """Policy and value network for a Gymnasium observation/action space pair.

    The observation (already preprocessed with :attr:`preprocessor`) is fed to a torso --
    :class:`NatureCNN` for image observations, otherwise an :class:`MLP` with
    ``config.hiddens`` -- followed by a policy head (orthogonal gain 0.01) producing the
    action distribution inputs and a value head (gain 1.0). With
    ``config.vf_share_layers`` both heads share one torso; otherwise each has its own.

    For Box actions with ``config.free_log_std`` the policy head only outputs the means and a
    state-independent ``log_std`` parameter is appended, so Gaussian distribution inputs are
    always ``[mean, log_std]`` with ``2 * dim`` columns.

    Attributes:
        preprocessor: The observation preprocessor for ``obs_space``.
        dist_class: Action distribution class (or ``functools.partial``) for ``action_space``.
        num_dist_inputs: Number of columns of the distribution inputs.
        log_std: The free log-std parameter, or ``None``.
    """

    def __init__(self, obs_space: gym.Space, action_space: gym.Space, config: ModelConfig) -> None:
        """Build torsos and heads for the given spaces and configuration.

        Raises:
            ValueError: If ``config.use_lstm`` is set (build :class:`RecurrentActorCritic`,
                e.g. through :func:`make_actor_critic`).
        """
        if config.use_lstm:
            raise ValueError(
                "ActorCritic is feed-forward but config.use_lstm=True; use "
                "RecurrentActorCritic (make_actor_critic picks the right class)"
            )
        super().__init__()
        self.config = config
        self.preprocessor = get_preprocessor(obs_space)
        self.dist_class, self.num_dist_inputs = get_action_dist(action_space)
        self.is_image = isinstance(self.preprocessor, ImagePreprocessor)

        self.pi_torso = self._make_torso()
        self.vf_torso = None if config.vf_share_layers else self._make_torso()

        use_free_log_std = isinstance(action_space, spaces.Box) and config.free_log_std
        head_out = self.num_dist_inputs // 2 if use_free_log_std else self.num_dist_inputs
        self.pi_head = _init_layer(nn.Linear(self.pi_torso.out_features, head_out), 0.01)
        self.vf_head = _init_layer(nn.Linear(self.pi_torso.out_features, 1), 1.0)
        if use_free_log_std:
            self.log_std: nn.Parameter | None = nn.Parameter(
                torch.full((head_out,), float(config.init_log_std))
            )
        else:
            self.register_parameter("log_std", None)

    def _make_torso(self) -> MLP | NatureCNN:
        if self.is_image:
            return NatureCNN(self.preprocessor.shape, self.config.conv_filters)
        return MLP(self.preprocessor.size, self.config.hiddens, self.config.activation)

    @staticmethod
    def _as_float(obs: torch.Tensor) -> torch.Tensor:
        return obs if obs.dtype == torch.float32 else obs.float()

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Compute ``(dist_inputs (B, num_dist_inputs), values (B,))`` for preprocessed obs."""
        obs = self._as_float(obs)
        features = self.pi_torso(obs)
        dist_inputs = self.pi_head(features)
        if self.log_std is not None:
            dist_inputs = torch.cat([dist_inputs, self.log_std.expand_as(dist_inputs)], dim=-1)
        vf_features = features if self.vf_torso is None else self.vf_torso(obs)
        values = self.vf_head(vf_features).squeeze(-1)
        return dist_inputs, values

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """Compute only the value estimates ``(B,)`` (the policy head is skipped)."""
        obs = self._as_float(obs)
        torso = self.pi_torso if self.vf_torso is None else self.vf_torso
        return self.vf_head(torso(obs)).squeeze(-1)


class RecurrentActorCritic(nn.Module):
    """Actor-critic with an LSTM between the torso and the heads (``ModelConfig.use_lstm``).

    Each observation goes through the torso (:class:`NatureCNN` for images, else an
    :class:`MLP` with ``config.hiddens``), then through a single-layer LSTM of
    ``config.lstm_cell_size`` units; the policy head (orthogonal gain 0.01) and the value head
    (gain 1.0) both read the LSTM output. Distribution inputs are laid out as in
    :class:`ActorCritic` (including the free log-std for Box actions).

    The recurrent state of one agent is ``[h, c]``, two float32 vectors of
    ``lstm_cell_size`` (:meth:`get_initial_state`: zeros). :meth:`forward` runs padded
    sequences ``(N, T, ...)`` from one state per sequence; acting is ``T = 1``. The LSTM is
    causal, so outputs at valid steps do not depend on any padding after them.

    Attributes:
        is_recurrent: Always True; policies look for it to carry state.
        max_seq_len: ``config.max_seq_len``, the longest sequence the loss unrolls.
        cell_size: ``config.lstm_cell_size``.
        preprocessor, dist_class, num_dist_inputs, log_std: As in :class:`ActorCritic`.
    """

    is_recurrent = True

    def __init__(self, obs_space: gym.Space, action_space: gym.Space, config: ModelConfig) -> None:
        """Build torso, LSTM and heads for the given spaces and configuration."""
        super().__init__()
        self.config = config
        self.preprocessor = get_preprocessor(obs_space)
        self.dist_class, self.num_dist_inputs = get_action_dist(action_space)
        self.is_image = isinstance(self.preprocessor, ImagePreprocessor)
        self.max_seq_len = config.max_seq_len
        self.cell_size = config.lstm_cell_size
        if self.is_image:
            self.torso: MLP | NatureCNN = NatureCNN(self.preprocessor.shape, config.conv_filters)
        else:
            self.torso = MLP(self.preprocessor.size, config.hiddens, config.activation)
        self.lstm = nn.LSTM(self.torso.out_features, self.cell_size, batch_first=True)
        for name, param in self.lstm.named_parameters():
            if name.startswith("bias"):
                nn.init.zeros_(param)
            else:
                nn.init.orthogonal_(param, gain=1.0)
        use_free_log_std = isinstance(action_space, spaces.Box) and config.free_log_std
        head_out = self.num_dist_inputs // 2 if use_free_log_std else self.num_dist_inputs
        self.pi_head = _init_layer(nn.Linear(self.cell_size, head_out), 0.01)
        self.vf_head = _init_layer(nn.Linear(self.cell_size, 1), 1.0)
        if use_free_log_std:
            self.log_std: nn.Parameter | None = nn.Parameter(
                torch.full((head_out,), float(config.init_log_std))
            )
        else:
            self.register_parameter("log_std", None)

    def get_initial_state(self) -> list[np.ndarray]:
        """The state at an episode's start: ``[h, c]``, zeros of shape ``(cell_size,)``."""
        return [np.zeros(self.cell_size, dtype=np.float32) for _ in range(2)]

    def forward(
        self, obs: torch.Tensor, state: Sequence[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """Unroll over sequences of preprocessed observations.

        Args:
            obs: ``(N, T, *obs_shape)``: N sequences of T steps.
            state: ``[h, c]``, each ``(N, cell_size)``: the state before each sequence's
                first step.

        Returns:
            ``(dist_inputs (N, T, num_dist_inputs), values (N, T), [h, c])`` where ``[h, c]``
            is the state after step T of every sequence.
        """
        n, t = obs.shape[0], obs.shape[1]
        x = obs.reshape(n * t, *obs.shape[2:])
        x = x if x.dtype == torch.float32 else x.float()
        features = self.torso(x).reshape(n, t, -1)
        h, c = (s.to(features.dtype).unsqueeze(0).contiguous() for s in state)
        out, (h_out, c_out) = self.lstm(features, (h, c))
        dist_inputs = self.pi_head(out)
        if self.log_std is not None:
            dist_inputs = torch.cat([dist_inputs, self.log_std.expand_as(dist_inputs)], dim=-1)
        values = self.vf_head(out).squeeze(-1)
        return dist_inputs, values, [h_out.squeeze(0), c_out.squeeze(0)]


def make_actor_critic(
    obs_space: gym.Space, action_space: gym.Space, config: ModelConfig
) -> ActorCritic | RecurrentActorCritic:
    """The default model for ``config``: :class:`RecurrentActorCritic` when ``use_lstm``."""
    if config.use_lstm:
        return RecurrentActorCritic(obs_space, action_space, config)
    return ActorCritic(obs_space, action_space, config)


# ---------------------------------------------------------------------------------------------
# Action distributions
# ---------------------------------------------------------------------------------------------


class ActionDistribution:
    """Base class of action distributions parameterised by a batch of network outputs.

    Attributes:
        inputs: The distribution inputs, shape ``(B, required_input_dim)``.
    """

    def __init__(self, inputs: torch.Tensor) -> None:
        """Store the distribution inputs."""
        self.inputs = inputs

    def sample(self) -> torch.Tensor:
        """Draw a stochastic action for every batch row."""
        raise NotImplementedError

    def deterministic_sample(self) -> torch.Tensor:
        """Return the most likely action (mode / mean) for every batch row."""
        raise NotImplementedError

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        """Log-probability (density) of ``actions``, shape ``(B,)``."""
        raise NotImplementedError

    def entropy(self) -> torch.Tensor:
        """Entropy per batch row, shape ``(B,)``."""
        raise NotImplementedError

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        """KL divergence ``KL(self || other)`` per batch row, shape ``(B,)``."""
        raise NotImplementedError

    @staticmethod
    def required_input_dim(action_space: gym.Space) -> int:
        """Number of input columns needed for ``action_space``."""
        raise NotImplementedError


def _check_same_type(dist: ActionDistribution, other: ActionDistribution) -> None:
    """Raise TypeError unless ``other`` is of the same distribution type as ``dist``."""
    if not isinstance(other, type(dist)):
        raise TypeError(
            f"KL between {type(dist).__name__} and {type(other).__name__} is not supported"
        )


def _finite_log(log_probs: torch.Tensor) -> torch.Tensor:
    """Replace ``-inf`` log-probabilities (masked logits) by the most negative finite value.

    Multiplied by a zero probability this yields 0 instead of NaN, in value and gradient.
    """
    return log_probs.clamp(min=torch.finfo(log_probs.dtype).min)


class Categorical(ActionDistribution):
    """Categorical distribution over ``n`` actions given logits of shape ``(B, n)``.

    Actions are int64 indices of shape ``(B,)`` in ``0..n-1``.
    """

    def __init__(self, inputs: torch.Tensor) -> None:
        """Create the distribution from (unnormalised) logits."""
        super().__init__(inputs)
        self.log_probs = F.log_softmax(inputs, dim=-1)

    @property
    def probs(self) -> torch.Tensor:
        """Action probabilities, shape ``(B, n)``."""
        return self.log_probs.exp()

    def sample(self) -> torch.Tensor:
        """Sample indices, shape ``(B,)`` int64."""
        # Exponential race: argmax_i p_i / E_i with E_i ~ Exp(1) is distributed as p;
        # several times faster than torch.multinomial for small batches.
        probs = self.probs.detach()
        return (probs / torch.empty_like(probs).exponential_()).argmax(dim=-1)

    def deterministic_sample(self) -> torch.Tensor:
        """Return the argmax indices, shape ``(B,)`` int64."""
        return self.inputs.argmax(dim=-1)

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        """Log-probability of integer ``actions`` of shape ``(B,)``."""
        idx = actions.long().unsqueeze(-1)
        return self.log_probs.gather(-1, idx).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        """Entropy ``-sum p log p``, shape ``(B,)``."""
        return -(self.probs * _finite_log(self.log_probs)).sum(-1)

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        """``sum p (log p - log q)``, shape ``(B,)``."""
        _check_same_type(self, other)
        diff = _finite_log(self.log_probs) - _finite_log(other.log_probs)
        return (self.probs * diff).sum(-1)

    @staticmethod
    def required_input_dim(action_space: gym.Space) -> int:
        """``action_space.n`` logits."""
        return int(action_space.n)


class MultiCategorical(ActionDistribution):
    """Independent categoricals for a MultiDiscrete space.

    Inputs are the concatenated logits of every component (``sum(nvec)`` columns); actions are
    int64 of shape ``(B, k)``. ``logp``, ``entropy`` and ``kl`` are summed over components.
    """

    def __init__(self, inputs: torch.Tensor, nvec: Sequence[int]) -> None:
        """Split ``inputs`` into one :class:`Categorical` per entry of ``nvec``."""
        super().__init__(inputs)
        self.nvec = tuple(int(n) for n in np.asarray(nvec).reshape(-1))
        if inputs.shape[-1] != sum(self.nvec):
            raise ValueError(
                f"MultiCategorical with nvec={self.nvec} needs {sum(self.nvec)} input "
                f"columns, got {inputs.shape[-1]}"
            )
        self.cats = [Categorical(x) for x in torch.split(inputs, self.nvec, dim=-1)]

    def sample(self) -> torch.Tensor:
        """Sample actions, shape ``(B, k)`` int64."""
        return torch.stack([c.sample() for c in self.cats], dim=-1)

    def deterministic_sample(self) -> torch.Tensor:
        """Per-component argmax, shape ``(B, k)`` int64."""
        return torch.stack([c.deterministic_sample() for c in self.cats], dim=-1)

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        """Sum of component log-probabilities of ``actions`` ``(B, k)``, shape ``(B,)``."""
        actions = actions.reshape(-1, len(self.cats))
        return torch.stack([c.logp(actions[:, i]) for i, c in enumerate(self.cats)], -1).sum(-1)

    def entropy(self) -> torch.Tensor:
        """Sum of component entropies, shape ``(B,)``."""
        return torch.stack([c.entropy() for c in self.cats], dim=-1).sum(-1)

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        """Sum of component KL divergences, shape ``(B,)``."""
        _check_same_type(self, other)
        return torch.stack([a.kl(b) for a, b in zip(self.cats, other.cats, strict=True)], -1).sum(
            -1
        )

    @staticmethod
    def required_input_dim(action_space: gym.Space) -> int:
        """``sum(action_space.nvec)`` logits."""
        return int(np.asarray(action_space.nvec).sum())


class DiagGaussian(ActionDistribution):
    """Diagonal Gaussian given inputs ``[mean, log_std]`` of shape ``(B, 2 * dim)``.

    ``log_std`` is clamped to ``[-20, 2]``. Actions have shape ``(B, dim)``; ``logp``,
    ``entropy`` and ``kl`` are summed over action dimensions.
    """

    LOG_STD_MIN = -20.0
    LOG_STD_MAX = 2.0

    def __init__(self, inputs: torch.Tensor) -> None:
        """Split ``inputs`` into mean and (clamped) log-std."""
        super().__init__(inputs)
        if inputs.shape[-1] % 2:
            raise ValueError(
                f"DiagGaussian needs an even number of input columns, got {inputs.shape[-1]}"
            )
        mean, log_std = torch.chunk(inputs, 2, dim=-1)
        self.mean = mean
        self.log_std = log_std.clamp(self.LOG_STD_MIN, self.LOG_STD_MAX)
        self.std = self.log_std.exp()

    def sample(self) -> torch.Tensor:
        """Sample ``mean + std * eps``, shape ``(B, dim)``."""
        with torch.no_grad():
            return self.mean + self.std * torch.randn_like(self.mean)

    def deterministic_sample(self) -> torch.Tensor:
        """Return the mean, shape ``(B, dim)``."""
        return self.mean

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        """Log-density of ``actions`` (reshaped to ``(B, dim)``), shape ``(B,)``."""
        actions = actions.reshape(self.mean.shape).to(self.mean.dtype)
        z = (actions - self.mean) / self.std
        return (-0.5 * z.pow(2) - self.log_std - 0.5 * math.log(2.0 * math.pi)).sum(-1)

    def entropy(self) -> torch.Tensor:
        """Entropy ``sum(log_std + 0.5 * log(2 pi e))``, shape ``(B,)``."""
        return (self.log_std + 0.5 * math.log(2.0 * math.pi * math.e)).sum(-1)

    def kl(self, other: ActionDistribution) -> torch.Tensor:
        """Closed-form KL between diagonal Gaussians, shape ``(B,)``."""
        _check_same_type(self, other)
        var_ratio_num = self.std.pow(2) + (self.mean - other.mean).pow(2)
        return (other.log_std - self.log_std + var_ratio_num / (2.0 * other.std.pow(2)) - 0.5).sum(
            -1
        )

    @staticmethod
    def required_input_dim(action_space: gym.Space) -> int:
        """``2 * prod(action_space.shape)`` inputs (means and log-stds)."""
        return 2 * math.prod(action_space.shape)


_SUPPORTED_ACTIONS = "Discrete, MultiDiscrete, Box"


def get_action_dist(
    action_space: gym.Space,
) -> tuple[type[ActionDistribution] | functools.partial, int]:
    """Return ``(distribution class, number of distribution inputs)`` for an action space.

    * Discrete -> :class:`Categorical` with ``n`` inputs.
    * MultiDiscrete -> ``functools.partial(MultiCategorical, nvec=...)`` with ``sum(nvec)``.
    * Box (any shape, flattened) -> :class:`DiagGaussian` with ``2 * prod(shape)`` inputs.

    Raises:
        ValueError: For any other space; the message lists the supported ones.
    """
    if isinstance(action_space, spaces.Discrete):
        return Categorical, Categorical.required_input_dim(action_space)
    if isinstance(action_space, spaces.MultiDiscrete):
        nvec = tuple(int(n) for n in np.asarray(action_space.nvec).reshape(-1))
        return (
            functools.partial(MultiCategorical, nvec=nvec),
            MultiCategorical.required_input_dim(action_space),
        )
    if isinstance(action_space, spaces.Box):
        return DiagGaussian, DiagGaussian.required_input_dim(action_space)
    raise ValueError(
        f"Unsupported action space {action_space!r} ({type(action_space).__name__}); "
        f"supported action spaces are: {_SUPPORTED_ACTIONS}"
    )


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
        a = np.rint(a) if np.issubdtype(dtype, np.integer) else a.astype(dtype, copy=False)
        a = np.clip(a, action_space.low, action_space.high)
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
