"""Small helpers several tests share: the keys of a train() result, a free port, the
`hierl` command in a fresh process, a small external-env PPO config, killing a Ray
actor and waiting until Ray knows it is dead."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The repository root (the source tree these tests run against)."""

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
    """A localhost TCP port nobody listens on now, for a server a test starts later.

    Drawn at random between Ray's worker ports (10002-19999) and the kernel's ephemeral
    range, from which every ``bind(0)`` and outgoing connection takes its port (Ray's
    own servers, the other pytest worker's clients): one of those could take a port
    from inside that range in the seconds before the test's server binds it.
    """
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except OSError:  # not Linux
        low = 0
    rng = random.SystemRandom()
    for _ in range(100 if low > 20_001 else 0):
        port = rng.randrange(20_000, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # no room below the ephemeral range: any free port
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cli(
    argv: list[str], cwd: Path, timeout: float = 400, **env: str
) -> subprocess.CompletedProcess:
    """``python -m hierl.cli ARGV`` in a fresh process in ``cwd`` against this source tree,
    with ``env`` added to the environment; its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "hierl.cli", *argv],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0", **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


EXTERNAL_PPO = {  # one sample() = whole episodes holding at least 20 steps
    "env": "CartPole-v1",
    "input": "external",
    "input_external": {"port": 0},
    "num_envs_per_evaluator": 1,
    "rollout_fragment_length": 20,
    "train_batch_size": 40,
    "sgd_minibatch_size": 20,
    "num_sgd_iter": 1,
    "sample_timeout_s": 20,
    "seed": 0,
}
"""PPO on CartPole driven by an external client through the external-env server."""


TINY_ALPHAZERO = {
    "num_self_play_workers": 0,
    "num_envs_per_self_play_worker": 4,
    "learning_starts": 64,
    "train_batch_size": 32,
    "sgd_steps_per_round": 2,
    "num_simulations": 4,
    "arena_games": 2,
    "strength_games": 2,
    "hidden_sizes": [16],
    "time_budget_s": None,
    "train_rounds_per_iter": 1,
}
"""An AlphaZero iteration in seconds: in-process self-play, 4 simulations a move."""


def sigint_as_from_a_terminal() -> None:
    """``preexec_fn`` of a ``Popen`` child that a test stops with SIGINT (Ctrl-C): SIGINT
    handled and unblocked, as a shell gives a foreground job.  Popen children inherit an
    ignored or blocked SIGINT from the test process (whose threads belong to Ray and
    pytest), and Python keeps it that way."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def kill_and_wait(actor, timeout_s: float = 120.0) -> BaseException:
    """Kill ``actor`` (no restart) and return the ``RayActorError`` a call to it raises
    once Ray knows it is dead.

    ``ray.kill`` is asynchronous: a call sent right after it may still be served, so a
    probe (``__ray_ready__``) is repeated until it fails (``AssertionError`` after ``timeout_s``).
    """
    import ray

    ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=timeout_s)
        except ray.exceptions.RayActorError as error:
            return error
        time.sleep(0.1)
    raise AssertionError(f"{actor} still answers {timeout_s:.0f} s after ray.kill")


def wait_for(condition, timeout_s: float = 30.0, what: str = "condition") -> None:
    """Poll ``condition()`` until true; ``AssertionError`` naming ``what`` after
    ``timeout_s`` (a generous deadline, not a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not reached in {timeout_s:g} s"
        time.sleep(0.01)


def train_until_done(trainer, done, timeout_s: float = 60.0) -> dict:
    """``trainer.train()`` until ``done(result)`` or ``timeout_s`` of wall-clock; returns
    the last result.  What an asynchronous learner thread does in one iteration depends
    on the machine's load (a loaded iteration may hold no update), so tests of the
    asynchronous strategies wait on what they check, not on a count of iterations."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = trainer.train()
        if done(result) or time.monotonic() > deadline:
            return result
