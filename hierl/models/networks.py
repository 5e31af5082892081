"""Model configuration and torch networks.

* ``ModelConfig`` -- a plain dataclass describing the network architecture.
* Torch modules -- ``MLP``, ``NatureCNN``, ``ActorCritic`` and its recurrent
  variant ``RecurrentActorCritic`` (picked by ``make_actor_critic`` when
  ``ModelConfig.use_lstm`` is set).
* Custom models -- ``make_custom_model`` builds the module registered (with
  ``hierl.models.registry.register_model``) under ``ModelConfig.custom_model``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from hierl.config import ConfigError
from hierl.models.distributions import get_action_dist
from hierl.models.preprocessors import ImagePreprocessor, get_preprocessor
from hierl.models.registry import get_model_factory

__all__ = [
    "MLP",
    "ActorCritic",
    "ModelConfig",
    "NatureCNN",
    "RecurrentActorCritic",
    "check_default_model",
    "get_activation",
    "image_layout",
    "make_actor_critic",
    "make_custom_model",
    "make_torso",
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


WEIGHT_INITS = ("orthogonal", "torch")
"""The values of ``ModelConfig.weight_init``."""


@dataclass
class ModelConfig:
    """Architecture of an ``ActorCritic`` model.

    Lists are accepted for the tuple fields and normalised to tuples.
    """

    hiddens: tuple[int, ...] = (64, 64)
    """Sizes of the hidden layers of the fully connected torso. For image observations the
    CNN replaces the fully connected torso."""
    activation: str = "tanh"
    """Hidden-layer activation: ``"tanh"``, ``"relu"``, ``"elu"`` or ``"silu"``."""
    weight_init: str = "orthogonal"
    """How the default models' layers start: ``"orthogonal"`` (orthogonal weights with
    gain sqrt(2) in hidden layers and each head's own gain, zero biases: the custom of
    OpenAI Baselines' and CleanRL's PPO and DQN) or ``"torch"`` (PyTorch's own
    ``nn.Linear`` / ``nn.Conv2d`` / ``nn.LSTM`` init, as SB3 and the TD3 and SAC authors'
    code start their off-policy networks: the default of DDPG, TD3 and SAC)."""
    vf_share_layers: bool | None = None
    """If True, the policy and value heads share a single torso; if False each head gets
    its own torso of the same architecture; None (default): shared for image
    observations (one CNN forward per step instead of two, as in SB3's and CleanRL's
    Atari policies), separate for the others."""
    conv_filters: tuple[tuple[int, int, int], ...] | None = None
    """Convolution stack for image observations as ``(out_channels, kernel, stride)`` per
    layer. ``None`` selects the Nature-CNN defaults ``((32, 8, 4), (64, 4, 2), (64, 3,
    1))``."""
    channels_first: bool | None = None
    """The layout of 3-dim image observations: True ``(C, H, W)``, False ``(H, W, C)``,
    None (default): channel-first when the first dim is smaller than the last (``(4, 84,
    84)`` from a frame stack), else channel-last (``(84, 84, 3)``); see
    ``image_layout``."""
    free_log_std: bool = True
    """For continuous (Box) actions, use a state-independent learned log-standard-deviation
    parameter (PPO style) instead of predicting it."""
    init_log_std: float = 0.0
    """Initial value of the free log-std parameter."""
    use_lstm: bool = False
    """Recurrent model: an LSTM follows the torso and both heads read its output
    (``RecurrentActorCritic``; with it the heads always share the torso and the LSTM, so
    ``vf_share_layers`` does not apply). Policies then carry state through
    ``compute_actions`` and train on sequences (truncated BPTT)."""
    lstm_cell_size: int = 64
    """Hidden (and cell) state size of the LSTM."""
    max_seq_len: int = 20
    """Longest sequence of consecutive steps the loss unrolls the LSTM over (truncated
    backpropagation through time); longer episode segments are cut into several
    sequences, each started from its recorded state."""
    custom_model: str | None = None
    """The name of a model registered with ``hierl.register_model`` to use instead of the
    default actor-critic (the fields above then apply only as that model reads them);
    None: the default. Configs and checkpoints store the name, never code: restoring
    needs the name registered again."""
    custom_model_config: dict = field(default_factory=dict)
    """Settings for the custom model (JSON values: they are stored in checkpoints), handed
    to its factory inside this config."""
    numpy_acting: bool = True
    """Act on CPU through numpy views of the default feed-forward model's weights
    (``NumpyActor``) for batches of up to 64 rows: the same function without torch's
    per-op cost, ~5x less time per step for one env with 64x64 MLPs. It applies only to
    MLP torsos with Categorical or DiagGaussian actions (others act through torch), and
    draws from numpy's global generator instead of torch's. False: always torch."""
    numpy_learning: bool = True
    """Let policies whose loss has a numpy version learn through it on the same views of
    the weights (PPO with DiagGaussian actions: ``hierl.algorithms.ppo_numpy``): the
    gradients torch's autograd computes, about half the time per 64-row minibatch of
    64x64 MLPs on CPU; the step is still the policy's torch optimizer. False: always
    torch."""

    def __post_init__(self) -> None:
        """Normalise list-valued fields to tuples and validate the configuration."""
        self.hiddens = tuple(int(h) for h in self.hiddens)
        if any(h <= 0 for h in self.hiddens):
            raise ValueError(f"hiddens must be positive integers, got {self.hiddens}")
        get_activation(self.activation)
        self.activation = self.activation.lower()
        if self.weight_init not in WEIGHT_INITS:
            valid = ", ".join(repr(w) for w in WEIGHT_INITS)
            raise ValueError(f"Unknown weight_init {self.weight_init!r}; valid values: {valid}")
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
        if self.vf_share_layers is not None:
            self.vf_share_layers = bool(self.vf_share_layers)
        if self.channels_first is not None:
            self.channels_first = bool(self.channels_first)
        self.free_log_std = bool(self.free_log_std)
        self.init_log_std = float(self.init_log_std)
        self.use_lstm = bool(self.use_lstm)
        self.lstm_cell_size = int(self.lstm_cell_size)
        if self.lstm_cell_size <= 0:
            raise ValueError(
                f"lstm_cell_size must be a positive integer, got {self.lstm_cell_size}"
            )
        self.numpy_acting = bool(self.numpy_acting)
        self.numpy_learning = bool(self.numpy_learning)
        self.max_seq_len = int(self.max_seq_len)
        if self.max_seq_len <= 0:
            raise ValueError(f"max_seq_len must be a positive integer, got {self.max_seq_len}")
        if self.custom_model is not None:
            get_model_factory(self.custom_model)  # ConfigError listing the registered ones
            if self.use_lstm:
                raise ConfigError(
                    f"config field 'model.use_lstm' = True builds the default recurrent "
                    f"model, but model.custom_model = {self.custom_model!r} is set; a custom "
                    "model is recurrent by defining is_recurrent = True"
                )
        try:
            json.dumps(self.custom_model_config)
        except (TypeError, ValueError) as e:
            raise ConfigError(
                f"config field 'model.custom_model_config' = {self.custom_model_config!r} "
                f"must hold JSON values (it is stored in checkpoints): {e}"
            ) from e


# ---------------------------------------------------------------------------------------------
# Torch modules
# ---------------------------------------------------------------------------------------------


def _init_layer(
    layer: nn.Linear | nn.Conv2d, gain: float, weight_init: str = "orthogonal"
) -> nn.Linear | nn.Conv2d:
    """Orthogonal weight init with ``gain`` and zero bias, or for ``weight_init="torch"``
    the layer as PyTorch initialised it; returns the layer."""
    if weight_init == "torch":
        return layer
    nn.init.orthogonal_(layer.weight, gain=gain)
    if layer.bias is not None:
        nn.init.zeros_(layer.bias)
    return layer


class MLP(nn.Module):
    """Fully connected network with orthogonal initialisation (or PyTorch's).

    Hidden layers are ``Linear -> activation`` (orthogonal gain ``sqrt(2)``, zero bias). When
    ``out_size`` is given, a final linear layer without activation (gain ``out_gain``) is added.
    With ``weight_init="torch"`` every layer keeps PyTorch's init (``out_gain`` unused).

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
        weight_init: str = "orthogonal",
    ) -> None:
        """Build the layers; see the class docstring."""
        super().__init__()
        act_cls = get_activation(activation)
        layers: list[nn.Module] = []
        last = int(in_size)
        for h in hiddens:
            layers.append(_init_layer(nn.Linear(last, int(h)), math.sqrt(2.0), weight_init))
            layers.append(act_cls())
            last = int(h)
        if out_size is not None:
            layers.append(_init_layer(nn.Linear(last, int(out_size)), out_gain, weight_init))
            last = int(out_size)
        self.in_features = int(in_size)
        self.out_features = last
        self.net = nn.Sequential(*layers)

    @classmethod
    def from_config(
        cls, in_size: int, config: ModelConfig, out_size: int | None = None, out_gain: float = 1.0
    ) -> MLP:
        """The MLP of ``config``'s ``hiddens``, ``activation`` and ``weight_init``."""
        return cls(
            in_size, config.hiddens, config.activation, out_size, out_gain, config.weight_init
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the network to ``x`` of shape ``(B, in_size)``."""
        return self.net(x)


def image_layout(shape: Sequence[int], channels_first: bool | None = None) -> tuple[int, int, int]:
    """``(C, H, W)`` of images of ``shape``, whose layout is given or read from the shape.

    The rule (``channels_first`` None): a 3-dim shape is channel-first ``(C, H, W)`` when
    its first dim is smaller than its last, else channel-last ``(H, W, C)``; a 2-dim shape
    ``(H, W)`` is one channel.  Pass ``channels_first`` (``ModelConfig.channels_first``)
    for images the rule misreads.

    Raises:
        ValueError: ``shape`` has neither 2 nor 3 dims, or (with ``channels_first`` None)
            its smallest dim is the middle one.
    """
    dims = tuple(int(v) for v in shape)
    if len(dims) == 2:
        return (1, *dims)
    if len(dims) != 3:
        raise ValueError(f"images are (H, W), (C, H, W) or (H, W, C); got shape {dims}")
    if channels_first is None:
        if dims[1] < min(dims[0], dims[2]):
            raise ValueError(
                f"image shape {dims} is neither (C, H, W) nor (H, W, C): its smallest dim is "
                "the middle one; set model.channels_first, or reshape the frames"
            )
        channels_first = dims[0] < dims[-1]
    if channels_first:
        return dims
    h, w, c = dims
    return (c, h, w)


class NatureCNN(nn.Module):
    """Convolutional torso for uint8 images with values in ``[0, 255]`` (Mnih et al. 2015).

    The input, ``(N, *obs_shape)`` in any of the layouts of ``image_layout``, is
    brought to NCHW indexing over channels-last memory (the layout oneDNN and cuDNN
    convolve fastest; a free view of ``(H, W, C)`` frames), converted to float once (on the
    module's device) and scaled by ``1/255``, then passed through the conv stack (ReLU
    after each layer), flattened, and projected by ``Linear -> 512 -> ReLU``.

    Attributes:
        out_features: Output size (512).
        chw: The ``(C, H, W)`` the convolutions see.
    """

    hidden_size = 512
    memory_format = torch.channels_last
    """The memory layout of the conv input (``torch.contiguous_format``: plain NCHW)."""

    def __init__(
        self,
        obs_shape: Sequence[int],
        conv_filters: Sequence[Sequence[int]] | None = None,
        channels_first: bool | None = None,
        weight_init: str = "orthogonal",
    ) -> None:
        """Build the network for images of shape ``obs_shape``.

        Args:
            obs_shape: Image shape ``(H, W)``, ``(C, H, W)`` or ``(H, W, C)``.
            conv_filters: ``(out_channels, kernel, stride)`` per conv layer; ``None`` uses the
                Nature DQN stack ``((32, 8, 4), (64, 4, 2), (64, 3, 1))``.
            channels_first: The layout of a 3-dim shape (None: ``image_layout``'s rule).

        Raises:
            ValueError: If the shape is not an image shape or is too small for the filters.
        """
        super().__init__()
        self.obs_shape = tuple(int(v) for v in obs_shape)
        c, h, w = self.chw = image_layout(self.obs_shape, channels_first)
        # how (N, *obs_shape) becomes (N, C, H, W): a view for (H, W) and (C, H, W) input
        self._permute = len(self.obs_shape) == 3 and self.obs_shape != self.chw
        filters = NATURE_CNN_FILTERS if conv_filters is None else conv_filters
        layers: list[nn.Module] = []
        in_ch = c
        for out_ch, kernel, stride in filters:
            layers.append(
                _init_layer(
                    nn.Conv2d(in_ch, int(out_ch), int(kernel), int(stride)),
                    math.sqrt(2.0),
                    weight_init,
                )
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
                f"image shape {self.obs_shape} (read as C, H, W = {self.chw}) is too small for "
                f"conv_filters {tuple(filters)}: {e}; set model.conv_filters for small images, "
                "or model.channels_first if the layout was misread"
            ) from e
        self.fc = nn.Sequential(
            _init_layer(nn.Linear(n_flat, self.hidden_size), math.sqrt(2.0), weight_init),
            nn.ReLU(),
        )
        self.out_features = self.hidden_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the network to images ``x`` of shape ``(N, *obs_shape)``."""
        x = x.permute(0, 3, 1, 2) if self._permute else x.reshape(x.shape[0], *self.chw)
        # NCHW indexing over channels-last memory (a free view of (H, W, C) frames, a uint8
        # copy of (C, H, W) ones): oneDNN's convolutions run 1.2x faster on it in a
        # NatureCNN SGD step on the CPU (benchmarks/atari.py); the float copy keeps it.
        x = x.contiguous(memory_format=self.memory_format)
        x = x.float().mul_(1.0 / 255.0) if x.dtype == torch.uint8 else x.float() / 255.0
        return self.fc(self.conv(x))


def make_torso(obs_space: gym.Space, config: ModelConfig) -> MLP | NatureCNN:
    """The torso for observations of ``obs_space``: ``NatureCNN`` for images
    (``is_image_space``), else an ``MLP`` of
    ``config.hiddens`` over the preprocessed (flat) observation."""
    preprocessor = get_preprocessor(obs_space)
    if isinstance(preprocessor, ImagePreprocessor):
        return NatureCNN(
            preprocessor.shape, config.conv_filters, config.channels_first, config.weight_init
        )
    return MLP.from_config(preprocessor.size, config)


class ActorCritic(nn.Module):
    """Policy and value network for a Gymnasium observation/action space pair.

    The observation (already preprocessed with ``preprocessor``) is fed to a torso --
    ``NatureCNN`` for image observations, otherwise an ``MLP`` with
    ``config.hiddens`` -- followed by a policy head (orthogonal gain 0.01) producing the
    action distribution inputs and a value head (gain 1.0). With
    ``config.vf_share_layers`` both heads share one torso; otherwise each has its own
    (None: shared for images, separate otherwise).  Image observations stay uint8 until
    the CNN converts them.

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
            ValueError: If ``config.use_lstm`` is set (build ``RecurrentActorCritic``,
                e.g. through ``make_actor_critic``).
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
        share = self.is_image if config.vf_share_layers is None else config.vf_share_layers

        self.pi_torso = make_torso(obs_space, config)
        self.vf_torso = None if share else make_torso(obs_space, config)

        use_free_log_std = isinstance(action_space, spaces.Box) and config.free_log_std
        head_out = self.num_dist_inputs // 2 if use_free_log_std else self.num_dist_inputs
        width, init = self.pi_torso.out_features, config.weight_init
        self.pi_head = _init_layer(nn.Linear(width, head_out), 0.01, init)
        self.vf_head = _init_layer(nn.Linear(width, 1), 1.0, init)
        if use_free_log_std:
            self.log_std: nn.Parameter | None = nn.Parameter(
                torch.full((head_out,), float(config.init_log_std))
            )
        else:
            self.register_parameter("log_std", None)

    def _as_input(self, obs: torch.Tensor) -> torch.Tensor:
        """Float32 for the MLP; images go to the CNN as they are (it converts them)."""
        return obs if self.is_image or obs.dtype == torch.float32 else obs.float()

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Compute ``(dist_inputs (B, num_dist_inputs), values (B,))`` for preprocessed obs."""
        obs = self._as_input(obs)
        features = self.pi_torso(obs)
        dist_inputs = self.pi_head(features)
        if self.log_std is not None:
            dist_inputs = torch.cat([dist_inputs, self.log_std.expand_as(dist_inputs)], dim=-1)
        vf_features = features if self.vf_torso is None else self.vf_torso(obs)
        values = self.vf_head(vf_features).squeeze(-1)
        return dist_inputs, values

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """Compute only the value estimates ``(B,)`` (the policy head is skipped)."""
        obs = self._as_input(obs)
        torso = self.pi_torso if self.vf_torso is None else self.vf_torso
        return self.vf_head(torso(obs)).squeeze(-1)


class RecurrentActorCritic(nn.Module):
    """Actor-critic with an LSTM between the torso and the heads (``ModelConfig.use_lstm``).

    Each observation goes through the torso (``NatureCNN`` for images, else an
    ``MLP`` with ``config.hiddens``), then through a single-layer LSTM of
    ``config.lstm_cell_size`` units; the policy head (orthogonal gain 0.01) and the value head
    (gain 1.0) both read the LSTM output. Distribution inputs are laid out as in
    ``ActorCritic`` (including the free log-std for Box actions).

    The recurrent state of one agent is ``[h, c]``, two float32 vectors of
    ``lstm_cell_size`` (``get_initial_state``: zeros). ``forward`` runs padded
    sequences ``(N, T, ...)`` from one state per sequence; acting is ``T = 1``. The LSTM is
    causal, so outputs at valid steps do not depend on any padding after them.

    Attributes:
        is_recurrent: Always True; policies look for it to carry state.
        max_seq_len: ``config.max_seq_len``, the longest sequence the loss unrolls.
        cell_size: ``config.lstm_cell_size``.
        preprocessor, dist_class, num_dist_inputs, log_std: As in ``ActorCritic``.
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
        self.torso = make_torso(obs_space, config)
        self.lstm = nn.LSTM(self.torso.out_features, self.cell_size, batch_first=True)
        if config.weight_init == "orthogonal":
            for name, param in self.lstm.named_parameters():
                if name.startswith("bias"):
                    nn.init.zeros_(param)
                else:
                    nn.init.orthogonal_(param, gain=1.0)
        use_free_log_std = isinstance(action_space, spaces.Box) and config.free_log_std
        head_out = self.num_dist_inputs // 2 if use_free_log_std else self.num_dist_inputs
        self.pi_head = _init_layer(nn.Linear(self.cell_size, head_out), 0.01, config.weight_init)
        self.vf_head = _init_layer(nn.Linear(self.cell_size, 1), 1.0, config.weight_init)
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
        x = x if self.is_image or x.dtype == torch.float32 else x.float()
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
    """The default model for ``config``: ``RecurrentActorCritic`` when ``use_lstm``."""
    if config.use_lstm:
        return RecurrentActorCritic(obs_space, action_space, config)
    return ActorCritic(obs_space, action_space, config)


def make_custom_model(
    obs_space: gym.Space, action_space: gym.Space, config: ModelConfig
) -> nn.Module:
    """The model registered as ``config.custom_model``, built by its factory.

    The factory is called as ``factory(obs_space, action_space, num_outputs, config)``:
    ``num_outputs`` is the number of action-distribution inputs for ``action_space``
    (``get_action_dist``: logits for Discrete, means and
    log-stds for Box) and ``config`` this ModelConfig, whose ``custom_model_config`` holds
    the model's own settings.  It returns a ``torch.nn.Module`` with the interface of
    ``ActorCritic``, which every actor-critic policy graph (PG, A2C, PPO, IMPALA,
    MARWIL) uses:

    * ``forward(obs) -> (dist_inputs (B, num_outputs), values (B,))`` for a batch of
      preprocessed observations (float32 ``(B, size)`` vectors, or uint8 images in the
      env's layout: ``get_preprocessor``);
    * optionally ``value(obs) -> values (B,)`` (bootstrapping without the policy head);
    * optionally ``dist_class``: hierl sets it to the distribution of ``action_space``
      unless the module defines its own;
    * recurrent models set ``is_recurrent = True`` and define ``get_initial_state() ->
      [arrays]`` (one agent's state), ``max_seq_len`` and ``forward(obs (N, T, ...),
      state [(N, ...)]) -> (dist_inputs (N, T, D), values (N, T), state_out)``, as
      ``RecurrentActorCritic`` does.

    A feed-forward model is called once on a batch of zeros here, so that a wrong output
    shape is reported now, naming the model.

    Raises:
        ConfigError: ``config.custom_model`` is not registered (the registered ones listed).
        TypeError: the factory did not return a ``torch.nn.Module``.
        ValueError: the module's outputs do not have the shapes above.
    """
    name = config.custom_model
    factory = get_model_factory(name)
    dist_class, num_outputs = get_action_dist(action_space)
    model = factory(obs_space, action_space, num_outputs, config)
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"custom model {name!r}: its factory returned a {type(model).__name__}, not a "
            "torch.nn.Module"
        )
    if getattr(model, "dist_class", None) is None:
        model.dist_class = dist_class
    if not getattr(model, "is_recurrent", False):
        _check_outputs(model, name, obs_space, num_outputs)
    return model


def _check_outputs(model: nn.Module, name: str, obs_space: gym.Space, num_outputs: int) -> None:
    """ValueError unless ``model(obs)`` is ``(dist_inputs (B, num_outputs), values (B,))``."""
    preprocessor = get_preprocessor(obs_space)
    is_image = isinstance(preprocessor, ImagePreprocessor)
    obs = torch.zeros((2, *preprocessor.shape), dtype=torch.uint8 if is_image else torch.float32)
    with torch.no_grad():
        out = model(obs)
    shapes = None
    if isinstance(out, (tuple, list)) and len(out) == 2 and all(torch.is_tensor(t) for t in out):
        shapes = (tuple(out[0].shape), tuple(out[1].shape))
    if shapes != ((2, num_outputs), (2,)):
        got = shapes if shapes is not None else type(out).__name__
        raise ValueError(
            f"custom model {name!r}: forward(obs) of a batch of 2 observations must return "
            f"(dist_inputs, values) of shapes ((2, {num_outputs}), (2,)) for this action "
            f"space, got {got}"
        )


def check_default_model(config: ModelConfig, builder: str) -> None:
    """ConfigError if ``config`` names a custom model: ``builder`` (e.g. "DQN's
    Q-network") builds its own network, with another interface."""
    if config.custom_model is not None:
        raise ConfigError(
            f"config field 'model.custom_model' = {config.custom_model!r} is not "
            f"supported: {builder} is not an actor-critic model; custom models replace the "
            "actor-critic model of PG, A2C, PPO, IMPALA and MARWIL"
        )
