"""Action distributions: ``Categorical``, ``MultiCategorical`` and
``DiagGaussian``, selected for an action space by ``get_action_dist``."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch.nn import functional as F

from hierl.models.preprocessors import _SUPPORTED_ACTIONS

__all__ = [
    "ActionDistribution",
    "Categorical",
    "DiagGaussian",
    "MultiCategorical",
    "get_action_dist",
]


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

    def sample_with_logp(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(actions, logp(actions))`` for stochastic ``actions`` (what acting records);
        a subclass may compute both from the same draw more cheaply."""
        actions = self.sample()
        return actions, self.logp(actions)

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
        """Split ``inputs`` into one ``Categorical`` per entry of ``nvec``."""
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

    def sample_with_logp(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A sample ``mean + std * eps`` and its log-density, read off the noise
        (``z = eps``): half the tensor ops of ``sample`` then ``logp``, which
        matters when one env's step is a handful of small ops."""
        with torch.no_grad():
            eps = torch.randn_like(self.mean)
            actions = self.mean + self.std * eps
        logp = (-0.5 * eps.pow(2) - self.log_std - 0.5 * math.log(2.0 * math.pi)).sum(-1)
        return actions, logp

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


def get_action_dist(
    action_space: gym.Space,
) -> tuple[type[ActionDistribution] | functools.partial, int]:
    """Return ``(distribution class, number of distribution inputs)`` for an action space.

    * Discrete -> ``Categorical`` with ``n`` inputs.
    * MultiDiscrete -> ``functools.partial(MultiCategorical, nvec=...)`` with ``sum(nvec)``.
    * Box (any shape, flattened) -> ``DiagGaussian`` with ``2 * prod(shape)`` inputs.

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
