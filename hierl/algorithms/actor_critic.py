"""What the replay actor-critics for continuous actions (DDPG/TD3 and SAC) share.

* ``ActorCriticConfig``: the network, the interleaving of sampling and updates, the
  Polyak coefficient and the uniformly random warm-up;
* ``DDPGCritic``: ``Q(s, u)`` on the concatenated observation and normalised action;
* ``ActorCriticPolicy``: a Box action space's scaling to ``[-1, 1]`` (the hooks
  ``setup_actions``, ``batch_actions`` and ``env_actions``, which discrete SAC
  overrides), the batch as tensors, n-step postprocessing, optimizer steps refused on
  non-finite gradients, Polyak averaging of the target networks, weights and optimizer
  state.

The algorithms (``ddpg.py``, ``sac.py``) add their networks, acting rule and update.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from hierl.algorithms.off_policy import OffPolicyConfig
from hierl.models.networks import MLP, ModelConfig, check_default_model
from hierl.models.preprocessors import ImagePreprocessor, get_preprocessor
from hierl.policy_graph import PolicyGraph, Weights
from hierl.postprocessing import N_STEP_DISCOUNTS, compute_n_step
from hierl.sample_batch import SampleBatch as SB
from hierl.torch_policy_graph import (
    clip_grad_norm,
    load_module_weights,
    load_optimizer_state,
    module_weights,
    optimizer_state,
    step_if_finite,
    writable_array,
)


@dataclasses.dataclass
class ActorCriticConfig(OffPolicyConfig):
    """Settings of the replay actor-critics for continuous actions (DDPG, TD3, SAC)."""

    model: ModelConfig = dataclasses.field(
        default_factory=lambda: ModelConfig(
            hiddens=(256, 256), activation="relu", weight_init="torch"
        )
    )
    """Hidden layers, activation and init of the actor and of each critic (the other
    ModelConfig fields are not used). PyTorch's own layer init by default, as SB3 and
    the TD3 and SAC authors' code start these networks, so that runs beside SB3 start
    alike (on HalfCheetah-v5 over three seeds TD3 learned no better or worse with the
    orthogonal init: benchmarks/RESULTS.md, halfcheetah-td3)."""
    rollout_fragment_length: int = 1
    """Env steps per sub-env per sample; with ``replay_ratio = train_batch_size`` each
    sampled step is followed by one update (TD3's and SAC's interleaving)."""
    timesteps_per_iteration: int = 1000
    """Env steps per ``train()`` (each optimizer step samples only one)."""
    tau: float = 0.005
    """Polyak coefficient: ``target <- tau * online + (1 - tau) * target`` after each
    target update (1.0: hard copy)."""
    random_timesteps: int = 1000
    """Sampled env steps (the global timestep) with uniformly random actions first."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check("random_timesteps", self.random_timesteps >= 0, "must be >= 0")
        self.check("tau", 0.0 < self.tau <= 1.0, "must be in (0, 1]")
        self.check(
            "rollout_fragment_length",
            self.rollout_fragment_length == 0 or self.rollout_fragment_length >= self.n_step,
            f"must be >= n_step={self.n_step} (n-step windows stay inside a fragment)",
        )


class DDPGCritic(nn.Module):
    """``Q(s, u)`` on the concatenated observation and normalised action (TD3's layout)."""

    def __init__(self, obs_size: int, act_dim: int, config: ModelConfig):
        super().__init__()
        self.net = MLP.from_config(obs_size + act_dim, config, 1)

    def forward(self, obs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, u], dim=-1)).squeeze(-1)


@contextlib.contextmanager
def frozen(modules: Iterable[nn.Module]) -> Iterator[None]:
    """Within the block the parameters of ``modules`` require no gradient, so a loss
    differentiated through them (the actor's, through the critics) neither computes nor
    accumulates their gradients; the gradients it gives other parameters are the same.
    (Spinning Up's SAC freezes its Q-networks in its policy step for the same reason.)
    """
    params = [p for module in modules for p in module.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)


class GreedyActorCritic(nn.Module):
    """An actor-critic's greedy policy for export (``ActorCriticPolicy.export_model``):
    observation rows to ``(env action, actor outputs, min_i Q_i(s, u))``, ``u`` the
    actor's greedy normalised action (``actor.greedy_outputs``)."""

    def __init__(self, actor: nn.Module, critics: list[nn.Module], center, half) -> None:
        super().__init__()
        self.actor = actor
        self.critics = nn.ModuleList(critics)
        self.register_buffer("action_center", center.clone())
        self.register_buffer("action_half", half.clone())

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        u, dist_inputs = self.actor.greedy_outputs(obs)
        values = torch.stack([q(obs, u) for q in self.critics]).amin(0)
        return self.action_center + self.action_half * u, dist_inputs, values


class ActorCriticPolicy(PolicyGraph):
    """The shared half of DDPG/TD3's and SAC's policy graphs (see the module docstring).

    Subclasses set ``algorithm`` (named in errors) and ``optimizer_names`` (each name
    ``x`` has an ``x_optimizer`` attribute, checkpointed as ``x_optimizer``), and build
    their networks in ``make_model`` (an ``nn.Module`` with ``online_target_pairs()``)
    and their optimizers in ``make_optimizers``.
    """

    algorithm = "DDPG/TD3"
    optimizer_names: tuple[str, ...] = ("actor", "critic")

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, config: Any):
        super().__init__(observation_space, action_space, config)
        use_cuda = getattr(config, "num_gpus", 0) > 0 and torch.cuda.is_available()
        self.device = torch.device("cuda" if use_cuda else "cpu")
        self.setup_actions(action_space)
        check_default_model(config.model, f"{self.algorithm}'s actor and critics")
        preprocessor = get_preprocessor(observation_space)
        if isinstance(preprocessor, ImagePreprocessor):
            raise ValueError(
                f"{self.algorithm}'s actor and critics are MLPs on flat observations, got "
                f"image observations {observation_space!r}; learn from pixels with DQN, "
                "APEX, PPO or APPO (a conv torso), or give the env a float Box"
            )
        self.model = self.make_model(preprocessor.size).to(self.device)
        self.make_optimizers()
        self.num_updates = 0
        """Critic updates so far."""

    def setup_actions(self, action_space: gym.Space) -> None:
        """Check the action space and set ``act_shape``, ``act_dim`` (the actor's action
        dimensions) and the scaling of ``[-1, 1]`` onto ``[low, high]``.

        Raises:
            ValueError: not a float Box with finite bounds.
        """
        who = self.algorithm
        if not isinstance(action_space, gym.spaces.Box):
            raise ValueError(
                f"{who} need a continuous Box action space, got {action_space!r} "
                f"({type(action_space).__name__})"
            )
        low = np.asarray(action_space.low, np.float64).reshape(-1)
        high = np.asarray(action_space.high, np.float64).reshape(-1)
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise ValueError(
                f"{who} need finite action bounds to scale the tanh actor, got {action_space!r}"
            )
        if not np.issubdtype(action_space.dtype, np.floating):
            raise ValueError(f"{who} need a float Box action space, got {action_space!r}")
        self.act_shape = tuple(action_space.shape)
        self.act_dim = int(low.size)
        self._center = torch.as_tensor((high + low) / 2, dtype=torch.float32, device=self.device)
        self._half = torch.as_tensor((high - low) / 2, dtype=torch.float32, device=self.device)

    def make_model(self, obs_size: int) -> nn.Module:
        """The networks (online and target) in one module."""
        raise NotImplementedError

    def make_optimizers(self) -> None:
        """Set ``<name>_optimizer`` for each of ``optimizer_names``."""
        raise NotImplementedError

    # -- action scaling --------------------------------------------------------------------
    def scale_actions(self, u: torch.Tensor) -> torch.Tensor:
        """Normalised ``u`` in ``[-1, 1]`` → env actions in ``[low, high]``."""
        return self._center + self._half * u

    def unscale_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """Env actions in ``[low, high]`` → normalised ``[-1, 1]`` (inverse of scale_actions)."""
        return (actions.reshape(-1, self.act_dim).float() - self._center) / self._half

    def batch_actions(self, actions: Any) -> torch.Tensor:
        """A batch's ``ACTIONS`` column as the critics take it (``"u"`` of ``_tensors``):
        normalised to ``[-1, 1]``."""
        return self.unscale_actions(self._tensor(actions))

    def env_actions(self, u: torch.Tensor) -> np.ndarray:
        """Normalised actions → env actions as a numpy batch of the space's shape and dtype."""
        actions = self.scale_actions(u).cpu().numpy().reshape(-1, *self.act_shape)
        return actions.astype(self.action_space.dtype, copy=False)

    def _tensor(self, value: Any) -> torch.Tensor:
        return torch.as_tensor(writable_array(value), device=self.device)

    def _obs(self, obs: Any) -> torch.Tensor:
        x = self._tensor(obs).float()
        return x.reshape(x.shape[0], -1)

    # -- postprocess -----------------------------------------------------------------------
    def postprocess_trajectory(self, batch, other_agent_batches=None):
        """n-step returns when ``n_step > 1`` (see ``postprocess_trajectories``)."""
        return self.postprocess_trajectories(batch)

    def postprocess_trajectories(self, batch: SB) -> SB:
        """With ``n_step > 1``: n-step rewards and NEW_OBS/TERMINATEDS of each row's window
        end, plus ``N_STEP_DISCOUNTS`` (``compute_n_step``); else the batch as is."""
        if self.config.n_step == 1:
            return batch
        return compute_n_step(batch, self.config.n_step, self.config.gamma)

    # -- learning helpers ------------------------------------------------------------------
    def _tensors(self, batch: SB) -> dict[str, torch.Tensor]:
        batch = SB(batch)  # a shallow copy: the caller's batch stays compressed
        batch.decompress_if_needed([SB.OBS, SB.NEW_OBS])
        out = {
            SB.OBS: self._obs(batch[SB.OBS]),
            SB.NEW_OBS: self._obs(batch[SB.NEW_OBS]),
            "u": self.batch_actions(batch[SB.ACTIONS]),
            SB.REWARDS: self._tensor(batch[SB.REWARDS]).float(),
            SB.TERMINATEDS: self._tensor(batch[SB.TERMINATEDS]).float(),
        }
        for column in (SB.PRIO_WEIGHTS, N_STEP_DISCOUNTS):
            if column in batch:
                out[column] = self._tensor(batch[column]).float()
        return out

    def bootstrap(self, batch: Mapping[str, torch.Tensor], next_value: torch.Tensor):
        """``r + gamma^m (1 - terminated) next_value``: the TD target of each row."""
        # CRUCIAL: only termination stops bootstrapping; truncated steps (time limits) bootstrap.
        not_terminal = 1.0 - batch[SB.TERMINATEDS]
        discount = batch.get(N_STEP_DISCOUNTS, self.config.gamma)
        return batch[SB.REWARDS] + discount * not_terminal * next_value

    def _clip(self, module: nn.Module, prefix: str) -> dict[str, torch.Tensor]:
        clip = getattr(self.config, "grad_clip", None)
        if not clip:
            return {}
        return {f"{prefix}_grad_gnorm": clip_grad_norm(list(module.parameters()), clip)}

    def _step(self, which: str, values: dict[str, Any], batch: SB) -> dict[str, float]:
        """The ``which`` optimizer's step, refused if a gradient it would apply is not
        finite (``step_if_finite``)."""
        optimizer = getattr(self, f"{which}_optimizer")
        params = [p for group in optimizer.param_groups for p in group["params"]]
        owner = f"{type(self).__name__} {which}"
        return step_if_finite(optimizer, params, values, owner, batch)

    def learn_on_batch(self, batch: SB) -> dict[str, float]:
        """Same as ``learn_on_replay_batch`` (unweighted when the batch has no weights)."""
        return self.learn_on_replay_batch(batch).stats

    @torch.no_grad()
    def update_target(self, tau: float | None = None) -> None:
        """Polyak averaging ``target <- tau * online + (1 - tau) * target`` of every
        network with a target copy (``tau`` defaults to ``config.tau``; 1.0 copies)."""
        tau = self.config.tau if tau is None else float(tau)
        if not 0.0 <= tau <= 1.0:
            raise ValueError(f"tau must be in [0, 1], got {tau}")
        for online, target in self.model.online_target_pairs():
            for p, t in zip(online.parameters(), target.parameters(), strict=True):
                t.lerp_(p, tau)  # t + tau (p - t)

    def export_model(self) -> tuple[GreedyActorCritic, None]:
        """The greedy policy as a new module (copies of the actor and the critics) for
        ``hierl.export.export_policy``: the env action of ``compute_actions(...,
        explore=False)``, the actor's outputs and ``min_i Q_i`` at that action; None: the
        module computes the greedy action itself (no distribution to apply)."""
        critics = [copy.deepcopy(c) for c in self.model.critics()]
        actor = copy.deepcopy(self.model.actor)
        return GreedyActorCritic(actor, critics, self._center, self._half), None

    # -- weights and state -----------------------------------------------------------------
    def get_weights(self) -> Weights:
        """Online and target networks as numpy arrays (copies), by ``state_dict`` name."""
        return module_weights(self.model)

    def set_weights(self, weights: Weights) -> None:
        """Load weights from ``get_weights``; a missing name or shape mismatch raises."""
        load_module_weights(self.model, weights, type(self).__name__)

    def get_state(self) -> dict[str, Any]:
        """Weights (with targets), every optimizer's moments and the update counter."""
        return {
            **super().get_state(),
            **{
                f"{name}_optimizer": optimizer_state(getattr(self, f"{name}_optimizer"))
                for name in self.optimizer_names
            },
            "num_updates": self.num_updates,
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Inverse of ``get_state``."""
        super().set_state(state)
        for name in self.optimizer_names:
            key = f"{name}_optimizer"
            load_optimizer_state(getattr(self, key), state[key], self.device)
        self.num_updates = int(state["num_updates"])


__all__ = ["ActorCriticConfig", "ActorCriticPolicy", "DDPGCritic", "GreedyActorCritic"]
