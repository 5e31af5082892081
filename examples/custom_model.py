"""A custom torch model, named in the config, trained with PPO on CartPole.

``LayerNormActorCritic`` is one shared torso (Linear -> LayerNorm -> ReLU, ``width``
units from ``custom_model_config``) with a policy head and a value head.  It is registered
as ``"layer_norm_mlp"``; the config names it, so the config stays plain data (YAML, JSON,
checkpoints hold the name, never code)::

    model:
      custom_model: layer_norm_mlp
      custom_model_config: {width: 64}

A factory gets ``(observation_space, action_space, num_outputs, model_config)`` and
returns a module whose ``forward(obs)`` gives ``(dist_inputs (B, num_outputs), values
(B,))``; see ``hierl.models.networks.make_custom_model``.  Processes that never run this
file (``hierl train --config cfg.yaml``) can name the factory itself instead:
``custom_model: examples.custom_model:make_layer_norm_model`` (run from the repository
root).

Run: ``python examples/custom_model.py`` (about 15 seconds on 2 cores); ``--stop-iters N``
trains N iterations instead of 25 (``--stop-iters 1``: a quick check).
"""

import argparse

import gymnasium as gym
import torch
from torch import nn

import hierl
from hierl import PPOTrainer
from hierl.models import ModelConfig, get_preprocessor


class LayerNormActorCritic(nn.Module):
    """A shared Linear -> LayerNorm -> ReLU torso, a policy head and a value head."""

    def __init__(self, in_size: int, num_outputs: int, width: int = 64):
        super().__init__()
        self.torso = nn.Sequential(
            nn.Linear(in_size, width), nn.LayerNorm(width), nn.ReLU(),
            nn.Linear(width, width), nn.LayerNorm(width), nn.ReLU(),
        )  # fmt: skip
        self.pi = nn.Linear(width, num_outputs)
        self.vf = nn.Linear(width, 1)
        nn.init.orthogonal_(self.pi.weight, gain=0.01)  # near-uniform first policy

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.torso(obs)
        return self.pi(features), self.vf(features).squeeze(-1)


def make_layer_norm_model(
    obs_space: gym.Space, action_space: gym.Space, num_outputs: int, model_config: ModelConfig
) -> nn.Module:
    """The model factory: sizes from the spaces, settings from ``custom_model_config``."""
    in_size = get_preprocessor(obs_space).size  # what the sampler feeds the model
    return LayerNormActorCritic(in_size, num_outputs, **model_config.custom_model_config)


hierl.register_model("layer_norm_mlp", make_layer_norm_model)

CONFIG = {
    "env": "CartPole-v1",
    "model": {"custom_model": "layer_norm_mlp", "custom_model_config": {"width": 64}},
    "num_envs_per_evaluator": 4,
    "train_batch_size": 1000,
    "lr": 1e-3,
}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--stop-iters", type=int, default=25, help="training iterations (default: %(default)s)"
    )
    args = parser.parse_args()
    if args.stop_iters < 1:
        parser.error(f"--stop-iters must be at least 1, got {args.stop_iters}")
    with PPOTrainer(CONFIG) as trainer:
        print(trainer.get_policy().model)
        for _ in range(args.stop_iters):
            result = trainer.train()
            print(
                f"iter {result['training_iteration']:2d}  "
                f"reward {result['episode_reward_mean']:6.1f}  "
                f"loss {result['learner/total_loss']:8.3f}"
            )
