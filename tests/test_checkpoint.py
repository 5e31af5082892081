"""Complete checkpoints: exact resume in a fresh process, atomic writes, clear errors."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from hierl.algorithms.dqn import DQNTrainer
from hierl.algorithms.ppo import PPOTrainer
from hierl.checkpoint import ARRAYS_FILE, META_FILE, CheckpointError, load_checkpoint
from hierl.config import ConfigError
from hierl.evaluators import env_state

REPO = Path(__file__).resolve().parents[1]

PPO_CONFIG = {
    "env": "CartPole-v1",
    "train_batch_size": 200,
    "sgd_minibatch_size": 64,
    "num_sgd_iter": 2,
    "model": {"hiddens": [16]},
    "observation_filter": "MeanStdFilter",
    "seed": 3,
}
DQN_CONFIG = {
    "env": "CartPole-v1",
    "learning_starts": 100,
    "timesteps_per_iteration": 150,
    "buffer_size": 1000,
    "train_batch_size": 16,
    "target_network_update_freq": 100,
    "epsilon_timesteps": 1000,
    "model": {"hiddens": [16]},
    "checkpoint_replay_buffer": True,
    "seed": 3,
}
TRAINERS = {"PPO": (PPOTrainer, PPO_CONFIG), "DQN": (DQNTrainer, DQN_CONFIG)}

RESUME_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import torch
    from hierl.algorithms.trainer import Trainer

    torch.set_num_threads(1)
    trainer = Trainer.from_checkpoint(sys.argv[1])  # config read from the checkpoint
    for _ in range(int(sys.argv[2])):
        trainer.train()
    np.savez(sys.argv[3], **trainer.get_weights()["default_policy"])
    print("timesteps", trainer.optimizer.num_steps_sampled, trainer.iteration)
    """
)


def _weights(trainer) -> dict[str, np.ndarray]:
    return trainer.get_weights()["default_policy"]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("algo", ["PPO", "DQN"])
def test_exact_resume_in_a_fresh_process(algo, tmp_path):
    """train N; save; restore in a fresh process; train M  ==  train N+M (bit for bit)."""
    cls, config = TRAINERS[algo]
    n, m = 2, 2
    with cls(config) as straight:
        for _ in range(n + m):
            straight.train()
        expected = _weights(straight)
        expected_steps = straight.optimizer.num_steps_sampled
    with cls(config) as first:
        for _ in range(n):
            first.train()
        ckpt = first.save(tmp_path / "ckpt")
        at_save = _weights(first)
    out = tmp_path / "resumed.npz"
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", RESUME_SCRIPT, str(ckpt), str(m), str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"timesteps {expected_steps} {n + m}" in proc.stdout
    with np.load(out, allow_pickle=False) as npz:
        resumed = {k: npz[k] for k in npz.files}
    assert sorted(resumed) == sorted(expected)
    for k, v in expected.items():
        assert not np.array_equal(v, at_save[k]) or k.endswith("bias")  # it did train on
        np.testing.assert_array_equal(resumed[k], v, err_msg=f"{algo} weight {k}")


def test_checkpoint_is_complete_and_pickle_free(tmp_path):
    with DQNTrainer(DQN_CONFIG) as trainer:
        trainer.train()
        trainer.train()
        path = trainer.save(tmp_path / "c")
        meta, state = load_checkpoint(path)
    assert meta["format_version"] == 1 and meta["algorithm"] == "DQN"
    assert meta["config"]["optimizer_config"]["checkpoint_replay_buffer"] is True
    policy = state["evaluator"]["policies"]["default_policy"]
    assert set(policy) >= {"weights", "optimizer", "target_weights", "epsilon"}
    assert policy["optimizer"]["state"], "Adam moments are saved"
    assert set(state["rng"]) == {"python", "numpy", "torch"}
    sampler = state["evaluator"]["sampler"]
    assert sampler["exact"] is True and sampler["obs"].shape == (1, 4)
    buffer = state["optimizer"]["buffer"]
    stored = state["optimizer"]["num_steps_sampled"]
    assert stored >= 300 and buffer["num_added"] == stored
    assert len(buffer["columns"]["obs"]) == stored and len(buffer["priorities"]) == stored
    assert state["counters"]["iteration"] == 2
    # arrays load without pickle; the rest is plain JSON
    with np.load(path / ARRAYS_FILE, allow_pickle=False) as npz:
        assert all(npz[k].dtype != object for k in npz.files)
    json.loads((path / META_FILE).read_text())


def test_replay_buffer_contents_only_with_the_flag(tmp_path):
    with DQNTrainer({**DQN_CONFIG, "checkpoint_replay_buffer": False}) as trainer:
        trainer.train()
        _, state = load_checkpoint(trainer.save(tmp_path / "c"))
    assert "buffer" not in state["optimizer"]
    with pytest.raises(ConfigError, match=r"checkpoint_replay_buffer.*'replay' optimizer"):
        from hierl.optimizers.apex.sharded_replay import ShardedReplayConfig

        ShardedReplayConfig(checkpoint_replay_buffer=True)


def test_shape_mismatch_names_policy_parameter_and_shapes(tmp_path):
    small = {**PPO_CONFIG, "model": {"hiddens": [8]}}
    with PPOTrainer(small) as trainer:
        path = trainer.save(tmp_path / "small")
    with PPOTrainer({**PPO_CONFIG, "model": {"hiddens": [16]}}) as other:
        before = _weights(other)
        with pytest.raises(CheckpointError) as info:
            other.restore(path)
        message = str(info.value)
        assert str(path) in message and "default_policy" in message
        assert "has shape (8, 4)" in message and "(16, 4)" in message
        for k, v in _weights(other).items():
            np.testing.assert_array_equal(v, before[k])


def test_restore_of_another_algorithm_is_an_error(tmp_path):
    with PPOTrainer(PPO_CONFIG) as trainer:
        path = trainer.save(tmp_path / "ppo")
    with DQNTrainer(DQN_CONFIG) as dqn, pytest.raises(CheckpointError, match="'PPO', not 'DQN'"):
        dqn.restore(path)


def test_failed_save_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    with PPOTrainer(PPO_CONFIG) as trainer:
        path = trainer.save(tmp_path / "c")
        old = _weights(trainer)
        trainer.train()

        def partial_savez(file, **arrays):
            file.write(b"PK\x03\x04 partial")  # a few bytes of a zip, then the "disk" fails
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(np, "savez", partial_savez)
        with pytest.raises(OSError, match="No space"):
            trainer.save(path)
        monkeypatch.undo()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["c"], "no temp dir left behind"
        trainer.restore(path)
        for k, v in _weights(trainer).items():
            np.testing.assert_array_equal(v, old[k])


@pytest.mark.parametrize(
    "damage, file",
    [
        (
            lambda p: (p / ARRAYS_FILE).write_bytes((p / ARRAYS_FILE).read_bytes()[:100]),
            ARRAYS_FILE,
        ),
        (lambda p: (p / META_FILE).write_text((p / META_FILE).read_text()[:50]), META_FILE),
        (lambda p: (p / ARRAYS_FILE).unlink(), ARRAYS_FILE),
        (lambda p: (p / META_FILE).write_text('{"format_version": 99, "state": {}}'), META_FILE),
    ],
    ids=["truncated-arrays", "truncated-json", "missing-arrays", "future-version"],
)
def test_corrupt_checkpoint_is_a_clear_error_naming_the_file(damage, file, tmp_path):
    with PPOTrainer(PPO_CONFIG) as trainer:
        path = trainer.save(tmp_path / "c")
        damage(path)
        with pytest.raises(CheckpointError) as info:
            trainer.restore(path)
    assert str(path / file) in str(info.value)


def test_arrays_swapped_for_other_shapes_is_a_checkpoint_error(tmp_path):
    with PPOTrainer(PPO_CONFIG) as trainer:
        path = trainer.save(tmp_path / "c")
        with np.load(path / ARRAYS_FILE) as npz:
            arrays = {k: np.zeros(3) for k in npz.files}
        with zipfile.ZipFile(path / ARRAYS_FILE, "w"):
            pass
        np.savez(path / ARRAYS_FILE, **arrays)
        with pytest.raises(CheckpointError, match=str(path)):
            trainer.restore(path)


def test_rng_state_roundtrip():
    import random

    state = env_state.get_rng_state()
    draws = (random.random(), np.random.rand(), torch.rand(1).item())
    env_state.set_rng_state(json.loads(json.dumps(state, default=lambda a: a.tolist())))
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == draws


def test_env_snapshot_continues_an_episode_exactly():
    env, twin = gym.make("CartPole-v1"), gym.make("CartPole-v1")
    env.reset(seed=1)
    twin.reset(seed=99)
    for a in (0, 1, 1, 0):
        env.step(a)
    env_state.restore_env(twin, env_state.snapshot_env(env))
    for a in (1, 0, 0, 1, 1, 1):
        np.testing.assert_array_equal(env.step(a)[0], twin.step(a)[0])
    np.testing.assert_array_equal(env.reset()[0], twin.reset()[0])  # the env RNG too


class _Opaque:
    pass


class _OpaqueEnv(gym.Env):
    """An env whose state lives in an object hierl cannot snapshot."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config=None):
        self.engine = _Opaque()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        return np.zeros(2, np.float32), 1.0, False, False, {}


def test_unsnapshotable_env_restores_with_a_warning(tmp_path):
    config = {**PPO_CONFIG, "env": _OpaqueEnv, "observation_filter": "NoFilter"}
    with PPOTrainer(config) as trainer:
        trainer.train()
        _, state = load_checkpoint(trainer.save(tmp_path / "c"))
        assert state["evaluator"]["sampler"] == {
            "exact": False,
            "reason": "_OpaqueEnv.engine has type _Opaque",
        }
        with pytest.warns(UserWarning, match="resuming is not exact"):
            trainer.restore(tmp_path / "c")


# -- hostile files: compression bombs, deep JSON ------------------------------------------
BOMB_FLOATS = 25_000_000
"""100 MB of float32 zeros: about 100 KB deflated."""


def _npy_header(shape: tuple[int, ...], dtype: str = "<f4") -> bytes:
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": dtype, "fortran_order": False, "shape": shape}
    )
    return buf.getvalue()


def _add_entry(npz: Path, name: str, shape: tuple[int, ...], nbytes: int, compress: int) -> None:
    """Append ``name`` to ``npz``: a .npy header claiming ``shape`` and ``nbytes`` zeros."""
    with (
        zipfile.ZipFile(npz, "a", compression=compress) as zf,
        zf.open(name, "w", force_zip64=True) as f,
    ):
        f.write(_npy_header(shape))
        chunk = bytes(1 << 20)
        for start in range(0, nbytes, len(chunk)):
            f.write(chunk[: min(len(chunk), nbytes - start)])


def _peak_bytes(load) -> int:
    import tracemalloc

    tracemalloc.start()
    try:
        load()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _small_checkpoint(path: Path) -> Path:
    from hierl.checkpoint import save_checkpoint

    return save_checkpoint(path, {"algorithm": "X"}, {"w": np.arange(6, dtype=np.float32)})


def test_unreferenced_arrays_are_never_read(tmp_path):
    path = _small_checkpoint(tmp_path / "c")
    _add_entry(
        path / ARRAYS_FILE, "bomb.npy", (BOMB_FLOATS,), 4 * BOMB_FLOATS, zipfile.ZIP_DEFLATED
    )
    assert (path / ARRAYS_FILE).stat().st_size < 1_000_000
    state = {}
    peak = _peak_bytes(lambda: state.update(load_checkpoint(path)[1]))
    np.testing.assert_array_equal(state["w"], np.arange(6, dtype=np.float32))
    assert peak < 10_000_000, f"loading took {peak} bytes"


def _refer_to(path: Path, key: str, ref: dict) -> None:
    doc = json.loads((path / META_FILE).read_text())
    doc["state"][key] = ref
    (path / META_FILE).write_text(json.dumps(doc))


@pytest.mark.parametrize(
    "ref, compress, match",
    [
        # the manifest agrees with the header, but the entry is compressed
        ({"shape": [BOMB_FLOATS], "dtype": "<f4"}, zipfile.ZIP_DEFLATED, "compressed"),
        # the header claims more than the manifest says
        ({"shape": [4], "dtype": "<f4"}, zipfile.ZIP_STORED, r"manifest says \(4,\)"),
        # an older reference (no manifest): the header claims more than is stored
        ({}, zipfile.ZIP_STORED, "claims 100000000 bytes"),
    ],
    ids=["compressed", "header-over-manifest", "header-over-stored"],
)
def test_a_referenced_array_larger_than_stored_or_declared_is_refused(
    ref, compress, match, tmp_path
):
    path = _small_checkpoint(tmp_path / "c")
    stored = 4 * BOMB_FLOATS if compress == zipfile.ZIP_DEFLATED else 4096
    _add_entry(path / ARRAYS_FILE, "bomb.npy", (BOMB_FLOATS,), stored, compress)
    _refer_to(path, "bomb", {"__array__": "bomb", **ref})
    errors = []

    def load():
        try:
            load_checkpoint(path)
        except CheckpointError as e:
            errors.append(str(e))

    assert _peak_bytes(load) < 10_000_000
    assert len(errors) == 1 and str(path / ARRAYS_FILE) in errors[0]
    assert re.search(match, errors[0]), errors[0]


def test_several_referenced_arrays_within_the_file_load(tmp_path):
    """The bounds refuse nothing the file really stores."""
    path = _small_checkpoint(tmp_path / "c")
    for i in range(3):
        _add_entry(path / ARRAYS_FILE, f"big{i}.npy", (100_000,), 400_000, zipfile.ZIP_STORED)
        _refer_to(path, f"big{i}", {"__array__": f"big{i}", "shape": [100_000], "dtype": "<f4"})
    state = load_checkpoint(path)[1]  # what the file really stores loads
    assert state["big2"].shape == (100_000,)


@pytest.mark.parametrize("depth", [150, 100_000])
def test_deeply_nested_checkpoint_json_is_one_clear_error(depth, tmp_path, capsys):
    from hierl.cli import main

    path = _small_checkpoint(tmp_path / "c")
    deep = "[" * depth + "]" * depth
    (path / META_FILE).write_text(
        f'{{"format_version": 1, "kind": "hierl-trainer", "state": {deep}}}'
    )
    with pytest.raises(CheckpointError, match="nests deeper than 100 levels"):
        load_checkpoint(path)
    assert main(["export", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("hierl: error: ") and "nests deeper" in err


def test_arrays_of_any_plain_dtype_round_trip_through_the_manifest(tmp_path):
    from hierl.checkpoint import save_checkpoint

    state = {
        "structured": np.zeros(2, dtype=[("a", "<f4"), ("b", "<i8")]),
        "big_endian": np.arange(3, dtype=">i2"),
        "strings": np.array(["x", "yz"]),
        "empty": [np.ones((2, 0)), np.bool_(True)],
    }
    path = save_checkpoint(tmp_path / "c", {}, state)
    loaded = load_checkpoint(path)[1]
    for key in ("structured", "big_endian", "strings"):
        assert loaded[key].dtype == state[key].dtype
        np.testing.assert_array_equal(loaded[key], state[key])
    assert loaded["empty"][0].shape == (2, 0) and loaded["empty"][1] is True
