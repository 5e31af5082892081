"""Bad input: NaN/inf or out-of-space env data, NaN losses, bad configs, bad CLI use, Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from hierl.algorithms.dqn import DQNConfig
from hierl.algorithms.ppo import PPOConfig, PPOTrainer
from hierl.checkpoint import load_checkpoint
from hierl.config import ConfigError
from hierl.evaluators.env_checks import EnvDataError
from tests.support.helpers import sigint_as_from_a_terminal

HIERL = Path(sys.executable).with_name("hierl")
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


class BadDataEnv(gym.Env):
    """A 2-d Box env that misbehaves at env step ``bad_step`` (counted over episodes)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config=None):
        config = dict(config or {})
        self.kind = config.get("kind", "none")
        self.bad_step = config.get("bad_step", 5)
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.steps += 1
        obs, reward = np.full(2, 0.5, np.float32), 1.0
        if self.steps == self.bad_step:
            if self.kind == "nan_obs":
                obs[1] = np.nan
            elif self.kind == "inf_reward":
                reward = np.inf
            elif self.kind == "out_of_bounds":
                obs[0] = 3.0
        return obs, reward, False, self.steps % 10 == 0, {}


BASE = {
    "env": BadDataEnv,
    "num_envs_per_evaluator": 1,
    "train_batch_size": 20,
    "model": {"hiddens": [4]},
}


@pytest.mark.parametrize(
    "kind, pattern",
    [
        ("nan_obs", r"non-finite observation at step 7 \(sub-env 0\): \[0\.5, *nan\]"),
        ("inf_reward", r"non-finite reward at step 7 \(sub-env 0\): \[inf\]"),
        (
            "out_of_bounds",
            r"observation outside its observation space Box.* at step 7.*\[3\. *, *0\.5\]",
        ),
    ],
)
def test_bad_env_data_is_a_clear_error_and_weights_stay_finite(kind, pattern):
    with PPOTrainer({**BASE, "env_config": {"kind": kind, "bad_step": 7}}) as trainer:
        before = trainer.get_weights()
        with pytest.raises(EnvDataError, match=pattern) as info:
            trainer.train()
        assert "env 'BadDataEnv' on evaluator 0" in str(info.value)
        after = trainer.get_weights()["default_policy"]
        for k, v in before["default_policy"].items():
            np.testing.assert_array_equal(after[k], v)


def test_wrong_observation_shape_and_discrete_range_are_clear_errors():
    from types import SimpleNamespace

    from hierl.evaluators.env_checks import check_observations

    box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    sampler = SimpleNamespace(obs_space=box, env_id="E", worker_index=3)
    check_observations(sampler, np.zeros((4, 2), np.float32), 0)  # fine
    with pytest.raises(EnvDataError, match=r"env 'E' on evaluator 3 .*shape \(3,\) at step 9"):
        check_observations(sampler, np.zeros((4, 3), np.float32), 9)
    sampler.obs_space = gym.spaces.Discrete(3)
    with pytest.raises(EnvDataError, match=r"outside .*Discrete\(3\) at reset\(\) \(sub-env 1\)"):
        check_observations(sampler, np.array([2, 3]), None)


def test_nan_loss_is_refused_with_batch_statistics_and_leaves_weights(caplog):
    with PPOTrainer({"env": "CartPole-v1", "train_batch_size": 64, "seed": 0}) as trainer:
        trainer.train()  # Adam has moments now
        policy = trainer.get_policy()
        batch = trainer.local_evaluator.sample()
        batch["advantages"][3] = np.nan
        before = policy.get_state()
        with caplog.at_level("WARNING", logger="hierl.torch_policy_graph"):
            assert policy.learn_on_batch(batch) == {"num_nonfinite_grads_skipped": 1.0}
        message = caplog.text
        assert "loss nan" in message and "weights and optimizer state left unchanged" in message
        assert "advantages: min" in message and "(1 non-finite)" in message
        assert "obs: min" in message and "rewards: min 1 max 1 mean 1" in message
        after = policy.get_state()
        for k, v in before["weights"].items():
            np.testing.assert_array_equal(after["weights"][k], v)
        for idx, moments in before["optimizer"]["state"].items():
            for name, v in moments.items():
                np.testing.assert_array_equal(after["optimizer"]["state"][idx][name], v)
        assert all(torch.isfinite(p).all() for p in policy.model.parameters())


@pytest.mark.parametrize(
    "cls, config, pattern",
    [
        (PPOConfig, {"lrr": 1e-3}, r"unknown config key 'lrr'.*did you mean 'lr'.*valid keys:"),
        (PPOConfig, {"model": {"hidens": [8]}}, r"'model.hidens'.*did you mean 'hiddens'"),
        (PPOConfig, {"lr": "fast"}, r"'lr' = 'fast' must be a number"),
        (PPOConfig, {"num_sgd_iter": 2.5}, r"'num_sgd_iter' = 2.5 must be an integer"),
        (PPOConfig, {"gamma": 1.5}, r"'gamma' = 1.5 is invalid: must be in \[0, 1\]"),
        (PPOConfig, {"lr": float("nan")}, r"'lr' = nan is invalid: must be > 0"),
        (
            PPOConfig,
            {"lr_schedule": [[0, 3e-4], [1000, -1e-4]]},
            r"'lr_schedule' = .*-0\.0001.* is invalid: None or \[\[timestep >= 0, lr >= 0\]",
        ),
        (PPOConfig, {"lr_schedule": [[0, float("nan")]]}, r"'lr_schedule' = .*nan.*is invalid"),
        (
            PPOConfig,
            {"batch_mode": "whole"},
            r"'batch_mode' = 'whole' is not valid; valid values: 'truncate_episodes'",
        ),
        (
            DQNConfig,
            {"learning_starts": 0},
            r"'learning_starts' = 0 is invalid: must be >= 1",
        ),
        (
            DQNConfig,
            {"checkpoint_replay_buffer": "yes"},
            r"'checkpoint_replay_buffer'.*true or false",
        ),
    ],
)
def test_config_errors_name_the_field_and_what_is_valid(cls, config, pattern):
    with pytest.raises(ConfigError, match=pattern):
        cls.from_dict({"env": "CartPole-v1", **config})


def test_incompatible_optimizer_lists_the_valid_ones():
    with pytest.raises(ConfigError, match=r"'optimizer' = 'replay'.*valid: local, multi_gpu"):
        PPOTrainer({"env": "CartPole-v1", "optimizer": "replay"})
    with pytest.raises(ConfigError, match=r"did you mean 'local'"):
        PPOTrainer({"env": "CartPole-v1", "optimizer": "locl"})


@pytest.mark.parametrize(
    "argv, pattern",
    [
        (["train", "--algo", "PPO", "--env", "NoSuchEnv-v0"], "unknown env 'NoSuchEnv-v0'"),
        (["train", "--algo", "PPO", "--env", "CartPole-v1", "--config", "{bad"], "invalid inline"),
        (["rollout", "/no/such/checkpoint"], "does not exist"),
    ],
)
def test_cli_bad_arguments_one_line_exit_2_in_a_real_process(argv, pattern):
    proc = subprocess.run([str(HIERL), *argv], env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert len(proc.stderr.splitlines()) == 1 and pattern in proc.stderr, proc.stderr


def _signal_state(pid: int) -> str:
    """The Sig* lines of /proc/PID/status (pending, blocked, ignored, caught masks)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as e:
        return f"no /proc status: {e}"
    return ", ".join(line.replace("\t", " ") for line in lines if line.startswith(("Sh", "Sig")))


def test_first_ctrl_c_asks_for_a_stop_after_the_iteration_and_a_second_interrupts():
    from hierl.cli.train import StopAfterIteration

    before = signal.getsignal(signal.SIGINT)
    with StopAfterIteration() as ctrl_c:
        assert not ctrl_c.requested
        signal.raise_signal(signal.SIGINT)  # handled at once, in this (the main) thread
        assert ctrl_c.requested
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before


def test_ctrl_c_during_train_saves_a_final_checkpoint(tmp_path):
    """SIGINT to a real ``hierl train`` after its first iteration: a final checkpoint is
    saved and the process exits with status 0."""
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [
            str(HIERL), "train", "--algo", "PPO", "--env", "CartPole-v1", "--quiet",
            "--stop", "training_iteration=100000", "--output-dir", str(out),
            "--config", '{"train_batch_size": 200, "model": {"hiddens": [8]}}',
        ],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_as_from_a_terminal,
    )  # fmt: skip
    results = out / "result.jsonl"
    deadline = time.monotonic() + 150
    while not (results.exists() and results.read_text().count("\n") >= 1):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no first iteration"
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    try:  # about 2 s normally; the bound is generous for a loaded machine
        stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        signals = _signal_state(proc.pid)
        proc.kill()
        stdout, stderr = proc.communicate()
        raise AssertionError(
            f"no exit 120 s after SIGINT ({signals}); stdout {stdout!r} stderr {stderr!r}"
        ) from None
    assert proc.returncode == 0, stderr
    assert "interrupted after" in stdout and "Traceback" not in stderr
    # The interrupt may land after an iteration's train() returned and before its result
    # line was written: the final checkpoint then is one iteration past the last line.
    lines = len(results.read_text().splitlines())
    [printed] = [line for line in stdout.splitlines() if line.startswith("checkpoint: ")]
    checkpoint = Path(printed.removeprefix("checkpoint: "))
    assert checkpoint.parent == (out / "checkpoints").resolve()
    iteration = int(checkpoint.name)
    assert lines >= 1 and iteration in (lines, lines + 1), (lines, printed)
    meta, state = load_checkpoint(checkpoint)
    assert meta["algorithm"] == "PPO" and state["counters"]["iteration"] == iteration
