"""Custom metrics from callbacks: the pole angle of CartPole at the end of each episode.

``PoleAngleCallbacks`` keeps the largest pole angle of each episode (``on_episode_step``)
and its final one (``on_episode_end``) as custom metrics; every ``train()`` result then
has ``custom_metrics/final_pole_angle_mean`` (``_min``, ``_max``) and
``custom_metrics/max_pole_angle_mean`` etc., and ``on_train_result`` adds
``episodes_per_second``.

Callbacks are named as ``"module:Class"`` in configs (YAML, JSON, checkpoints), so the
same class works from the command line, and ``hierl train`` writes every numeric result
key to TensorBoard::

    hierl train --algo PPO --env CartPole-v1 \\
        --config '{"callbacks": "examples.custom_metric_callbacks:PoleAngleCallbacks"}'
    tensorboard --logdir hierl_results

Run: ``python examples/custom_metric_callbacks.py`` from the repository root (about 10
seconds on 2 cores); ``--stop-iters N`` trains N iterations instead of 10
(``--stop-iters 1``: a quick check).
"""

import argparse
import math

from hierl import PPOTrainer
from hierl.evaluators import Episode, EpisodeCallbacks

POLE_ANGLE = 2
"""Index of the pole angle (radians) in CartPole's observation."""


class PoleAngleCallbacks(EpisodeCallbacks):
    """Reports the final and the largest absolute pole angle of every episode, in degrees."""

    def on_episode_start(self, *, episode: Episode, worker_index: int) -> None:
        episode.user_data["max_angle"] = abs(float(episode.last_observation[POLE_ANGLE]))

    def on_episode_step(self, *, episode: Episode, worker_index: int) -> None:
        angle = abs(float(episode.last_observation[POLE_ANGLE]))
        episode.user_data["max_angle"] = max(episode.user_data["max_angle"], angle)

    def on_episode_end(self, *, episode: Episode, env_info: dict, worker_index: int) -> None:
        final = abs(float(episode.last_observation[POLE_ANGLE]))
        episode.custom_metrics["final_pole_angle"] = math.degrees(final)
        episode.custom_metrics["max_pole_angle"] = math.degrees(episode.user_data["max_angle"])

    def on_train_result(self, *, trainer, result: dict) -> None:
        result["episodes_per_second"] = result["episodes_this_iter"] / result["time_this_iter_s"]


CONFIG = {
    "env": "CartPole-v1",
    "callbacks": PoleAngleCallbacks,  # or "examples.custom_metric_callbacks:PoleAngleCallbacks"
    "num_envs_per_evaluator": 4,
    "train_batch_size": 1000,
    "model": {"hiddens": (32, 32)},
}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--stop-iters", type=int, default=10, help="training iterations (default: %(default)s)"
    )
    args = parser.parse_args()
    if args.stop_iters < 1:
        parser.error(f"--stop-iters must be at least 1, got {args.stop_iters}")
    with PPOTrainer(CONFIG) as trainer:
        for _ in range(args.stop_iters):
            result = trainer.train()
            print(
                f"iter {result['training_iteration']:2d}  "
                f"reward {result['episode_reward_mean']:6.1f}  "
                f"final angle {result['custom_metrics/final_pole_angle_mean']:5.1f} deg  "
                f"max angle {result['custom_metrics/max_pole_angle_mean']:5.1f} deg  "
                f"{result['episodes_per_second']:6.1f} episodes/s"
            )
