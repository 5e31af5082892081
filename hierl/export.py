"""Export a torch policy's greedy policy as a self-contained TorchScript or ONNX model.

The exported model maps raw env observations (batched) straight to env actions, with
everything hierl does in between folded in, so that serving it needs neither hierl nor
Ray (torch alone for TorchScript, onnxruntime alone for ONNX):

1. the observation preprocessing of ``hierl.models.preprocessors.get_preprocessor``
   (Box: flattened float32; Discrete / MultiDiscrete: one-hot; MultiBinary: float;
   uint8 images stay uint8 and the model's CNN scales them by 1/255 as in training);
2. the observation filter (a MeanStdFilter's running statistics, frozen at export);
3. the model;
4. greedy action selection (the distribution's ``deterministic_sample``: argmax for
   Discrete / MultiDiscrete, the Gaussian mean for Box; DDPG/TD3: the actor's action,
   SAC: ``tanh`` of the squashed Gaussian's mean, scaled to the bounds) and the mapping
   onto the env's action space of ``hierl.models.preprocessors.to_env_action``
   (``start`` added, Box actions rounded for integer dtypes, clipped to ``[low, high]``,
   in the space's dtype).

So ``model(obs)[0]`` equals ``trainer.compute_single_action(obs, explore=False)`` row by
row.  Inputs and outputs (``B``: the batch dimension, dynamic):

* ``obs``: ``(B, *obs_shape)``; float32 for Box spaces (uint8 for images), int64 for
  Discrete / MultiDiscrete, int8 for MultiBinary.  Out-of-range Discrete values one-hot
  to zeros instead of raising as the preprocessor does.
* recurrent models only: ``state_in_0``, ``state_in_1``, ... ``(B, *state_shape)``
  float32 (an episode starts from ``initial_state`` in ``policy.json``).
* outputs ``actions`` ``(B, *action_shape)`` in the action space's dtype (int64 for
  Discrete), ``action_dist_inputs`` ``(B, D)`` float32 (logits, or Gaussian
  ``[mean, log_std]``, before clipping), ``vf_preds`` ``(B,)`` float32 (the value
  estimate; DQN: ``max_a Q``; DDPG/TD3/SAC: ``min_i Q_i(s, greedy action)``; their
  ``action_dist_inputs`` are the actor's outputs: DDPG/TD3 the pre-tanh action, SAC the
  Gaussian's ``[mean, log_std]``), then for recurrent models ``state_out_0``, ... (the state
  to pass to the next call).

Loading, without hierl:

    policy = torch.jit.load("policy.pt")
    actions, dist_inputs, values = policy(torch.as_tensor(obs_batch))

    session = onnxruntime.InferenceSession("policy.onnx")
    actions, dist_inputs, values = session.run(None, {"obs": obs_batch})

``policy.json`` beside the model says how to call it (see ``write_spec``).  This
module sits beside ``hierl.torch_policy_graph`` and knows nothing of trainers; the
trainer hands it the policy, its filter as ``(mean, scale, clip)`` and the metadata
(``hierl.algorithms.trainer.Trainer.export_policy``).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from hierl.files import atomic_write
from hierl.models.preprocessors import (
    BoxPreprocessor,
    DiscretePreprocessor,
    ImagePreprocessor,
    MultiBinaryPreprocessor,
    MultiDiscretePreprocessor,
    get_preprocessor,
    to_env_action,
)
from hierl.policy_graph import PolicyGraph
from hierl.sample_batch import SampleBatch
from hierl.torch_policy_graph import TorchPolicyGraph
from hierl.utils import array_digest

__all__ = [
    "FORMATS",
    "MODEL_FILES",
    "SPEC_FILE",
    "ExportError",
    "ExportedPolicy",
    "GreedyPolicy",
    "export_policy",
    "weights_digest",
    "write_model",
    "write_spec",
]

FORMATS = ("torchscript", "onnx")
"""The formats ``export_policy`` writes."""
MODEL_FILES = {"torchscript": "policy.pt", "onnx": "policy.onnx"}
"""The model's file name in the export directory, per format."""
SPEC_FILE = "policy.json"
"""The sidecar that says how to call the model (``write_spec``)."""
OBS_INPUT = "obs"
OUTPUTS = (SampleBatch.ACTIONS, SampleBatch.ACTION_DIST_INPUTS, SampleBatch.VF_PREDS)
ONNX_OPSET = 17
TOLERANCE = 1e-4
"""Largest difference between the exported model's float outputs and the torch module's
on the check batch that export accepts (float error of another runtime is ~1e-6)."""
CHECK_ROWS = 7
"""Rows of the random observation batch the written model is checked on (a batch size
other than the one traced with, so a batch dimension frozen by mistake shows)."""
INSTALL_HINT = "pip install 'hierl[export]'"

Normalization = tuple[np.ndarray, np.ndarray, float]
"""An observation filter as ``clip((x - mean) / scale, -clip, clip)`` (float64 arrays):
what ``hierl.evaluators.filters.MeanStdFilter.normalization`` returns."""


class ExportError(ValueError):
    """The policy, its spaces or the format cannot be exported (the message says what
    can), or the written model does not reproduce the policy."""


# -- the exported module ------------------------------------------------------------------
class _ObservationEncoder(nn.Module):
    """The torch twin of the numpy preprocessor of one observation space."""

    def __init__(self, space: gym.Space) -> None:
        super().__init__()
        try:
            preprocessor = get_preprocessor(space)
        except ValueError as e:
            raise ExportError(str(e)) from e
        self.kind = type(preprocessor).__name__
        if isinstance(preprocessor, ImagePreprocessor):
            self.input_dtype, self.input_shape = np.dtype(np.uint8), tuple(space.shape)
        elif isinstance(preprocessor, (BoxPreprocessor, MultiBinaryPreprocessor)):
            dtype = np.float32 if isinstance(preprocessor, BoxPreprocessor) else space.dtype
            self.input_dtype, self.input_shape = np.dtype(dtype), tuple(space.shape)
        elif isinstance(preprocessor, DiscretePreprocessor):
            self.input_dtype, self.input_shape = np.dtype(np.int64), ()
            self.register_buffer("columns", torch.arange(preprocessor.n) + preprocessor.start)
        elif isinstance(preprocessor, MultiDiscretePreprocessor):
            self.input_dtype, self.input_shape = np.dtype(np.int64), tuple(space.shape)
            # one-hot column of component i's value v: offsets[i] + v - start[i]
            self.register_buffer(
                "shift", torch.as_tensor(preprocessor.offsets - preprocessor.start)
            )
            self.register_buffer("columns", torch.arange(preprocessor.shape[0]))
        else:
            raise ExportError(
                f"observation space {space} ({type(space).__name__}) cannot be exported: the "
                "model takes one observation tensor (Box, Discrete, MultiDiscrete or "
                "MultiBinary); flatten Dict and Tuple spaces (gymnasium.wrappers."
                "FlattenObservation)"
            )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``(B, *input_shape)`` observations to what the model takes (float32 rows, or
        the uint8 images as they are)."""
        if self.kind == "ImagePreprocessor":
            return obs
        if self.kind == "DiscretePreprocessor":
            return (obs.reshape(-1, 1) == self.columns).float()
        if self.kind == "MultiDiscretePreprocessor":
            index = obs.reshape(obs.shape[0], -1) + self.shift
            return (index.unsqueeze(-1) == self.columns).float().sum(1)
        return obs.reshape(obs.shape[0], -1).float()


class _ActionMapping(nn.Module):
    """The torch twin of ``hierl.models.preprocessors.to_env_action``."""

    def __init__(self, space: gym.Space) -> None:
        super().__init__()
        if isinstance(space, spaces.Box):
            self.shape = tuple(space.shape)
            self.dtype = np.dtype(space.dtype)
            self.integer = bool(np.issubdtype(self.dtype, np.integer))
            # np.clip of an integer action happens in float, before the cast
            bound_dtype = torch.float64 if self.integer else _torch_dtype(self.dtype)
            self.register_buffer("low", torch.as_tensor(space.low).to(bound_dtype))
            self.register_buffer("high", torch.as_tensor(space.high).to(bound_dtype))
        elif isinstance(space, (spaces.Discrete, spaces.MultiDiscrete)):
            self.shape = () if isinstance(space, spaces.Discrete) else tuple(space.nvec.shape)
            self.dtype, self.integer = np.dtype(np.int64), False
            self.register_buffer("start", torch.as_tensor(space.start, dtype=torch.int64))
        else:
            raise ExportError(
                f"action space {space} ({type(space).__name__}) cannot be exported; "
                "supported: Box, Discrete, MultiDiscrete"
            )
        self.box = isinstance(space, spaces.Box)
        self.torch_dtype = _torch_dtype(self.dtype)

    def forward(self, actions: torch.Tensor) -> torch.Tensor:
        """Greedy actions of the distribution to the env's ``(B, *shape)`` actions."""
        actions = actions.reshape(actions.shape[0], *self.shape)
        if not self.box:
            return actions.long() + self.start
        actions = actions.to(self.low.dtype)
        if self.integer:
            actions = torch.round(actions)  # half to even, as np.rint
        actions = torch.minimum(torch.maximum(actions, self.low), self.high)
        return actions.to(self.torch_dtype)


class GreedyPolicy(nn.Module):
    """A policy's greedy policy as one module: preprocessing, filter, model,
    deterministic action and env-action mapping (see the module docstring).

    The policy is a TorchPolicyGraph, or has ``export_model()``: a new torch module
    mapping preprocessed (and filtered) observation rows to ``(greedy actions,
    action_dist_inputs, vf_preds)``, the actions in env units before the clipping to
    the space (the replay actor-critics: ``ActorCriticPolicy.export_model``).

    ``forward(obs, *state_in) -> (actions, action_dist_inputs, vf_preds, *state_out)``.

    Args:
        policy: The policy graph; its model is copied (to the CPU, in eval mode), so the
            policy keeps training unchanged.  Not a TorchPolicyGraph: its
            ``export_model()`` (feed-forward only).
        normalization: The observation filter as ``(mean, scale, clip)``, or None (no
            filter).

    The greedy action is ``policy.dist_class(dist_inputs).deterministic_sample()``, which
    is what ``compute_actions(explore=False)`` does for every TorchPolicyGraph of hierl
    (DQN's argmax of the Q-values included); ``export_policy`` checks it.

    Raises:
        ExportError: ``policy`` is neither a TorchPolicyGraph nor has ``export_model()``,
            or its spaces cannot be exported.
    """

    def __init__(self, policy: PolicyGraph, normalization: Normalization | None = None) -> None:
        super().__init__()
        model, self.dist_class = _torch_parts(policy)
        self.observation_space = policy.observation_space
        self.encoder = _ObservationEncoder(policy.observation_space)
        self.actions = _ActionMapping(policy.action_space)
        self.model = copy.deepcopy(model).cpu().eval().requires_grad_(False)
        self.initial_state = [np.asarray(s, np.float32) for s in policy.get_initial_state()]
        self.is_recurrent = bool(getattr(policy, "is_recurrent", False))
        self.filtered = normalization is not None
        if normalization is not None:
            mean, scale, clip = normalization
            self.register_buffer("mean", torch.as_tensor(np.asarray(mean, np.float64)))
            self.register_buffer("scale", torch.as_tensor(np.asarray(scale, np.float64)))
            self.clip = float(clip)

    def forward(self, obs: torch.Tensor, *state: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Actions, distribution inputs, values (and the next state) for a batch."""
        x = self.filter(self.encoder(obs))
        if self.dist_class is None:  # an export_model(): its own greedy action
            greedy, dist_inputs, values = self.model(x)
            return (self.actions(greedy), dist_inputs, values)
        if self.is_recurrent:
            dist_inputs, values, state_out = self.model(x.unsqueeze(1), list(state))
            dist_inputs, values = dist_inputs[:, 0], values[:, 0]
        else:
            (dist_inputs, values), state_out = self.model(x), []
        greedy = self.dist_class(dist_inputs).deterministic_sample()
        return (self.actions(greedy), dist_inputs, values, *state_out)

    def filter(self, x: torch.Tensor) -> torch.Tensor:
        """The observation filter (the identity without one)."""
        if not self.filtered:
            return x
        # CRUCIAL: in float64 as the numpy filter computes it, then float32.
        return ((x.double() - self.mean) / self.scale).clamp(-self.clip, self.clip).float()

    # -- how to call it ------------------------------------------------------------------
    def input_specs(self) -> list[dict[str, Any]]:
        """Name, shape (None: the batch dimension) and dtype of every input."""
        specs = [_spec(OBS_INPUT, self.encoder.input_shape, self.encoder.input_dtype)]
        for i, s in enumerate(self.initial_state):
            spec = _spec(f"{SampleBatch.STATE_IN}{i}", s.shape, s.dtype)
            specs.append({**spec, "initial": s.tolist()})
        return specs

    def output_specs(self) -> list[dict[str, Any]]:
        """Name, shape (None: the batch dimension) and dtype of every output."""
        dist_dim = _dist_dim(self)
        specs = [
            _spec(OUTPUTS[0], self.actions.shape, self.actions.dtype),
            _spec(OUTPUTS[1], (dist_dim,), np.dtype(np.float32)),
            _spec(OUTPUTS[2], (), np.dtype(np.float32)),
        ]
        for i, s in enumerate(self.initial_state):
            specs.append(_spec(f"{SampleBatch.STATE_OUT}{i}", s.shape, s.dtype))
        return specs

    def example_inputs(self, rows: int, seed: int) -> tuple[torch.Tensor, ...]:
        """``rows`` observations sampled from the space (and initial states), to trace
        and check with."""
        space = copy.deepcopy(self.observation_space)
        space.seed(seed)
        obs = np.stack([np.asarray(space.sample()) for _ in range(rows)])
        obs = torch.as_tensor(obs.astype(self.encoder.input_dtype))
        states = [torch.as_tensor(np.tile(s, (rows, *(1,) * s.ndim))) for s in self.initial_state]
        return (obs, *states)


def _torch_parts(policy: PolicyGraph) -> tuple[nn.Module, type]:
    """``(model, dist_class)`` of a policy: a TorchPolicyGraph's own, or what another
    policy's ``export_model()`` returns: a module mapping filtered observations to
    ``(dist_inputs, values)`` and the distribution whose ``deterministic_sample`` is the
    policy's greedy action (ES's deterministic MLP), or a module mapping them to
    ``(greedy_action, dist_inputs, values)`` and None (DDPG, TD3, SAC)."""
    if isinstance(policy, TorchPolicyGraph):
        return policy.model, policy.dist_class
    export_model = getattr(policy, "export_model", None)
    if callable(export_model):
        return export_model()
    raise ExportError(
        f"policy {type(policy).__name__} is not a TorchPolicyGraph and has no "
        "export_model(): export turns a torch model into TorchScript / ONNX (PPO, APPO, "
        "IMPALA, PG, A2C, MARWIL, DQN, DDPG, TD3, SAC, ES and custom TorchPolicyGraphs "
        "can be exported)"
    )


def _dist_dim(module: GreedyPolicy) -> int:
    example = module.example_inputs(1, 0)
    with torch.no_grad():
        return int(module(*example)[1].shape[-1])


def _spec(name: str, shape: Sequence[int], dtype: np.dtype) -> dict[str, Any]:
    return {"name": name, "shape": [None, *(int(s) for s in shape)], "dtype": str(np.dtype(dtype))}


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.zeros(0, dtype=dtype)).dtype


# -- writing ------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ExportedPolicy:
    """What ``export_policy`` wrote.

    Attributes:
        model_path: The model file (``policy.pt`` or ``policy.onnx``).
        spec_path: The sidecar ``policy.json``.
        spec: Its content.
    """

    model_path: Path
    spec_path: Path
    spec: dict[str, Any]

    @property
    def paths(self) -> list[Path]:
        """Every file written, the model first."""
        return [self.model_path, self.spec_path]


Runner = Callable[[Sequence[torch.Tensor]], list[np.ndarray]]
"""Runs a written model on a batch of inputs; returns its outputs as arrays."""


def export_policy(
    policy: PolicyGraph,
    directory: str | os.PathLike,
    format: str = "torchscript",
    *,
    normalization: Normalization | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> ExportedPolicy:
    """Write ``policy``'s greedy policy to ``directory`` as TorchScript or ONNX, with
    ``policy.json`` beside it; see the module docstring for inputs and outputs.

    The written model is loaded back and run on random observations of a new batch size;
    its outputs must equal the torch module's within ``TOLERANCE``.

    Args:
        policy: A TorchPolicyGraph (feed-forward or recurrent), or a policy with
            ``export_model()`` (see ``GreedyPolicy``).
        directory: Created if missing; files of an earlier export are replaced.
        format: ``"torchscript"`` (``policy.pt``) or ``"onnx"`` (``policy.onnx``).
        normalization: The observation filter as ``(mean, scale, clip)`` (None: none).
        metadata: JSON values merged into ``policy.json`` (algorithm, iteration, spaces...).

    Raises:
        ExportError: an unknown format, a policy or space that cannot be exported, onnx /
            onnxruntime missing for ``"onnx"`` (the message says what to install), or a
            written model that does not reproduce the policy.
    """
    if format not in FORMATS:
        raise ExportError(f"unknown export format {format!r}; valid: {', '.join(FORMATS)}")
    directory = Path(directory)
    module = GreedyPolicy(policy, normalization)
    _check_greedy(policy, module)
    model_path = write_model(module, directory, format)
    spec = {
        "format": format,
        "file": model_path.name,
        "inputs": module.input_specs(),
        "outputs": module.output_specs(),
        "recurrent": module.is_recurrent,
        "observation_preprocessing": module.encoder.kind,
        "observation_filter": (
            {"type": "MeanStdFilter", "clip": module.clip}
            if module.filtered
            else {"type": "NoFilter"}
        ),
        "weights_sha256": weights_digest(module),
        "torch_version": torch.__version__,
        **({"onnx_opset": ONNX_OPSET} if format == "onnx" else {}),
        **dict(metadata or {}),
    }
    spec_path = directory / SPEC_FILE
    write_spec(spec_path, spec)
    return ExportedPolicy(model_path, spec_path, spec)


def write_model(module: nn.Module, directory: str | os.PathLike, format: str) -> Path:
    """Write ``module`` to ``directory`` as ``MODEL_FILES[format]``, load it back and check
    that it reproduces the module on a new batch size; returns the model's path.

    ``module`` provides ``example_inputs(rows, seed)``, ``input_specs()`` and
    ``output_specs()`` as ``GreedyPolicy`` does (the inputs' and outputs' names).

    Raises:
        ExportError: an unknown format, onnx missing, or a model that does not reproduce.
    """
    if format not in FORMATS:
        raise ExportError(f"unknown export format {format!r}; valid: {', '.join(FORMATS)}")
    write = _write_onnx if format == "onnx" else _write_torchscript
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model_path = directory / MODEL_FILES[format]
    run = write(module, model_path)  # type: ignore[arg-type]
    _check(module, run, model_path)  # type: ignore[arg-type]
    return model_path


def write_spec(path: str | os.PathLike, spec: Mapping[str, Any]) -> None:
    """Write the sidecar atomically: ``format``, ``file``, ``inputs`` / ``outputs``
    (name, ``shape`` with None for the batch dimension, ``dtype``; a state input's
    ``initial`` value), ``recurrent``, the folded-in ``observation_preprocessing`` and
    ``observation_filter``, ``weights_sha256`` (SHA-256 of every tensor the model holds:
    ``weights_digest``), versions, and the caller's metadata (``algorithm``,
    ``iteration``, ``policy_id``, ``observation_space``, ``action_space``)."""
    atomic_write(Path(path), lambda tmp: tmp.write_text(json.dumps(spec, indent=2) + "\n"))


def weights_digest(module: nn.Module) -> str:
    """SHA-256 over a module's ``state_dict`` (names, dtypes, shapes and bytes, by name)."""
    return array_digest({k: t.detach().cpu().numpy() for k, t in module.state_dict().items()})


@contextlib.contextmanager
def _quiet_tracing() -> Iterator[None]:
    """Silence the tracer's deprecation notices and its warnings about Python values
    read from tensors (shape checks that hold for every batch): ``_check`` runs
    the written model on another batch size instead."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        # about LSTM initial states that are not inputs; here they are
        warnings.filterwarnings("ignore", "Exporting a model to ONNX with a batch_size")
        yield


def _write_torchscript(module: GreedyPolicy, path: Path) -> Runner:
    example = module.example_inputs(2, seed=0)
    with torch.no_grad(), _quiet_tracing():
        traced = torch.jit.trace(module, example)
    atomic_write(path, lambda tmp: torch.jit.save(traced, str(tmp)))
    loaded = torch.jit.load(str(path))

    def run(inputs: Sequence[torch.Tensor]) -> list[np.ndarray]:
        with torch.no_grad():
            return [t.numpy() for t in loaded(*inputs)]

    return run


def _write_onnx(module: GreedyPolicy, path: Path) -> Runner:
    try:
        import onnx
        import onnxruntime
    except ImportError as e:
        raise ExportError(
            f"ONNX export needs the onnx and onnxruntime packages ({e}): {INSTALL_HINT}"
        ) from e
    example = module.example_inputs(2, seed=0)
    inputs = [spec["name"] for spec in module.input_specs()]
    outputs = [spec["name"] for spec in module.output_specs()]

    def export(tmp: Path) -> None:
        # the TorchScript-based exporter (dynamo=False): the default needs onnxscript
        with torch.no_grad(), _quiet_tracing():
            torch.onnx.export(
                module,
                example,
                str(tmp),
                input_names=inputs,
                output_names=outputs,
                dynamic_axes={name: {0: "batch"} for name in inputs + outputs},
                opset_version=ONNX_OPSET,
                dynamo=False,
            )
        onnx.checker.check_model(str(tmp))

    atomic_write(path, export)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def run(inputs_: Sequence[torch.Tensor]) -> list[np.ndarray]:
        feeds = {name: t.numpy() for name, t in zip(inputs, inputs_, strict=True)}
        return session.run(None, feeds)

    return run


def _check_greedy(policy: PolicyGraph, module: GreedyPolicy) -> None:
    """ExportError unless the module's actions are ``policy.compute_actions(...,
    explore=False)`` mapped onto the env: a subclass that overrides ``compute_actions``
    with another greedy rule than its ``dist_class``'s ``deterministic_sample`` of the
    model's distribution inputs cannot be exported this way."""
    obs, *state = module.example_inputs(CHECK_ROWS, seed=2)
    with torch.no_grad():
        actions = module(obs, *state)[0].numpy()
        flat = module.filter(module.encoder(obs)).numpy()
    states = [s.numpy() for s in state] or None
    expected = to_env_action(
        policy.action_space, policy.compute_actions(flat, states, explore=False)[0]
    )
    same = (
        np.allclose(actions, expected, rtol=0, atol=TOLERANCE)
        if np.issubdtype(expected.dtype, np.floating)
        else np.array_equal(actions, expected)
    )
    if actions.shape != expected.shape or not same:
        raise ExportError(
            f"{type(policy).__name__}.compute_actions(explore=False) gives other actions "
            f"({expected.tolist()[:4]}...) than the deterministic action of its dist_class on "
            f"its model's outputs ({actions.tolist()[:4]}...), which export folds in: this "
            "policy's greedy rule cannot be exported"
        )


def _check(module: GreedyPolicy, run: Runner, path: Path) -> None:
    """ExportError unless the written model's outputs equal the module's on a new batch."""
    inputs = module.example_inputs(CHECK_ROWS, seed=1)
    with torch.no_grad():
        expected = [t.numpy() for t in module(*inputs)]
    got = run(inputs)
    for spec, want, have in zip(module.output_specs(), expected, got, strict=True):
        name = spec["name"]
        if have.shape != want.shape or have.dtype != want.dtype:
            raise ExportError(
                f"'{path}' gives output '{name}' of shape {have.shape} {have.dtype}; the "
                f"policy gives {want.shape} {want.dtype}"
            )
        if name == OUTPUTS[0] and not np.issubdtype(want.dtype, np.floating):
            continue  # argmax near a tie may differ by float error: the logits decide
        error = float(np.max(np.abs(have.astype(np.float64) - want), initial=0.0))
        if not error <= TOLERANCE:
            raise ExportError(
                f"'{path}' does not reproduce the policy: output '{name}' differs by "
                f"{error:.3g} (> {TOLERANCE}) on {CHECK_ROWS} random observations"
            )
