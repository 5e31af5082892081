"""Hypothesis fuzzing of the public entry points: only the documented exceptions escape.

* configs: ``XConfig.from_dict`` with random keys and values → ``ConfigError`` only;
* ``SampleBatch`` construction, concatenation and slicing with random columns and shapes →
  ``ValueError`` / ``TypeError`` only (as documented in ``hierl/sample_batch.py``);
* checkpoint bytes: random or mutated ``checkpoint.json`` / ``arrays.npz`` →
  ``CheckpointError`` only, from ``load_checkpoint`` and from ``Trainer.restore``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hierl.algorithms.a2c import A2CConfig
from hierl.algorithms.ddpg import DDPGConfig
from hierl.algorithms.dqn import DQNConfig
from hierl.algorithms.ppo import PPOConfig, PPOTrainer
from hierl.checkpoint import ARRAYS_FILE, META_FILE, CheckpointError, load_checkpoint
from hierl.config import ConfigError
from hierl.sample_batch import SampleBatch

FUZZ = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=8,
)
CONFIGS = [PPOConfig, DQNConfig, DDPGConfig, A2CConfig]


@FUZZ
@given(cls=st.sampled_from(CONFIGS), data=st.data())
def test_config_from_dict_raises_only_config_error(cls, data):
    names = [f.name for f in dataclasses.fields(cls)]
    keys = st.one_of(st.sampled_from(names), st.text(max_size=10))
    config = data.draw(st.dictionaries(keys, json_values, max_size=4))
    try:
        built = cls.from_dict(config)
    except ConfigError as e:
        assert str(e)  # a message, naming the field
        return
    assert isinstance(built, cls)


@FUZZ
@given(cls=st.sampled_from(CONFIGS), data=st.data())
def test_config_single_field_errors_name_the_field(cls, data):
    field = data.draw(st.sampled_from([f.name for f in dataclasses.fields(cls)]))
    value = data.draw(json_values)
    try:
        cls.from_dict({field: value})
    except ConfigError as e:
        assert field in str(e) or "env" in str(e) or "policies" in str(e), str(e)


dtypes = st.sampled_from([np.float32, np.float64, np.int64, np.uint8, bool])
shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)


@st.composite
def columns(draw):
    out = {}
    for name in draw(st.lists(st.text(min_size=1, max_size=5), max_size=4, unique=True)):
        shape = draw(shapes)
        kind = draw(st.sampled_from(["array", "list", "scalar", "object"]))
        if kind == "array":
            out[name] = np.zeros(shape, dtype=draw(dtypes))
        elif kind == "list":
            out[name] = draw(st.lists(json_scalars, max_size=4))
        elif kind == "scalar":
            out[name] = draw(json_scalars)
        else:
            out[name] = np.array([object(), None], dtype=object)
    return out


@FUZZ
@given(
    first=columns(),
    second=columns(),
    start=st.integers(-5, 5),
    stop=st.integers(-5, 5),
    step=st.sampled_from([None, 1, 2, -1]),
)
def test_sample_batch_raises_only_documented_errors(first, second, start, stop, step):
    try:
        a = SampleBatch(first)
        b = SampleBatch(second)
    except (ValueError, TypeError):
        return
    with contextlib.suppress(ValueError, TypeError):
        a[start:stop:step]
    try:
        joined = SampleBatch.concat_samples([a, b])
        assert joined.count == a.count + b.count
    except (ValueError, TypeError):
        pass
    with contextlib.suppress(ValueError, TypeError):
        list(a.split_by_episode())


@pytest.fixture(scope="module")
def good_checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz_ckpt")
    config = {"env": "CartPole-v1", "train_batch_size": 64, "model": {"hiddens": [4]}}
    with PPOTrainer(config) as trainer:
        trainer.train()
        path = trainer.save(root / "good")
    return path


def _copy(src: Path, dst: Path) -> Path:
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    return dst


def _check_only_checkpoint_error(path: Path, trainer: PPOTrainer) -> None:
    for load in (load_checkpoint, trainer.restore):
        try:
            load(path)
        except CheckpointError as e:
            assert str(path) in str(e), str(e)


@pytest.fixture(scope="module")
def target_trainer():
    config = {"env": "CartPole-v1", "train_batch_size": 64, "model": {"hiddens": [4]}}
    with PPOTrainer(config) as trainer:
        yield trainer


@FUZZ
@given(data=st.data(), which=st.sampled_from([META_FILE, ARRAYS_FILE]))
def test_mutated_checkpoint_bytes_raise_only_checkpoint_error(
    data, which, good_checkpoint, target_trainer, tmp_path
):
    path = _copy(good_checkpoint, tmp_path / "mutated")
    raw = bytearray((path / which).read_bytes())
    action = data.draw(st.sampled_from(["flip", "truncate", "random", "splice"]))
    if action == "flip":
        for pos in data.draw(st.lists(st.integers(0, len(raw) - 1), min_size=1, max_size=8)):
            raw[pos] = data.draw(st.integers(0, 255))
    elif action == "truncate":
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    elif action == "random":
        raw = bytearray(data.draw(st.binary(max_size=200)))
    else:
        pos = data.draw(st.integers(0, len(raw)))
        raw[pos:pos] = data.draw(st.binary(min_size=1, max_size=20))
    (path / which).write_bytes(bytes(raw))
    _check_only_checkpoint_error(path, target_trainer)


def _paths(tree, prefix=()):
    if isinstance(tree, dict):
        yield prefix
        for k, v in tree.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(tree, list):
        yield prefix
        for i, v in enumerate(tree):
            yield from _paths(v, (*prefix, i))
    else:
        yield prefix


@FUZZ
@given(data=st.data())
def test_mutated_checkpoint_json_values_raise_only_checkpoint_error(
    data, good_checkpoint, target_trainer, tmp_path
):
    """Valid JSON with one entry replaced by a random value (or removed)."""
    path = _copy(good_checkpoint, tmp_path / "mutated")
    doc = json.loads((path / META_FILE).read_text())
    where = data.draw(st.sampled_from([p for p in _paths(doc) if p]))
    parent = doc
    for k in where[:-1]:
        parent = parent[k]
    if isinstance(parent, dict) and data.draw(st.booleans()):
        del parent[where[-1]]
    else:
        parent[where[-1]] = data.draw(json_values)
    (path / META_FILE).write_text(json.dumps(doc))
    _check_only_checkpoint_error(path, target_trainer)
