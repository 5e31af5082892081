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
from collections.abc import Callable
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch

from hierl.algorithms.trainer import Trainer, TrainerConfig
from hierl.models.distributions import ActionDistribution, Categorical
from hierl.models.networks import MLP, check_default_model
from hierl.models.preprocessors import get_preprocessor
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
    """ES settings: the ``es`` optimizer's (``optimizer_config``: noise, step size, L2,
    episodes per batch, aggregators ...; its defaults are the RLlib paper's, appendix D,
    for MuJoCo tasks) plus the policy's network and observation filter.
    """

    supported_optimizers = ("es",)
    default_optimizer = "es"

    observation_filter: Literal["NoFilter", "MeanStdFilter"] = "MeanStdFilter"
    """Observation normalisation (Salimans et al. normalise; statistics merged across
    evaluators after every iteration)."""


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
        check_default_model(model, "ES's deterministic MLP")
        self.in_size = get_preprocessor(observation_space).size
        # Small output gain (Salimans: normc 0.01 on the last layer): near-neutral start.
        self.model = MLP.from_config(self.in_size, model, out, out_gain=0.01)
        self.model.requires_grad_(False)
        self._params = list(self.model.parameters())
        # numpy views of the parameters' memory, which is only ever written in place
        # (set_flat_weights, set_weights): reading and writing them per episode costs
        # no torch call
        self._param_views = [p.detach().numpy() for p in self._params]
        linears = [m for m in self.model.net if isinstance(m, torch.nn.Linear)]
        self._linear_views = [(m.weight.detach().numpy(), m.bias.detach().numpy()) for m in linears]
        self._activation = _NUMPY_ACTIVATIONS[model.activation]
        self._layers: list[tuple[np.ndarray, np.ndarray]] | None = None
        self._mlp: Callable[[np.ndarray], np.ndarray] | None = None

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
        # np.minimum/np.maximum in place (``out`` is a new float32 array): np.clip's
        # dispatch costs more than one row
        actions = out.reshape(-1, *space.shape)
        np.maximum(actions, space.low, out=actions)
        np.minimum(actions, space.high, out=actions)
        return actions, [], {}

    def frozen_actor(self, explore: bool | None = None) -> Callable[[np.ndarray], Any] | None:
        """``FrozenActor``: the MLP on one row and the action rule, without the generic
        steps of ``compute_actions`` and ``to_env_action`` (ES plays millions of env
        steps one row at a time).  For Discrete actions and float32 Box actions (whose
        clipped outputs are already what ``to_env_action`` returns: same dtype, inside
        the bounds); None for Box actions of another dtype.  ``explore`` is ignored,
        as in ``compute_actions``.  Valid until the weights change (``set_*``)."""
        mlp, space = self._numpy_mlp(), self.action_space
        if isinstance(space, gym.spaces.Discrete):
            start = np.int64(space.start)
            return lambda obs: mlp(obs).argmax(axis=1)[0] + start
        if space.dtype != np.float32:
            return None
        low, high, shape = space.low, space.high, space.shape

        def actor(obs: np.ndarray) -> np.ndarray:
            action = mlp(obs).reshape(shape)  # a view of the one new row
            np.maximum(action, low, out=action)
            np.minimum(action, high, out=action)
            return action

        return actor

    def forward(self, obs_batch: np.ndarray) -> np.ndarray:
        """The model's outputs, computed in numpy from a copy of its weights.

        ES acts one env step at a time with a tiny network, where torch's per-call
        overhead would dominate the rollouts; the copy is refreshed by ``set_*``.
        """
        return self._numpy_mlp()(obs_batch)

    def _numpy_mlp(self) -> Callable[[np.ndarray], np.ndarray]:
        """The model as a numpy function of a batch of observations, on a copy of the
        current weights (``_layers``: ``(weight.T, bias)`` per layer), made once per
        set of weights."""
        if self._mlp is None:
            self._layers = [(w.T.copy(), b.copy()) for w, b in self._linear_views]
            *hidden, (w_out, b_out) = self._layers
            activation, in_size = self._activation, self.in_size

            def mlp(obs_batch: np.ndarray) -> np.ndarray:
                x = np.asarray(obs_batch, dtype=np.float32).reshape(-1, in_size)
                for w, b in hidden:
                    x = activation(x @ w + b)
                out = x @ w_out
                out += b_out
                return out

            self._mlp = mlp
        return self._mlp

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
        # numpy copies into the parameters' own memory (torch's vector_to_parameters,
        # cold in the cache after an episode of env steps, cost ~4x more per episode)
        offset = 0
        for view in self._param_views:
            view[...] = flat[offset : offset + view.size].reshape(view.shape)
            offset += view.size
        self._mlp = None

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
        self._mlp = None

    def export_model(self) -> tuple[torch.nn.Module, type[ActionDistribution]]:
        """What ``hierl export`` folds in (see ``hierl.export``): the MLP as a module
        returning ``(outputs, zero values)`` (ES learns no value function), and the rule
        that turns outputs into the greedy action (argmax, or the outputs themselves)."""
        discrete = isinstance(self.action_space, gym.spaces.Discrete)
        return _ExportedMLP(self.model), Categorical if discrete else _Exact

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


class _ExportedMLP(torch.nn.Module):
    """ES's MLP in the ``(dist_inputs, values)`` form export expects (values: zeros)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.model(x)
        return out, torch.zeros(out.shape[0], dtype=out.dtype)


class _Exact(ActionDistribution):
    """The outputs are the (Box) action: ES's greedy rule before clipping."""

    def deterministic_sample(self) -> torch.Tensor:
        return self.inputs


class ESTrainer(Trainer):
    """Evolution Strategies over PolicyEvaluators with the ``es`` optimizer.

    ``episodes_this_iter`` and the episode-reward keys describe the perturbed
    episodes; ``eval_return_mean`` the unperturbed ones (``eval_prob``);
    ``driver_fan_in`` how many results the driver gathered per round.
    """

    name = "ES"
    config_class = ESConfig
    policy_class = ESPolicy
