"""ES: Evolution Strategies on PolicyEvaluators with a non-gradient optimizer.

Salimans, Ho, Chen, Sutskever 2017, "Evolution Strategies as a Scalable Alternative to
Reinforcement Learning", https://arxiv.org/abs/1703.03864, as ported in RLlib (Liang et
al., ICML 2018, §5; hyperparameters in appendix D of the arXiv version).  The policy is
a small deterministic MLP whose parameters ES perturbs as one flat vector; the ``es``
optimizer (``hierl.optimizers.es``) plays antithetic pairs of episodes on the
evaluators (optionally through an aggregation tree) and updates the weights with Adam.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch

from hierl.algorithms.trainer import Trainer, TrainerConfig
from hierl.models.networks import MLP
from hierl.models.preprocessors import get_preprocessor
from hierl.optimizers.es.noise_table import DEFAULT_NOISE_SIZE
from hierl.policy_graph import PolicyGraph, Weights
from hierl.sample_batch import SampleBatch
from hierl.torch_policy_graph import module_weights

_NUMPY_ACTIVATIONS = {
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0.0),
    "elu": lambda x: np.where(x > 0, x, np.expm1(x)),
    "silu": lambda x: x / (1.0 + np.exp(-x)),
}
"""The activations of ``ModelConfig`` in numpy (for ``ESPolicy.forward``)."""


@dataclasses.dataclass
class ESConfig(TrainerConfig):
    """ES settings; the ES defaults are the RLlib paper's (appendix D) for MuJoCo tasks.

    ``l2_coeff`` has the paper's meaning because the update is scaled as in the reference
    code (``g = 1/n Σ (F⁺ - F⁻) ε_i``, not divided by sigma; see ``hierl.optimizers.es.updates``).
    """

    observation_filter: Literal["NoFilter", "MeanStdFilter"] = "MeanStdFilter"
    """Observation normalisation (Salimans et al. normalise; statistics merged across
    evaluators after every iteration)."""
    noise_stdev: float = 0.02
    """``sigma``: standard deviation of the parameter perturbations."""
    stepsize: float = 0.01
    """Adam step size."""
    l2_coeff: float = 0.005
    """L2 coefficient: Adam descends ``-g + l2_coeff · θ`` with ``g = 1/n Σ (F⁺ - F⁻) ε_i``
    (not divided by sigma), as in the reference ``es_distributed/es.py``."""
    episodes_per_batch: int = 5000
    """Perturbed episodes per update (antithetic pairs: rounded up to even)."""
    timesteps_per_batch: int = 0
    """Also play on until this many env steps per update (0: no minimum)."""
    eval_prob: float = 0.003
    """Chance per pair of one extra unperturbed episode (reported as ``eval_return_mean``)."""
    fitness_shaping: Literal["centered_ranks", "none"] = "centered_ranks"
    """Returns → weights: centered ranks in [-0.5, 0.5] (Salimans), or raw returns."""
    noise_size: int = DEFAULT_NOISE_SIZE
    """Entries of the shared float32 noise table (in the object store once)."""
    noise_seed: int = 123
    """Seed of the noise table."""
    max_episode_steps: int = 0
    """Cut every episode after this many steps (0: the env's own time limit)."""
    num_aggregators: int = 0
    """Aggregator actors between driver and evaluators (at most ``num_evaluators``)."""
    num_cpus_per_aggregator: float = 0.1
    """CPUs reserved by each aggregator actor."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check("noise_stdev", self.noise_stdev > 0, "must be > 0")
        self.check("stepsize", self.stepsize > 0, "must be > 0")
        self.check("l2_coeff", self.l2_coeff >= 0, "must be >= 0")
        self.check("episodes_per_batch", self.episodes_per_batch >= 2, "must be >= 2")
        self.check("timesteps_per_batch", self.timesteps_per_batch >= 0, "must be >= 0")
        self.check("eval_prob", 0.0 <= self.eval_prob <= 1.0, "must be in [0, 1]")
        self.check("noise_size", self.noise_size >= 1, "must be >= 1")
        self.check("max_episode_steps", self.max_episode_steps >= 0, "must be >= 0")
        self.check(
            "num_aggregators",
            0 <= self.num_aggregators <= self.num_evaluators,
            f"must be in [0, num_evaluators={self.num_evaluators}]",
        )
        self.check("num_cpus_per_aggregator", self.num_cpus_per_aggregator >= 0, ">= 0")


class ESPolicy(PolicyGraph):
    """A deterministic MLP (``config.model.hiddens``) read and written as one flat vector.

    Discrete actions: argmax of the outputs; Box actions: the outputs clipped to the
    bounds.  ES needs no loss: the gradient methods raise.
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: Any):
        super().__init__(observation_space, action_space, config)
        if isinstance(action_space, gym.spaces.Discrete):
            out = int(action_space.n)
        elif isinstance(action_space, gym.spaces.Box):
            out = math.prod(action_space.shape)
        else:
            raise ValueError(
                f"ESPolicy supports Discrete and Box action spaces, not {action_space}"
            )
        model = config.model
        self.in_size = get_preprocessor(observation_space).size
        # Small output gain (Salimans: normc 0.01 on the last layer): near-neutral start.
        self.model = MLP(self.in_size, model.hiddens, model.activation, out, out_gain=0.01)
        self.model.requires_grad_(False)
        self._params = list(self.model.parameters())
        self._activation = _NUMPY_ACTIVATIONS[model.activation]
        self._layers: list[tuple[np.ndarray, np.ndarray]] | None = None

    @property
    def num_params(self) -> int:
        """Length of the flat parameter vector."""
        return sum(p.numel() for p in self._params)

    def compute_actions(
        self,
        obs_batch: np.ndarray,
        state_batches: list[np.ndarray] | None = None,
        explore: bool = True,
    ) -> tuple[np.ndarray, list[np.ndarray], dict[str, np.ndarray]]:
        """Deterministic actions (``explore`` is ignored: ES explores in parameter space)."""
        out = self.forward(obs_batch)
        if isinstance(self.action_space, gym.spaces.Discrete):
            return out.argmax(axis=1), [], {}
        space = self.action_space
        actions = np.clip(out.reshape(-1, *space.shape), space.low, space.high)
        return actions.astype(np.float32), [], {}

    def forward(self, obs_batch: np.ndarray) -> np.ndarray:
        """The model's outputs, computed in numpy from a copy of its weights.

        ES acts one env step at a time with a tiny network, where torch's per-call
        overhead would dominate the rollouts; the copy is refreshed by ``set_*``.
        """
        if self._layers is None:
            linears = [m for m in self.model.net if isinstance(m, torch.nn.Linear)]
            self._layers = [(m.weight.numpy().T.copy(), m.bias.numpy().copy()) for m in linears]
        x = np.asarray(obs_batch, dtype=np.float32).reshape(-1, self.in_size)
        for i, (w, b) in enumerate(self._layers):
            x = x @ w + b
            if i < len(self._layers) - 1:
                x = self._activation(x)
        return x

    def get_flat_weights(self) -> np.ndarray:
        """All parameters, concatenated in ``named_parameters`` order (float32 copy)."""
        return torch.nn.utils.parameters_to_vector(self._params).numpy().copy()

    def set_flat_weights(self, flat: np.ndarray) -> None:
        """Inverse of ``get_flat_weights``."""
        flat = np.asarray(flat, dtype=np.float32).reshape(-1)
        if flat.size != self.num_params:
            raise ValueError(
                f"ESPolicy has {self.num_params} parameters; got a vector of {flat.size}"
            )
        torch.nn.utils.vector_to_parameters(torch.tensor(flat), self._params)
        self._layers = None

    def get_weights(self) -> Weights:
        """Parameters by name."""
        return module_weights(self.model)

    def set_weights(self, weights: Weights) -> None:
        """Load parameters by name (shapes must match)."""
        params = dict(self.model.named_parameters())
        for name, value in weights.items():
            if name not in params:
                raise ValueError(f"unknown ESPolicy parameter {name!r}; valid: {sorted(params)}")
            if tuple(params[name].shape) != tuple(np.shape(value)):
                raise ValueError(
                    f"ESPolicy parameter {name!r} has shape {tuple(params[name].shape)}, "
                    f"got {np.shape(value)}"
                )
            with torch.no_grad():
                params[name].copy_(torch.as_tensor(np.array(value, dtype=np.float32)))
        self._layers = None

    def _derivative_free(self) -> NotImplementedError:
        return NotImplementedError(
            "ESPolicy is derivative-free (Evolution Strategies): it has no loss or "
            "gradients; train it with the 'es' optimizer (ESTrainer)"
        )

    def learn_on_batch(self, batch: SampleBatch) -> dict[str, float]:
        """Not available: ES does not learn from sample batches."""
        raise self._derivative_free()

    def compute_gradients(self, batch: SampleBatch, clip: bool = True) -> Any:
        """Not available: ES has no gradients."""
        raise self._derivative_free()

    def apply_gradients(self, gradients: list[np.ndarray], clip: bool = False) -> Any:
        """Not available: ES has no gradients."""
        raise self._derivative_free()


class ESTrainer(Trainer):
    """Evolution Strategies over PolicyEvaluators with the ``es`` optimizer.

    ``episodes_this_iter`` and the episode-reward keys describe the perturbed
    episodes; ``eval_return_mean`` the unperturbed ones (``eval_prob``);
    ``driver_fan_in`` how many results the driver gathered per round.
    """

    name = "ES"
    config_class = ESConfig
    policy_class = ESPolicy
    supported_optimizers = ("es",)
    default_optimizer = "es"

    def _collect_episodes(self) -> list:
        # The perturbed episodes reach the driver with the step's results (through the
        # aggregators when there are any), so no extra call per evaluator is needed.
        return self.local_evaluator.get_metrics() + self.optimizer.pop_episodes()
