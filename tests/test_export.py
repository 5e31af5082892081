"""Export for serving without hierl: TorchScript / ONNX models of the greedy policy
(``Trainer.export_policy``, ``hierl export``) equal ``compute_single_action``."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import textwrap
from typing import Any

import gymnasium as gym
import numpy as np
import onnxruntime
import pytest
import torch

from hierl.algorithms.ddpg import TD3Trainer
from hierl.algorithms.dqn import DQNTrainer
from hierl.algorithms.ppo import PPOTrainer
from hierl.algorithms.sac import SACTrainer
from hierl.checkpoint import save_checkpoint
from hierl.cli import main
from hierl.evaluators import register_env
from hierl.export import ExportedPolicy, ExportError
from hierl.sample_batch import DEFAULT_POLICY_ID
from tests.support.learning_runs import SEED, train_until
from tests.test_non_torch_policy import BASE as NUMPY_Q
from tests.test_non_torch_policy import NumpyQTrainer

FORMATS = ("torchscript", "onnx")
SMALL = {"num_evaluators": 0, "num_envs_per_evaluator": 2, "seed": 0}
SMALL_PPO = {**SMALL, "train_batch_size": 256, "sgd_minibatch_size": 64, "num_sgd_iter": 2}
ROWS = 1000
LOGIT_TOLERANCE = 1e-5
TIE_GAP = 1e-4
"""Discrete actions are compared where the top two logits differ by more than this:
nearer ties may fall either way by float error between torch and onnxruntime."""


# -- tiny fake envs ----------------------------------------------------------------------
class _FakeEnv(gym.Env):
    """Random observations of ``observation_space``, 20-step episodes, zero reward."""

    observation_space: gym.Space
    action_space: gym.Space

    def __init__(self, config: Any = None):
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None):
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action: Any):
        self.t += 1
        reward = float(np.sum(action) == 1)
        return self.observation_space.sample(), reward, False, self.t >= 20, {}


class SmallImageEnv(_FakeEnv):
    """Atari-shaped (H, W, C) uint8 frames, smaller."""

    observation_space = gym.spaces.Box(0, 255, (36, 36, 4), np.uint8)
    action_space = gym.spaces.Discrete(6)


class OneHotEnv(_FakeEnv):
    """Discrete observations (one-hot, with a start) and MultiDiscrete actions with starts."""

    observation_space = gym.spaces.Discrete(7, start=3)
    action_space = gym.spaces.MultiDiscrete([3, 4], start=[1, -2])


class DictObsEnv(_FakeEnv):
    observation_space = gym.spaces.Dict({"a": gym.spaces.Box(-1, 1, (2,), np.float32)})
    action_space = gym.spaces.Discrete(2)


register_env("export_test/SmallImage", SmallImageEnv)
register_env("export_test/OneHot", OneHotEnv)
register_env("export_test/DictObs", DictObsEnv)

CONFIGS = {
    "cartpole": (PPOTrainer, {**SMALL_PPO, "env": "CartPole-v1"}, 1),
    "pendulum": (PPOTrainer, {**SMALL_PPO, "env": "Pendulum-v1"}, 1),
    "mean_std_filter": (
        PPOTrainer,
        {**SMALL_PPO, "env": "Pendulum-v1", "observation_filter": "MeanStdFilter"},
        2,
    ),
    "image_cnn": (
        PPOTrainer,
        {
            **SMALL_PPO,
            "env": "export_test/SmallImage",
            "train_batch_size": 64,
            "sgd_minibatch_size": 32,
            "model": {"conv_filters": [[8, 8, 4], [16, 3, 2]]},
        },
        1,
    ),
    "one_hot": (PPOTrainer, {**SMALL_PPO, "env": "export_test/OneHot"}, 1),
    "dqn": (DQNTrainer, {**SMALL, "env": "CartPole-v1"}, 0),
}
"""name: (trainer class, config, training iterations before the export)."""


# -- helpers -----------------------------------------------------------------------------
def _observations(space: gym.Space, rows: int, seed: int = 1) -> np.ndarray:
    space = copy.deepcopy(space)
    space.seed(seed)
    return np.stack([np.asarray(space.sample()) for _ in range(rows)])


def _load(exported: ExportedPolicy):
    """A function (inputs by name) -> outputs by name, running the written file with
    torch.jit or onnxruntime only."""
    names = [o["name"] for o in exported.spec["outputs"]]
    if exported.spec["format"] == "onnx":
        session = onnxruntime.InferenceSession(str(exported.model_path))
        return lambda feeds: dict(zip(names, session.run(None, feeds), strict=True))
    module = torch.jit.load(str(exported.model_path))
    order = [i["name"] for i in exported.spec["inputs"]]

    def run(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with torch.no_grad():
            out = module(*(torch.as_tensor(feeds[n]) for n in order))
        return dict(zip(names, (t.numpy() for t in out), strict=True))

    return run


def _obs_input(exported: ExportedPolicy, obs: np.ndarray) -> np.ndarray:
    spec = exported.spec["inputs"][0]
    assert spec["name"] == "obs"
    return obs.astype(spec["dtype"])


def _hierl_outputs(trainer: Any, obs: np.ndarray) -> dict[str, np.ndarray]:
    """The policy's distribution inputs and values through hierl's own preprocessing."""
    evaluator = trainer.local_evaluator
    prep, obs_filter = (
        evaluator.preprocessors[DEFAULT_POLICY_ID],
        evaluator.filters[DEFAULT_POLICY_ID],
    )
    flat = obs_filter(prep.transform(obs), update=False)
    policy = trainer.get_policy()
    with torch.no_grad():
        dist_inputs, values = policy.model(torch.as_tensor(flat))
    return {"action_dist_inputs": dist_inputs.numpy(), "vf_preds": values.numpy()}


def _assert_actions_match(exported_actions, expected, dist_inputs, discrete: bool) -> None:
    if not discrete:
        np.testing.assert_allclose(exported_actions, expected, rtol=0, atol=LOGIT_TOLERANCE)
        return
    assert exported_actions.dtype == np.int64 and exported_actions.shape == expected.shape
    # per row, the smallest top-2 gap over the row's categorical components
    if dist_inputs.ndim == 2 and expected.ndim == 1:
        top2 = np.sort(dist_inputs, axis=-1)[:, -2:]
        gap = top2[:, 1] - top2[:, 0]
    else:
        gap = np.full(len(expected), np.inf)
    clear = gap > TIE_GAP
    assert clear.mean() > 0.5, "too many near-ties to compare the actions"
    np.testing.assert_array_equal(exported_actions[clear], expected[clear])


# -- outputs equal compute_single_action -------------------------------------------------
@pytest.fixture(scope="module")
def trained():
    """One trainer per config, trained for its iterations, stopped at the end."""
    trainers: dict[str, Any] = {}
    yield lambda name: trainers.get(name) or trainers.setdefault(name, _make(name))
    for trainer in trainers.values():
        trainer.stop()


def _make(name: str) -> Any:
    trainer_class, config, iterations = CONFIGS[name]
    trainer = trainer_class(config)
    for _ in range(iterations):
        trainer.train()
    return trainer


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_exported_outputs_equal_compute_single_action(trained, tmp_path, name, fmt):
    trainer = trained(name)
    policy = trainer.get_policy()
    exported = trainer.export_policy(tmp_path / "out", fmt)
    run = _load(exported)
    obs = _observations(policy.observation_space, ROWS)
    expected = np.stack([trainer.compute_single_action(o, explore=False) for o in obs])
    got = run({"obs": _obs_input(exported, obs)})
    reference = _hierl_outputs(trainer, obs)
    for key in ("action_dist_inputs", "vf_preds"):
        np.testing.assert_allclose(got[key], reference[key], rtol=0, atol=LOGIT_TOLERANCE)
    assert got["actions"].dtype == expected.dtype
    discrete = not isinstance(policy.action_space, gym.spaces.Box)
    if isinstance(policy.action_space, gym.spaces.MultiDiscrete):
        gaps = [
            np.diff(np.sort(part, axis=-1)[:, -2:], axis=-1)[:, 0]
            for part in np.split(got["action_dist_inputs"], [3], axis=-1)  # nvec (3, 4)
        ]
        clear = np.minimum(*gaps) > TIE_GAP
        np.testing.assert_array_equal(got["actions"][clear], expected[clear])
        assert clear.mean() > 0.5
    else:
        _assert_actions_match(got["actions"], expected, got["action_dist_inputs"], discrete)
    # one row at a time too: the batch dimension is dynamic
    one = run({"obs": _obs_input(exported, obs[:1])})
    assert one["actions"].shape == (1, *expected.shape[1:])


ACTOR_CRITIC = {
    "env": "Pendulum-v1",
    "model": {"hiddens": [16, 16], "activation": "relu"},
    "rollout_fragment_length": 10,
    "train_batch_size": 16,
    "replay_ratio": 16.0,
    "learning_starts": 30,
    "random_timesteps": 30,
    "timesteps_per_iteration": 100,
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("trainer_class", [SACTrainer, TD3Trainer])
def test_replay_actor_critics_export_the_greedy_action_and_twin_min_value(
    tmp_path, trainer_class, fmt
):
    with trainer_class(ACTOR_CRITIC) as trainer:
        trainer.train()
        exported = trainer.export_policy(tmp_path / "out", fmt)
        policy = trainer.get_policy()
        obs = _observations(policy.observation_space, ROWS).astype(np.float32)
        expected = np.stack([trainer.compute_single_action(o, explore=False) for o in obs])
        got = _load(exported)({"obs": obs})
        model = policy.model
        with torch.no_grad():
            x = torch.as_tensor(obs)
            u = policy.unscale_actions(torch.as_tensor(expected))
            q = torch.minimum(model.critic(x, u), model.critic2(x, u)).numpy()
            if trainer_class is SACTrainer:  # greedy: tanh of the Gaussian's mean
                mean, log_std = model.actor(x)
                dist_inputs = torch.cat([mean, log_std], -1).numpy()
                np.testing.assert_allclose(
                    policy.scale_actions(torch.tanh(mean)).numpy(), expected, atol=1e-5
                )
            else:
                dist_inputs = model.actor.net(x).numpy()
    assert exported.spec["outputs"][0] == {
        "name": "actions",
        "shape": [None, 1],
        "dtype": "float32",
    }
    assert (np.abs(expected) < 2.0).all() and np.ptp(expected) > 1e-3  # not all at a bound
    np.testing.assert_allclose(got["actions"], expected, rtol=0, atol=LOGIT_TOLERANCE)
    np.testing.assert_allclose(got["action_dist_inputs"], dist_inputs, rtol=0, atol=1e-5)
    np.testing.assert_allclose(got["vf_preds"], q, rtol=0, atol=1e-4)


def test_mean_std_filter_statistics_are_folded_in(trained, tmp_path):
    trainer = trained("mean_std_filter")
    mean, scale, clip = trainer.local_evaluator.filters["default_policy"].normalization()
    assert np.abs(mean).max() > 0.05 and np.abs(scale - 1).max() > 0.05  # non-trivial
    exported = trainer.export_policy(tmp_path / "out", "onnx")
    assert exported.spec["observation_filter"] == {"type": "MeanStdFilter", "clip": clip}
    # the same weights without the filter's statistics give other outputs
    obs = _observations(trainer.get_policy().observation_space, 64)
    with_filter = _load(exported)({"obs": obs.astype(np.float32)})["action_dist_inputs"]
    with torch.no_grad():
        raw, _ = trainer.get_policy().model(torch.as_tensor(obs, dtype=torch.float32))
    assert np.abs(with_filter - raw.numpy()).max() > 1e-3


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fmt", FORMATS)
def test_recurrent_policy_exports_with_state_inputs_and_outputs(tmp_path, fmt):
    config = {**SMALL_PPO, "env": "CartPole-v1", "model": {"use_lstm": True, "lstm_cell_size": 8}}
    with PPOTrainer(config) as trainer:
        trainer.train()
        exported = trainer.export_policy(tmp_path / "out", fmt)
        spec = exported.spec
        assert spec["recurrent"] is True
        assert [i["name"] for i in spec["inputs"]] == ["obs", "state_in_0", "state_in_1"]
        assert [o["name"] for o in spec["outputs"]][-2:] == ["state_out_0", "state_out_1"]
        run = _load(exported)
        sequences, steps = 20, 25
        obs = _observations(trainer.get_policy().observation_space, sequences * steps)
        obs = obs.reshape(sequences, steps, -1).astype(np.float32)
        states = [
            np.tile(np.asarray(i["initial"], np.float32), (sequences, 1))
            for i in spec["inputs"][1:]
        ]
        hierl_states: list[Any] = [None] * sequences
        for t in range(steps):
            out = run({"obs": obs[:, t], "state_in_0": states[0], "state_in_1": states[1]})
            states = [out["state_out_0"], out["state_out_1"]]
            for row in range(sequences):
                action, hierl_states[row] = trainer.compute_single_action_and_state(
                    obs[row, t], hierl_states[row]
                )
                logits = out["action_dist_inputs"][row]
                if abs(logits[0] - logits[1]) > TIE_GAP:
                    assert out["actions"][row] == action
                for mine, theirs in zip(states, hierl_states[row], strict=True):
                    np.testing.assert_allclose(mine[row], theirs, rtol=0, atol=LOGIT_TOLERANCE)


# -- the sidecar, files, errors ----------------------------------------------------------
@pytest.mark.timeout(60)
def test_policy_json_describes_the_model_and_both_formats_hash_the_same_weights(tmp_path):
    trainer = _make("cartpole")  # its own: trained once more below
    onnx_export = trainer.export_policy(tmp_path / "onnx", "onnx")
    script_export = trainer.export_policy(tmp_path / "ts", "torchscript")
    spec = json.loads((tmp_path / "onnx" / "policy.json").read_text())
    assert spec == onnx_export.spec
    assert spec["algorithm"] == "PPO" and spec["iteration"] == trainer.iteration == 1
    assert spec["observation_space"]["type"] == "Box" and spec["observation_space"]["shape"] == [4]
    assert spec["action_space"] == {"type": "Discrete", "n": 2, "start": 0}
    assert spec["inputs"] == [{"name": "obs", "shape": [None, 4], "dtype": "float32"}]
    assert [o["name"] for o in spec["outputs"]] == ["actions", "action_dist_inputs", "vf_preds"]
    assert spec["outputs"][0] == {"name": "actions", "shape": [None], "dtype": "int64"}
    session = onnxruntime.InferenceSession(str(onnx_export.model_path))
    assert [i.name for i in session.get_inputs()] == ["obs"]
    assert [o.name for o in session.get_outputs()] == [o["name"] for o in spec["outputs"]]
    assert spec["weights_sha256"] == script_export.spec["weights_sha256"]
    # exporting again replaces the files, leaving no temporary ones behind
    trainer.train()
    again = trainer.export_policy(tmp_path / "onnx", "onnx")
    assert again.spec["weights_sha256"] != spec["weights_sha256"]
    assert sorted(p.name for p in (tmp_path / "onnx").iterdir()) == ["policy.json", "policy.onnx"]
    trainer.stop()


def test_export_errors_name_what_is_valid(trained, tmp_path, monkeypatch):
    trainer = trained("cartpole")
    with pytest.raises(
        ExportError, match="unknown export format 'tflite'; valid: torchscript, onnx"
    ):
        trainer.export_policy(tmp_path, "tflite")
    with pytest.raises(ValueError, match="unknown policy id 'nope'"):
        trainer.export_policy(tmp_path, "onnx", policy_id="nope")
    policy = trainer.get_policy()
    greedy = policy.compute_actions

    def flipped(obs, state=None, explore=True):  # a subclass with another greedy rule
        return 1 - greedy(obs, state, explore)[0], [], {}

    monkeypatch.setattr(policy, "compute_actions", flipped)
    with pytest.raises(ExportError, match=r"PPOPolicy.compute_actions\(explore=False\) gives"):
        trainer.export_policy(tmp_path, "torchscript")
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "onnx", None)  # as if not installed
    with pytest.raises(ExportError, match=r"pip install 'hierl\[export\]'"):
        trainer.export_policy(tmp_path, "onnx")
    monkeypatch.undo()
    numpy_policy = NumpyQTrainer({**NUMPY_Q, "optimizer": "local"})
    with numpy_policy, pytest.raises(ExportError, match="NumpyQPolicy is not a TorchPolicyGraph"):
        numpy_policy.export_policy(tmp_path, "torchscript")
    dict_obs = PPOTrainer({**SMALL_PPO, "env": "export_test/DictObs"})
    with dict_obs, pytest.raises(ExportError, match="FlattenObservation"):
        dict_obs.export_policy(tmp_path, "onnx")
    assert not list(tmp_path.iterdir())


# -- the exported CartPole policy drives the env alone ---------------------------------
DRIVER = textwrap.dedent(
    """
    import json, sys
    import gymnasium as gym, numpy as np, onnxruntime

    directory = sys.argv[1]
    spec = json.load(open(f"{directory}/policy.json"))
    session = onnxruntime.InferenceSession(f"{directory}/{spec['file']}")
    env = gym.make("CartPole-v1")
    returns = []
    for episode in range(10):
        obs, _ = env.reset(seed=1000 + episode)
        total, done = 0.0, False
        while not done:
            (action,) = session.run(["actions"], {"obs": obs[None].astype(np.float32)})
            obs, reward, terminated, truncated, _ = env.step(int(action[0]))
            total, done = total + reward, terminated or truncated
        returns.append(total)
    assert not any(m == "hierl" or m.startswith("hierl.") for m in sys.modules)
    print(json.dumps(returns))
    """
)


@pytest.mark.learning
@pytest.mark.timeout(240)
def test_exported_cartpole_policy_scores_450_with_onnxruntime_alone(tmp_path):
    # PPO's defaults (as test_learning.py's CartPole test), in-process: seeds 0-4 reached
    # 450 at 55k-65k steps; the greedy policy then scores 500
    with PPOTrainer({"env": "CartPole-v1", "num_evaluators": 0, "seed": SEED}) as trainer:
        run = train_until(trainer, 450, 150_000)
        assert run.reached, run
        exported = trainer.export_policy(tmp_path / "policy", "onnx")
    script = tmp_path / "drive.py"
    script.write_text(DRIVER)
    done = subprocess.run(
        [sys.executable, str(script), str(exported.model_path.parent)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    returns = json.loads(done.stdout)
    assert np.mean(returns) >= 450, returns


# -- hierl export ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def checkpoint(trained, tmp_path_factory):
    return trained("cartpole").save(tmp_path_factory.mktemp("ckpt") / "000001")


@pytest.mark.timeout(120)
def test_cli_export_writes_the_files_and_prints_their_paths(trained, checkpoint, tmp_path, capsys):
    out = tmp_path / "exported"
    assert main(["export", str(checkpoint), "--format", "onnx", "--output", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str((out / "policy.onnx").resolve()), str((out / "policy.json").resolve())]
    spec = json.loads((out / "policy.json").read_text())
    assert spec["algorithm"] == "PPO" and spec["iteration"] == 1
    obs = _observations(gym.spaces.Box(-2, 2, (4,), np.float32), 50)
    session = onnxruntime.InferenceSession(str(out / "policy.onnx"))
    logits = session.run(["action_dist_inputs"], {"obs": obs})[0]
    reference = _hierl_outputs(trained("cartpole"), obs)["action_dist_inputs"]
    np.testing.assert_allclose(logits, reference, rtol=0, atol=LOGIT_TOLERANCE)
    # defaults: TorchScript, beside the checkpoint
    assert main(["export", str(checkpoint)]) == 0
    default_dir = checkpoint.with_name(f"{checkpoint.name}_torchscript")
    assert capsys.readouterr().out.split()[0] == str((default_dir / "policy.pt").resolve())
    assert torch.jit.load(str(default_dir / "policy.pt")) is not None


def _error(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("hierl: error: "), err
    return err


def test_cli_export_bad_input_is_one_error_line(checkpoint, tmp_path, capsys):
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "checkpoint.json").write_text("{not json")
    assert "corrupt" in _error(["export", str(corrupt)], capsys)
    err = _error(["export", str(checkpoint), "--format", "tflite"], capsys)
    assert "unknown --format 'tflite'; valid: torchscript, onnx" in err
    meta = {"kind": "hierl-trainer", "algorithm": "ALPHAZERO", "config": {}}
    nested = save_checkpoint(tmp_path / "nested", meta, {})
    err = _error(["export", str(nested)], capsys)
    assert "has no AlphaZero config or weights" in err  # its network is exported
    err = _error(["export", str(checkpoint), "--policy-id", "nope"], capsys)
    assert "unknown policy id 'nope'" in err and "default_policy" in err
    assert not (tmp_path / "corrupt_torchscript").exists()
