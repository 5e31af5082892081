"""Small helpers several tests share: the keys of a train() result, a free port."""

from __future__ import annotations

import socket

RESULT_KEYS = {
    "episode_reward_mean",
    "episode_reward_min",
    "episode_reward_max",
    "episode_len_mean",
    "episodes_this_iter",
    "timesteps_total",
    "timesteps_this_iter",
    "training_iteration",
    "time_this_iter_s",
    "time_total_s",
    "sample_throughput",
    "sample_time_ms",
    "learn_time_ms",
}
"""Keys every ``Trainer.train()`` result carries."""


def free_port() -> int:
    """A localhost TCP port nobody listens on now (tests' servers and clients)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
