"""Centralized critic, decentralized actors: PPO whose value function sees the teammate.

Each agent acts on its own observation only, but its critic is trained on its own
observation, the other agent's observation and the other agent's action, which it reads
in ``postprocess_trajectory`` from ``other_agent_batches`` (Lowe et al. 2017, MADDPG,
https://arxiv.org/abs/1706.02275; Foerster et al. 2018, COMA).  The game is cooperative:
both agents get the team reward, so the teammate's action explains much of the return
a decentralized critic would have to treat as noise.

Run: ``python examples/centralized_critic.py`` (a few seconds per iteration on 2 cores);
``--stop-iters N`` trains N iterations instead of 15 (``--stop-iters 1``: a quick check).
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from hierl import PPOTrainer
from hierl.evaluators import MultiAgentEnv, PolicySpec
from hierl.models import MLP, ActorCritic, ModelConfig
from hierl.postprocessing import compute_advantages
from hierl.sample_batch import SampleBatch

PPOPolicy = PPOTrainer.policy_class  # the policy class PPOTrainer trains

OTHER_OBS = "other_obs"
OTHER_ACTION = "other_action"
NUM_ACTIONS = 3


class MatchTargetGame(MultiAgentEnv):
    """Two agents see a target in ``0..2`` (one-hot) and a private noise bit.

    Both get the team reward ``[a0 == target] + [a1 == target]`` every step; the
    episode terminates after ``length`` steps (no time-limit truncation).
    """

    def __init__(self, env_config=None):
        self.length = int((env_config or {}).get("length", 10))
        space = gym.spaces.Box(0.0, 1.0, (NUM_ACTIONS + 1,), np.float32)
        self.observation_spaces = {0: space, 1: space}
        self.action_spaces = {
            0: gym.spaces.Discrete(NUM_ACTIONS),
            1: gym.spaces.Discrete(NUM_ACTIONS),
        }
        self.rng = np.random.default_rng()
        self.t = 0
        self.target = 0

    def _obs(self):
        out = {}
        for aid in (0, 1):
            o = np.zeros(NUM_ACTIONS + 1, np.float32)
            o[self.target] = 1.0
            o[-1] = float(self.rng.integers(0, 2))
            out[aid] = o
        return out

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        self.target = int(self.rng.integers(0, NUM_ACTIONS))
        return self._obs(), {}

    def step(self, action_dict):
        team = float(sum(int(a) == self.target for a in action_dict.values()))
        self.t += 1
        done = self.t >= self.length
        self.target = int(self.rng.integers(0, NUM_ACTIONS))
        flags = {0: done, 1: done, "__all__": done}
        return self._obs(), {0: team, 1: team}, flags, dict.fromkeys(flags, False), {}


class CentralizedModel(nn.Module):
    """A decentralized actor-critic plus a central value head (obs, other obs, other action)."""

    def __init__(self, obs_space: gym.Space, action_space: gym.Space, config: ModelConfig):
        super().__init__()
        self.actor_critic = ActorCritic(obs_space, action_space, config)
        self.dist_class = self.actor_critic.dist_class
        obs_size = int(np.prod(obs_space.shape))
        self.num_actions = int(action_space.n)
        in_size = 2 * obs_size + self.num_actions
        self.central_vf = MLP(in_size, config.hiddens, config.activation, out_size=1)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The actor (and its own-observation value, unused for learning)."""
        return self.actor_critic(obs)

    def central_value(self, obs, other_obs, other_action) -> torch.Tensor:
        """V(own obs, other agent's obs, other agent's action)."""
        one_hot = nn.functional.one_hot(other_action.long(), self.num_actions).float()
        return self.central_vf(torch.cat([obs, other_obs, one_hot], dim=-1)).squeeze(-1)


class CentralizedCriticPolicy(PPOPolicy):
    """PPO with the critic replaced by ``CentralizedModel.central_value``."""

    def make_model(self) -> nn.Module:
        return CentralizedModel(self.observation_space, self.action_space, self.config.model)

    def postprocess_trajectory(self, batch, other_agent_batches=None):
        """Add the teammate's obs/action (aligned by step ``t``), central V and GAE."""
        n = batch.count
        other_obs = np.zeros_like(batch[SampleBatch.OBS])
        other_action = np.zeros(n, dtype=np.int64)
        for _, (_, other) in (other_agent_batches or {}).items():
            # CRUCIAL: align on the episode step, not the row: agents may enter late.
            pos = {int(t): i for i, t in enumerate(other[SampleBatch.T])}
            for i, t in enumerate(batch[SampleBatch.T]):
                j = pos.get(int(t))
                if j is not None:
                    other_obs[i] = other[SampleBatch.OBS][j]
                    other_action[i] = other[SampleBatch.ACTIONS][j]
        batch[OTHER_OBS] = other_obs
        batch[OTHER_ACTION] = other_action
        with torch.no_grad():
            t = self.to_tensors(batch)
            values = self.model.central_value(t[SampleBatch.OBS], t[OTHER_OBS], t[OTHER_ACTION])
        batch[SampleBatch.VF_PREDS] = values.cpu().numpy()
        if not batch[SampleBatch.TERMINATEDS][-1]:
            # a cut segment would need V(next obs, other's next obs and action)
            raise ValueError("this example expects batch_mode='complete_episodes'")
        cfg = self.config
        return compute_advantages(batch, 0.0, cfg.gamma, cfg.lambda_, use_gae=True)

    def loss(self, batch):
        """PPO's clipped surrogate with the central critic's value loss."""
        cfg = self.config
        dist_inputs, _ = self.model(batch[SampleBatch.OBS])
        dist = self.dist_class(dist_inputs)
        ratio = torch.exp(dist.logp(batch[SampleBatch.ACTIONS]) - batch[SampleBatch.ACTION_LOGP])
        adv = batch[SampleBatch.ADVANTAGES]
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        clipped = torch.clamp(ratio, 1 - cfg.clip_param, 1 + cfg.clip_param)
        policy_loss = -torch.min(ratio * adv, clipped * adv).mean()
        values = self.model.central_value(
            batch[SampleBatch.OBS], batch[OTHER_OBS], batch[OTHER_ACTION]
        )
        vf_loss = 0.5 * ((values - batch[SampleBatch.VALUE_TARGETS]) ** 2).mean()
        total = policy_loss + cfg.vf_loss_coeff * vf_loss
        return total, {"policy_loss": policy_loss.detach(), "vf_loss": vf_loss.detach()}


CONFIG = {
    "env": MatchTargetGame,
    "policies": {
        "agent0": PolicySpec(policy_class=CentralizedCriticPolicy),
        "agent1": PolicySpec(policy_class=CentralizedCriticPolicy),
    },
    "policy_mapping_fn": lambda agent_id: f"agent{agent_id}",
    "batch_mode": "complete_episodes",
    "num_envs_per_evaluator": 4,
    "train_batch_size": 400,
    "sgd_minibatch_size": 100,
    "num_sgd_iter": 4,
    "lr": 3e-3,
    "model": {"hiddens": (32, 32)},
}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--stop-iters", type=int, default=15, help="training iterations (default: %(default)s)"
    )
    args = parser.parse_args()
    if args.stop_iters < 1:
        parser.error(f"--stop-iters must be at least 1, got {args.stop_iters}")
    with PPOTrainer(CONFIG) as trainer:
        for _ in range(args.stop_iters):
            result = trainer.train()
            print(
                result["training_iteration"],
                "team return (max 20):",
                np.round(result["policy_reward_mean/agent0"], 2),
                "central vf_loss:",
                np.round(result["learner/agent0/vf_loss"], 3),
            )
