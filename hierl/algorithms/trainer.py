"""Trainer: config + evaluators + a named optimizer + ``train()``.

Each ``train()`` is one short logical iteration under central control, returning a flat
result dict, so a trainer nests anywhere: as a Ray actor in another algorithm, a step
of a self-play loop, or a Ray Tune trial.  A new algorithm is a PolicyGraph plus a
Trainer subclass naming its config class, policy class and the optimizers it supports::

    class MyTrainer(Trainer):
        name = "MY_ALGO"
        config_class = TrainerConfig
        policy_class = MyPolicy
"""

from __future__ import annotations

import collections
import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import numpy as np

from hierl.algorithms import multi_agent
from hierl.algorithms.evaluation import Evaluation
from hierl.algorithms.off_policy_estimation import check_estimators, estimate_all
from hierl.algorithms.resources import evaluator_groups, optimizer_groups
from hierl.algorithms.serving import ServeDeployment, maybe_push
from hierl.algorithms.trainer_base import BaseConfig, BaseTrainer
from hierl.checkpoint import CheckpointError
from hierl.config import ConfigError, from_dict, suggest_key, translate_rllib_keys
from hierl.evaluators import EvaluatorSet, EvaluatorSpec, atari, env_state
from hierl.evaluators.callbacks import make_callbacks, resolve_callbacks
from hierl.evaluators.evaluator_set import DEFAULT_MAX_EVALUATOR_RESTARTS
from hierl.evaluators.external.settings import EXTERNAL, ExternalInputConfig
from hierl.evaluators.offline.reader import iter_episodes, list_files
from hierl.evaluators.offline.settings import SAMPLER, InputSpec, OutputSpec, path_strings
from hierl.evaluators.offline.writer import DEFAULT_MAX_FILE_SIZE
from hierl.evaluators.policy_map import PolicySpec
from hierl.evaluators.ray_runtime import ActorGroup
from hierl.evaluators.wire import space_to_json
from hierl.export import ExportedPolicy, export_policy
from hierl.models.networks import ModelConfig
from hierl.optimizers import (
    OptimizerConfig,
    PolicyOptimizer,
    get_optimizer_class,
    optimizer_names,
    optimizer_settings,
)
from hierl.policy_graph import NONFINITE_GRADS_SKIPPED, LearnerStats, PolicyGraph, Weights
from hierl.sample_batch import DEFAULT_POLICY_ID, SampleBatch
from hierl.utils import seed_everything

MULTI_AGENT = (
    "supports_multi_agent",
    "multi-agent training (config field 'policies' or a MultiAgentEnv)",
)
RECURRENT = ("supports_recurrent", "recurrent models (model.use_lstm=True)")
"""Optimizer capabilities a config may need: (PolicyOptimizer class flag, description)."""
TC = TypeVar("TC", bound="TrainerConfig")

ACTING_OVERRIDES: dict[str, Any] = {
    "num_evaluators": 0,
    "evaluation_interval": 0,
    "input": SAMPLER,
    "input_mix": {},
    "output": None,
    "off_policy_estimation": (),
    "serve_deployment": None,
}
"""Config overrides that rebuild a checkpoint's trainer only to act with its policies
(``hierl rollout``, ``export``, ``serve``): no remote or evaluation evaluators, the env
as input (a training run's external server or data files stay closed) and no logged
output."""


def same_defaults(names: tuple[str, ...], **settings: Any) -> dict[str, dict[str, Any]]:
    """``optimizer_defaults`` giving each optimizer in ``names`` the same ``settings``
    (e.g. an algorithm's batch size under every strategy it runs on)."""
    return {name: dict(settings) for name in names}


@dataclasses.dataclass
class TrainerConfig(BaseConfig):
    """Settings shared by every algorithm.  Algorithm configs subclass this.

    An algorithm names the optimizers it supports and states, per optimizer, the
    settings it changes (``optimizer_defaults``); the optimizer's settings themselves are
    declared only in its config class (``optimizer_config``).  Flat keys such as
    ``train_batch_size`` are aliases of ``optimizer_config.<key>`` (``resolve_aliases``).
    """

    supported_optimizers: ClassVar[tuple[str, ...] | None] = None
    """The optimizer names this algorithm runs on.  None (the default): every registered
    strategy, the policy's capabilities deciding (``Trainer`` refuses at construction a
    strategy that cannot train its policy class, naming what is missing); an algorithm
    narrows it to the strategies its loss is written for.  Read it through
    ``optimizer_choices()``."""
    default_optimizer: ClassVar[str] = "local"
    """The optimizer used when ``optimizer`` is empty."""
    optimizer_defaults: ClassVar[Mapping[str, Mapping[str, Any]]] = {}
    """Optimizer name -> the settings of its config this algorithm changes."""

    num_evaluators: int = 0
    """Remote evaluator actors; 0 samples in the driver process (no Ray needed)."""
    num_envs_per_evaluator: int = 1
    """Sub-envs stepped together by each evaluator (one batched forward per step)."""
    num_cpus_per_evaluator: float = 1.0
    """CPUs reserved by each remote evaluator actor (fractions allowed)."""
    num_gpus_per_evaluator: float = 0.0
    """GPUs reserved by each remote evaluator actor."""
    rollout_fragment_length: int = 0
    """Steps per sub-env per sample() call; 0 = the optimizer's ``train_batch_size``
    split over all envs (for ``replay`` and ``apex`` that is the replayed batch, so
    algorithms built on them set this explicitly: DQN 4, DDPG 1)."""
    sample_async: bool = False
    """Evaluators sample in a background thread, queueing one batch ahead (A3C-style)."""
    batch_mode: Literal["truncate_episodes", "complete_episodes"] = "truncate_episodes"
    """Cut episodes at fragment ends (bootstrapping) or return whole episodes only."""
    timesteps_per_iteration: int = 0
    """Each ``train()`` repeats optimizer steps until this many env steps were sampled
    (0: one step), so that an iteration of a one-step-per-update algorithm (DQN, DDPG)
    is not a single env step."""
    gamma: float = 0.99
    """Discount factor."""
    lr: float = 5e-4
    """Learning rate (Adam)."""
    lr_schedule: tuple[tuple[float, float], ...] | None = None
    """Piecewise-linear ``[[timestep, lr], ...]`` overriding ``lr`` when set."""
    grad_clip: float | None = None
    """Clip the global gradient norm to this value (None: no clipping)."""
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    """Network settings (hiddens, activation, vf_share_layers, conv_filters...)."""
    optimizer: str = ""
    """Policy optimizer by name (one of ``optimizer_choices()``); empty: the algorithm's
    ``default_optimizer``."""
    optimizer_config: dict | OptimizerConfig = dataclasses.field(default_factory=dict)
    """Settings of the chosen optimizer (its config class: e.g. ``{"num_towers": 2}`` for
    ``multi_gpu``), over the algorithm's ``optimizer_defaults`` for it; a dict becomes
    that typed config when the config is built."""
    observation_filter: Literal["NoFilter", "MeanStdFilter"] = "NoFilter"
    """Observation normalisation, synchronised across evaluators every iteration."""
    preprocessor_pref: Literal["deepmind", "none"] = "deepmind"
    """``deepmind``: Atari ids (``ALE/*``, ``*NoFrameskip-v4``) get the DeepMind
    preprocessing (no-op reset, frame skip 4 with max-pooling, 84x84 grayscale, 4 stacked
    frames, episodic life, reward clipping; :mod:`hierl.evaluators.atari`), as in SB3's
    ``AtariWrapper`` and RLlib; ``none``: the env exactly as ``gymnasium.make`` builds it."""
    clip_rewards: float | None = None
    """Clip rewards to ``[-c, c]`` for learning (reported returns stay unclipped); None:
    1.0 for Atari ids under ``preprocessor_pref="deepmind"``, else no clipping; 0: never."""
    compress_observations: bool = False
    """LZ4-compress observations in sample batches sent from evaluators."""
    metrics_smoothing_episodes: int = 100
    """Episode statistics are over the last this-many episodes."""
    callbacks: Any = None
    """An ``hierl.evaluators.EpisodeCallbacks`` subclass, or its name as
    ``"module:Class"`` (what YAML files and checkpoints store): hooks into episodes,
    trajectories, samples and results (:mod:`hierl.evaluators.callbacks`), e.g. custom
    metrics reported as ``custom_metrics/<name>_mean``."""
    policies: dict = dataclasses.field(default_factory=dict)
    """Multi-agent: policy id → ``PolicySpec`` (policy class, None = this algorithm's;
    spaces, None = from the env's agents mapped to it; config overrides) or a dict of
    its fields.  Empty: single-agent (or one policy for every agent of a MultiAgentEnv)."""
    policy_mapping_fn: Callable[[Any], str] | None = None
    """Multi-agent: ``fn(agent_id) -> policy_id``; may be omitted with one policy."""
    policies_to_train: tuple[str, ...] | None = None
    """Multi-agent: the policy ids to update (None: all); the others act but stay frozen."""
    recreate_failed_evaluators: bool = True
    """A remote evaluator that fails (process or node lost, env raised) is recreated with
    the same worker index and given the current weights, filters and counters before it
    samples again; False: it is dropped and training goes on with the others."""
    max_evaluator_restarts: int = DEFAULT_MAX_EVALUATOR_RESTARTS
    """Recreations allowed in all (default 100); the next failure ends training with an
    error naming the evaluator, the count and the last error.  A recreated evaluator that
    fails again before its first env step (an env failing on every reset) ends training
    at once."""
    fail_fast_on_evaluator_failure: bool = False
    """End training at the first evaluator failure, re-raising its original error (with
    the remote traceback) instead of recreating or dropping the evaluator."""
    evaluation_interval: int = 0
    """Evaluate every this many ``train()`` iterations (0: never): the current weights
    play ``evaluation_num_episodes`` whole episodes on separate evaluators
    (:mod:`hierl.algorithms.evaluation`), reported as ``evaluation/episode_reward_mean``
    etc."""
    evaluation_num_episodes: int = 10
    """Episodes per evaluation."""
    evaluation_explore: bool = False
    """Sample actions in evaluation (False: the greedy action)."""
    evaluation_num_evaluators: int = 0
    """Remote evaluation evaluators (``num_cpus_per_evaluator`` each); 0: evaluate in the
    driver."""
    evaluator_scheduling_strategy: Literal["DEFAULT", "SPREAD"] = "DEFAULT"
    """Ray placement of the evaluator actors; ``SPREAD`` puts them on as many nodes as
    possible (a lost node then takes fewer evaluators with it)."""
    input: Any = SAMPLER
    """Where evaluators' ``sample()`` reads experience: ``"sampler"`` (the env), logged
    data written by ``output`` (a directory, a glob, a file or a list of files), or a
    ``ray.data.Dataset``; logged data makes the evaluators OfflineEvaluators
    (:mod:`hierl.evaluators.offline`), each reading its share of the files.
    ``"external"``: apps drive the episodes through ``hierl.serve.PolicyClient`` over
    HTTP (:mod:`hierl.evaluators.external`; ``env`` then only gives the spaces)."""
    input_external: ExternalInputConfig = dataclasses.field(default_factory=ExternalInputConfig)
    """Where the evaluators of ``input: "external"`` listen (``host``, ``port``: the local
    evaluator on ``port`` with no remote evaluators, else remote evaluator ``i`` on
    ``port + i``), ``episode_timeout_s``, ``auth_token``, ``max_episodes``."""
    input_mix: dict = dataclasses.field(default_factory=dict)
    """Several sources drawn by probability per ``sample()``, e.g. ``{"sampler": 0.5,
    "/data/expert": 0.5}`` (instead of ``input``)."""
    input_shuffle_window: int = 10_000
    """Rows of logged data read and shuffled together (0: file order, no shuffling)."""
    input_skip_bad_files: bool = False
    """Skip (with a warning) input files that are corrupt or do not fit the policy
    instead of raising."""
    postprocess_inputs: bool = False
    """Run the policy's ``postprocess_trajectories`` on logged data as it is read (in
    file order, before shuffling); MARWIL needs it for its returns."""
    off_policy_estimation: tuple[str, ...] = ()
    """Estimators (``is``, ``wis``; :mod:`hierl.algorithms.off_policy_estimation`) of the
    current policy's return from the whole logged episodes of ``input``'s files (at most
    ``off_policy_estimation_max_rows`` rows, read once), reported every
    ``evaluation_interval`` iterations (every iteration if 0) as
    ``off_policy_estimation/<name>/v_target`` etc."""
    off_policy_estimation_max_rows: int = 100_000
    """Rows of logged episodes kept for off-policy estimation."""
    output: str | None = None
    """A directory where every evaluator writes each batch it samples (Parquet, see
    :mod:`hierl.evaluators.offline.writer`); None: nothing is written."""
    output_postprocessed: bool = True
    """Write batches after the policy's postprocessing (False: the rows as sampled)."""
    output_max_file_size: int = DEFAULT_MAX_FILE_SIZE
    """An evaluator starts a new output file after this many (uncompressed) bytes."""
    output_compression: Literal["zstd", "snappy", "gzip", "lz4", "none"] = "zstd"
    """Parquet compression of output files."""
    serve_deployment: dict | ServeDeployment | None = None
    """Push the policy to a running ``hierl serve`` app every few iterations (the paper's
    ``suggest_model``), e.g. ``{"app": "hierl", "every": 5}``; the app then answers with the
    new weights and filters (:mod:`hierl.algorithms.serving`).  None: no pushing."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.check("num_evaluators", self.num_evaluators >= 0, "must be >= 0")
        self.check("num_envs_per_evaluator", self.num_envs_per_evaluator >= 1, "must be >= 1")
        self.check("num_cpus_per_evaluator", self.num_cpus_per_evaluator >= 0, "must be >= 0")
        self.check("rollout_fragment_length", self.rollout_fragment_length >= 0, "must be >= 0")
        self.check("timesteps_per_iteration", self.timesteps_per_iteration >= 0, ">= 0")
        self.check("gamma", 0.0 <= self.gamma <= 1.0, "must be in [0, 1]")
        self.check("lr", self.lr > 0, "must be > 0")
        self.check("grad_clip", self.grad_clip is None or self.grad_clip > 0, "must be > 0")
        self.check("clip_rewards", self.clip_rewards is None or self.clip_rewards >= 0, ">= 0")
        self.check("metrics_smoothing_episodes", self.metrics_smoothing_episodes >= 1, ">= 1")
        self.check("max_evaluator_restarts", self.max_evaluator_restarts >= 0, "must be >= 0")
        self.check("evaluation_interval", self.evaluation_interval >= 0, "must be >= 0")
        self.check("evaluation_num_episodes", self.evaluation_num_episodes >= 1, "must be >= 1")
        self.check("evaluation_num_evaluators", self.evaluation_num_evaluators >= 0, "must be >= 0")
        self.check("input_shuffle_window", self.input_shuffle_window >= 0, "must be >= 0")
        self.check("output_max_file_size", self.output_max_file_size > 0, "must be > 0")
        resolve_callbacks(self.callbacks)  # a bad name fails here, naming what is valid
        self.input = path_strings(self.input)
        self.input_mix = {path_strings(k): p for k, p in self.input_mix.items()}
        spec = self.input_spec()  # validates input / input_mix
        check_estimators(self.off_policy_estimation)
        if self.off_policy_estimation and (spec is None or not spec.logged_files()):
            raise ConfigError(
                f"config field 'off_policy_estimation' = {self.off_policy_estimation!r} "
                "estimates from logged episodes: set 'input' (or input_mix) to files of "
                "logged data"
            )
        if isinstance(self.serve_deployment, Mapping):
            self.serve_deployment = from_dict(
                ServeDeployment, self.serve_deployment, prefix="serve_deployment."
            )
        self.policies = {str(pid): PolicySpec.coerce(pid, s) for pid, s in self.policies.items()}
        multi_agent.validate(self)
        self._resolve_optimizer()

    # -- the optimizer's settings ------------------------------------------------------
    def _resolve_optimizer(self) -> None:
        """Fill in the optimizer's name and make ``optimizer_config`` its typed config."""
        name = self.optimizer = self.check_optimizer(self.optimizer)
        opt_class = get_optimizer_class(name)
        if isinstance(self.optimizer_config, OptimizerConfig):
            if type(self.optimizer_config) is not opt_class.config_class:
                raise ConfigError(
                    f"config field 'optimizer_config' is a {type(self.optimizer_config).__name__}"
                    f"; optimizer '{name}' takes a {opt_class.config_class.__name__} or a dict"
                )
        else:
            self.optimizer_config = self.optimizer_config_for(name, self.optimizer_config)
        try:
            opt_class.check_config(self.optimizer_config, self.num_evaluators)
        except ConfigError as e:
            raise ConfigError(f"optimizer_config of '{name}': {e}") from e

    @classmethod
    def optimizer_choices(cls) -> tuple[str, ...]:
        """The optimizer names this config accepts: ``supported_optimizers``, or every
        registered strategy when it is None."""
        if cls.supported_optimizers is None:
            return tuple(optimizer_names())
        return tuple(cls.supported_optimizers)

    @classmethod
    def check_optimizer(cls, name: str) -> str:
        """The optimizer ``name`` stands for (empty: ``default_optimizer``); ConfigError
        for an unknown name ("did you mean") or one this algorithm's
        ``supported_optimizers`` leaves out, saying how to allow it."""
        name = name or cls.default_optimizer
        choices = cls.optimizer_choices()
        if name not in choices:
            get_optimizer_class(name)  # unknown names: "did you mean"
            raise ConfigError(
                f"config field 'optimizer' = '{name}' is not supported by "
                f"{cls.__name__}; valid: {', '.join(choices)} ({cls.__name__}."
                "supported_optimizers narrows the registered strategies to those its "
                f"loss is written for; to run '{name}', subclass {cls.__name__} with "
                "supported_optimizers naming it, or set supported_optimizers = None to "
                "allow every strategy the policy class can run)"
            )
        return name

    @classmethod
    def optimizer_config_for(
        cls, name: str, settings: Mapping[str, Any] | None = None
    ) -> OptimizerConfig:
        """The config of optimizer ``name``: this algorithm's ``optimizer_defaults`` for it
        under ``settings``."""
        opt_class = get_optimizer_class(name)
        try:
            return opt_class.config_class.from_dict(
                {**cls.optimizer_defaults.get(name, {}), **(settings or {})}
            )
        except ConfigError as e:
            raise ConfigError(f"optimizer_config of '{name}': {e}") from e

    @classmethod
    def from_dict(cls: type[TC], data: Mapping[str, Any] | None = None) -> TC:
        """Build the config from a dict, reading flat optimizer keys as aliases
        (``resolve_aliases``); unknown keys raise a "did you mean" ConfigError."""
        return from_dict(cls, cls.resolve_aliases(data or {}))

    @classmethod
    def resolve_aliases(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        """``data`` with every flat optimizer key moved into ``optimizer_config``.

        The one place where settings are linked by name: a top-level key that is no field
        of this config but a field of the chosen optimizer's config (``optimizer``, else
        ``default_optimizer``) is an alias of ``optimizer_config.<key>``, so the flat
        files users bring from RLlib keep working (``{"train_batch_size": 4000,
        "num_sgd_iter": 30}`` for ``local``).  Giving a key both ways with different
        values is an error; a key that is neither raises with "did you mean".
        """
        if not isinstance(data, Mapping):
            return data  # from_dict names the wrong type
        own = {f.name for f in dataclasses.fields(cls) if f.init}
        flat = [k for k in data if k not in own]
        if not flat:
            return dict(data)
        name = data.get("optimizer") or ""
        nested = data.get("optimizer_config") or {}
        if isinstance(nested, OptimizerConfig):
            nested = nested.to_dict()
        if not isinstance(name, str) or not isinstance(nested, Mapping):
            return dict(data)  # from_dict / __post_init__ name the wrong type
        name = cls.check_optimizer(name)
        opt_fields = optimizer_settings(name)
        data = translate_rllib_keys(data, own | opt_fields)
        flat = [k for k in data if k not in own]
        out = {k: v for k, v in data.items() if k in own}
        nested = dict(nested)
        for key in flat:
            if key not in opt_fields:
                raise ConfigError(cls._unknown_key_message(str(key), name, own, opt_fields))
            if key in nested and nested[key] != data[key]:
                raise ConfigError(
                    f"config key '{key}' = {data[key]!r} and optimizer_config.{key} = "
                    f"{nested[key]!r} disagree ('{key}' is an alias of optimizer_config.{key})"
                    "; give it once"
                )
            nested[key] = data[key]
        out["optimizer_config"] = nested
        return out

    @classmethod
    def _unknown_key_message(
        cls, key: str, optimizer: str, own: set[str], opt_fields: frozenset[str]
    ) -> str:
        owners = [
            n for n in cls.optimizer_choices() if n != optimizer and key in optimizer_settings(n)
        ]
        hint = (
            f"; it is a setting of optimizer {', '.join(repr(n) for n in owners)}, not of "
            f"'{optimizer}'"
            if owners
            else ""
        )
        return (
            f"unknown config key '{key}' for {cls.__name__}"
            f"{suggest_key(key, own | opt_fields)}{hint}; valid keys: "
            f"{', '.join(sorted(own))}, and the settings of optimizer '{optimizer}' "
            f"(aliases of optimizer_config.<key>): {', '.join(sorted(opt_fields))}"
        )

    def replace(self: TC, **changes: Any) -> TC:
        """A copy with ``changes`` applied (flat optimizer keys as in ``from_dict``); a
        new ``optimizer`` starts from the algorithm's defaults for it."""
        data = self.to_dict()
        if changes.get("optimizer", self.optimizer) != self.optimizer:
            data["optimizer_config"] = {}
        nested = {**data["optimizer_config"], **dict(changes.pop("optimizer_config", {}))}
        own = {f.name for f in dataclasses.fields(self)}
        for key in [k for k in changes if k not in own]:
            nested[key] = changes.pop(key)
        data.update(changes, optimizer_config=nested)
        return type(self).from_dict(data)

    def input_spec(self) -> InputSpec | None:
        """``input`` / ``input_mix`` as an InputSpec (None: the sampler only)."""
        mix = self.input_mix or {}
        if mix and self.input != SAMPLER:
            raise ConfigError(
                f"config fields 'input' = {self.input!r} and 'input_mix' are both set; give "
                "the sources once, in input_mix (e.g. {'sampler': 0.5, DIR: 0.5})"
            )
        if self.input is None:
            raise ConfigError(
                "config field 'input' is None (a checkpoint of a run that read a Ray "
                "dataset stores no dataset): pass input again"
            )
        pairs = list(mix.items()) if mix else [(self.input, 1.0)]
        sources: dict[str, float] = {}
        files: dict[str, tuple[str, ...]] = {}
        datasets: dict[str, Any] = {}
        for source, prob in pairs:
            if not isinstance(prob, (int, float)) or isinstance(prob, bool) or prob < 0:
                raise ConfigError(
                    f"config field 'input_mix' gives source {source!r} the probability "
                    f"{prob!r}; probabilities are numbers >= 0"
                )
            if isinstance(source, str):
                name = source
            elif isinstance(source, (list, tuple)) and all(isinstance(f, str) for f in source):
                name = f"files:{source[0] if source else ''}+{len(source)}"
                files[name] = tuple(source)
            elif type(source).__module__.startswith("ray.data"):
                name = f"dataset:{len(datasets)}"
                datasets[name] = source
            else:
                raise ConfigError(
                    f"config field 'input' = {source!r} is not valid; valid: 'sampler', "
                    "'external', a directory, glob or file of logged data, a list of files, "
                    "or a ray.data.Dataset"
                )
            sources[name] = float(prob)
        if sum(sources.values()) <= 0:
            raise ConfigError(f"config field 'input_mix' = {mix!r} has no positive probability")
        if list(sources) == [SAMPLER]:
            return None
        if EXTERNAL in sources and len(sources) > 1:
            raise ConfigError(
                f"config field 'input_mix' = {mix!r} mixes 'external' with other sources; "
                "external episodes are the only input of their evaluators"
            )
        return InputSpec(
            sources,
            files=files,
            datasets=datasets,
            num_shards=self.num_evaluators,
            shuffle_window=self.input_shuffle_window,
            skip_bad_files=self.input_skip_bad_files,
            postprocess=self.postprocess_inputs,
            external=self.input_external if EXTERNAL in sources else None,
            sample_timeout_s=self.sample_timeout_s,
        )

    def output_spec(self) -> OutputSpec | None:
        """``output`` and its settings as an OutputSpec (None: no output)."""
        if not self.output:
            return None
        return OutputSpec(
            self.output,
            postprocessed=self.output_postprocessed,
            max_file_size=self.output_max_file_size,
            compression=self.output_compression,
        )

    def fragment_for(self, batch_size: int) -> int:
        """``rollout_fragment_length``, or when it is 0, ``batch_size`` split over all
        sub-envs (each sample() call then gathers about ``batch_size`` rows in all)."""
        if self.rollout_fragment_length:
            return self.rollout_fragment_length
        envs = max(1, self.num_evaluators) * self.num_envs_per_evaluator
        return max(1, math.ceil(batch_size / envs))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict; callables (env, callbacks) are recorded by name only."""
        out = super().to_dict()
        if self.callbacks is not None and not isinstance(self.callbacks, str):
            # Code is never stored in (or loaded from) checkpoints: pass the class again,
            # or name it as "module:Class" (stored as that string).
            out["callbacks"] = None
        if not isinstance(self.input, (str, list, tuple)):
            out["input"] = None  # a Ray dataset: pass it again when restoring
        if any(not isinstance(k, str) for k in self.input_mix):
            out["input_mix"] = {}  # holds a Ray dataset: pass it again
        out.update(multi_agent.to_json(self))
        return out


def _use_driver_cpus(num_cpus: float) -> None:
    """Give torch as many intra-op threads as CPUs the trainer reserves for itself.

    The driver's CPUs are part of the trainer's resource request (e.g. its Tune bundle);
    more threads than that oversubscribe the machine, and for small networks even two
    threads are slower than one.
    """
    import torch

    threads = max(1, int(num_cpus))
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def _mean_stats(stats: list[LearnerStats]) -> LearnerStats:
    """Per policy and stat, the mean over the optimizer steps of an iteration that
    reported it; the refused updates (``NONFINITE_GRADS_SKIPPED``) are summed."""
    out: LearnerStats = {}
    for pid in dict.fromkeys(p for s in stats for p in s):
        reported = [s[pid] for s in stats if pid in s]
        out[pid] = {}
        for key in dict.fromkeys(k for s in reported for k in s):
            values = [s[key] for s in reported if key in s]
            numeric = all(isinstance(v, (int, float, np.number)) for v in values)
            if key == NONFINITE_GRADS_SKIPPED:
                out[pid][key] = float(np.sum(values))
            else:
                out[pid][key] = float(np.mean(values)) if numeric else values[-1]
    return out


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else math.nan


class Trainer(BaseTrainer):
    """Base class of all algorithms.

    Args:
        config: the algorithm's config dataclass, or a dict validated into it.
        env: shorthand for ``config["env"]``.
    """

    name: ClassVar[str] = ""
    config_class: ClassVar[type[TrainerConfig]] = TrainerConfig
    policy_class: ClassVar[type[PolicyGraph]]

    def __init__(self, config: TrainerConfig | Mapping[str, Any] | None = None, env: Any = None):
        # validates the config (``validate_config``), then fails fast if the cluster can
        # never hold the evaluators and optimizer actors (``check_resources``)
        super().__init__(config, env)
        optimizer_name = self.config.optimizer
        _use_driver_cpus(self.config.num_cpus_for_driver)
        seed_everything(self.config.seed)
        self.evaluators = self._make_evaluators()
        if self.local_evaluator.multi_agent:  # also a MultiAgentEnv without `policies`
            try:
                self._check_optimizer_supports(optimizer_name, MULTI_AGENT)
            except ConfigError:
                self.evaluators.stop()
                raise
        self.optimizer = self._make_optimizer(optimizer_name)
        self.evaluation = self._make_evaluation()
        self.callbacks = make_callbacks(self.config.callbacks)  # on_train_result
        self._ope_episodes = self._load_ope_episodes()
        self.episodes_total = 0
        self._episodes: collections.deque = collections.deque(
            maxlen=self.config.metrics_smoothing_episodes
        )
        self._policy_rewards = multi_agent.PolicyRewards(self.config.metrics_smoothing_episodes)

    # -- construction hooks ------------------------------------------------------------
    @classmethod
    def actor_groups(cls, config: TrainerConfig) -> list[ActorGroup]:
        """The driver, the remote evaluators (training and evaluation) and the actors the
        config's optimizer starts."""
        opt_class = get_optimizer_class(config.optimizer)
        return [
            *super().actor_groups(config),
            *evaluator_groups(config),
            *optimizer_groups(opt_class, config),
        ]

    def validate_config(self, config: TrainerConfig) -> TrainerConfig:
        """The config's optimizer (one the algorithm supports: checked by the config) must
        have the capabilities the config needs and train its policy classes."""
        if config.policies:
            self._check_optimizer_supports(config.optimizer, MULTI_AGENT)
        if config.model.use_lstm:
            self._check_optimizer_supports(config.optimizer, RECURRENT)
        self._check_optimizer_trains_policies(config.optimizer, config)
        return config

    def _check_optimizer_supports(self, name: str, feature: tuple[str, str]) -> None:
        """ConfigError unless optimizer ``name`` has the capability ``(flag, description)``."""
        flag, what = feature
        if getattr(get_optimizer_class(name), flag, False):
            return
        supported = self.config_class.optimizer_choices()
        ok = [n for n in supported if getattr(get_optimizer_class(n), flag, False)]
        raise ConfigError(
            f"config field 'optimizer' = '{name}' does not support {what}; valid for "
            f"{self.name or type(self).__name__}: {', '.join(ok) or 'none'}"
        )

    def rollout_fragment_length(self) -> int:
        """The configured fragment length, or the optimizer's ``train_batch_size`` split
        over all sub-envs."""
        return self.config.fragment_for(self.config.optimizer_config.train_batch_size)

    def _make_evaluators(self) -> EvaluatorSet:
        """The local evaluator and ``num_evaluators`` remote ones, all from one spec."""
        cfg = self.config
        return EvaluatorSet(
            self._evaluator_spec(), num_evaluators=cfg.num_evaluators, **self._set_options()
        )

    def _make_evaluation(self) -> Evaluation | None:
        """The evaluation evaluators (``evaluation_interval`` > 0), else None."""
        cfg = self.config
        if not cfg.evaluation_interval:
            return None
        return Evaluation(
            self._evaluator_spec(),
            num_episodes=cfg.evaluation_num_episodes,
            explore=cfg.evaluation_explore,
            num_evaluators=cfg.evaluation_num_evaluators,
            **self._set_options(),
        )

    def _load_ope_episodes(self) -> list[SampleBatch]:
        """The whole logged episodes off-policy estimation averages over (read once)."""
        cfg = self.config
        if not cfg.off_policy_estimation:
            return []
        episodes, rows = [], 0
        files = list_files(list(cfg.input_spec().logged_files()))
        for ep in iter_episodes(files, skip_bad_files=cfg.input_skip_bad_files):
            if rows + ep.count > cfg.off_policy_estimation_max_rows and episodes:
                break
            episodes.append(ep)
            rows += ep.count
        if not episodes:
            raise ConfigError(
                f"off_policy_estimation: the input {cfg.input!r} holds no whole logged "
                "episode (record with batch_mode 'complete_episodes' or 'hierl rollout "
                "--output')"
            )
        return episodes

    def off_policy_estimates(self) -> dict[str, float]:
        """Each configured estimator's figures for the current policy, flat."""
        cfg = self.config
        estimates = estimate_all(
            cfg.off_policy_estimation,
            self._ope_episodes,
            self.get_policy().compute_log_likelihoods,
            cfg.gamma,
        )
        return {
            f"off_policy_estimation/{name}/{k}": v
            for name, figures in estimates.items()
            for k, v in figures.items()
        }

    def _evaluator_spec(self) -> EvaluatorSpec:
        """The spec every training evaluator is built from."""
        cfg = self.config
        return EvaluatorSpec(
            cfg.env,
            self.policy_class,
            cfg,
            env_config=cfg.env_config,
            num_envs=cfg.num_envs_per_evaluator,
            rollout_fragment_length=self.rollout_fragment_length(),
            batch_mode=cfg.batch_mode,
            observation_filter=cfg.observation_filter,
            preprocessor_pref=cfg.preprocessor_pref,
            clip_rewards=(
                atari.default_clip_rewards(cfg.env, cfg.preprocessor_pref)
                if cfg.clip_rewards is None
                else cfg.clip_rewards
            ),
            seed=cfg.seed,
            compress_observations=cfg.compress_observations,
            callbacks=cfg.callbacks,
            sample_async=cfg.sample_async,
            policies=multi_agent.resolve_policy_specs(cfg, self.policy_class),
            policy_mapping_fn=cfg.policy_mapping_fn,
            policies_to_train=cfg.policies_to_train,
            input=cfg.input_spec(),
            output=cfg.output_spec(),
        )

    def _set_options(self) -> dict[str, Any]:
        """The ``EvaluatorSet`` settings besides the spec and the number of evaluators."""
        cfg = self.config
        return dict(
            num_cpus_per_evaluator=cfg.num_cpus_per_evaluator,
            num_gpus_per_evaluator=cfg.num_gpus_per_evaluator,
            ray_address=cfg.ray_address,
            get_timeout_s=cfg.sample_timeout_s,
            # "DEFAULT" passes nothing: an explicit strategy would escape a Tune
            # trial's placement group.
            actor_options=(
                {"scheduling_strategy": "SPREAD"}
                if cfg.evaluator_scheduling_strategy == "SPREAD"
                else None
            ),
            recreate_failed_evaluators=cfg.recreate_failed_evaluators,
            max_evaluator_restarts=cfg.max_evaluator_restarts,
            fail_fast=cfg.fail_fast_on_evaluator_failure,
        )

    def _make_optimizer(self, name: str) -> PolicyOptimizer:
        """Build the config's optimizer through its ``create`` (the one construction path,
        ``auto`` included); optimizers it builds in turn (``auto``'s candidates) get the
        algorithm's defaults for them under the settings it passes."""

        def factory(other: str, settings: Mapping[str, Any]) -> PolicyOptimizer:
            config = self.config.optimizer_config_for(other, settings)
            return get_optimizer_class(other).create(self.evaluators, config, factory)

        opt_class = get_optimizer_class(name)
        return opt_class.create(self.evaluators, self.config.optimizer_config, factory)

    def _check_optimizer_trains_policies(self, name: str, config: TrainerConfig) -> None:
        """ConfigError unless optimizer ``name`` can train every policy class of ``config``
        (``PolicyOptimizer.missing_policy_capability``), listing the ones that can."""
        classes = [self.policy_class]  # also every agent of a MultiAgentEnv without policies
        if config.policies:
            classes = [
                multi_agent.policy_classes(config, pid)[0] or self.policy_class
                for pid in config.policies
            ]

        def missing(opt: str, policy_class: type, opt_config: Any) -> str | None:
            return get_optimizer_class(opt).missing_policy_capability(policy_class, opt_config)

        for policy_class in dict.fromkeys(classes):
            why = missing(name, policy_class, config.optimizer_config)
            if why is None:
                continue
            ok = []
            for other in self.config_class.optimizer_choices():
                try:
                    if missing(other, policy_class, config.optimizer_config_for(other)) is None:
                        ok.append(other)
                except ConfigError:  # its defaults do not fit this config: not listed
                    pass
            raise ConfigError(
                f"config field 'optimizer' = '{name}' cannot train policy class "
                f"{policy_class.__name__}: {why}; optimizers of "
                f"{self.name or type(self).__name__} that can: {', '.join(ok) or 'none'}"
            )

    def result_extras(self) -> dict[str, Any]:
        """Keys an algorithm adds to every result (before the callbacks and the logs see
        it); none by default."""
        return {}

    def after_optimizer_step(self, learner_stats: LearnerStats) -> None:
        """Hook for per-iteration policy utilities (e.g. PPO's adaptive KL coefficient);
        ``learner_stats`` is what that ``optimizer.step()`` returned (per policy id)."""

    # -- training ----------------------------------------------------------------------
    @property
    def local_evaluator(self):
        """The driver's PolicyEvaluator."""
        return self.evaluators.local_evaluator

    def get_policy(self, policy_id: str | None = None) -> PolicyGraph:
        """The driver's policy graph ``policy_id`` (None: the single-agent default)."""
        if policy_id is None:
            return self.local_evaluator.policy
        policy_map = self.local_evaluator.policy_map
        if policy_id not in policy_map:
            raise ValueError(f"unknown policy id {policy_id!r}; valid: {sorted(policy_map)}")
        return policy_map[policy_id]

    def train(self) -> dict[str, Any]:
        """Run one iteration; return the flat result dict."""
        start = time.perf_counter()
        steps_before = self.optimizer.num_steps_sampled
        step_stats = []
        while True:
            stats = self.optimizer.step()
            self.after_optimizer_step(stats)
            if stats:
                step_stats.append(stats)
            sampled = self.optimizer.num_steps_sampled - steps_before
            if sampled >= self.config.timesteps_per_iteration:
                break
        learner_stats = _mean_stats(step_stats)
        if self.config.observation_filter != "NoFilter":
            self.evaluators.sync_filters()
        episodes = self.optimizer.collect_episodes()
        self._episodes.extend((e.episode_reward, e.episode_length) for e in episodes)
        self.episodes_total += len(episodes)
        self._policy_rewards.add(episodes)
        self.iteration += 1
        elapsed = time.perf_counter() - start
        self.time_total_s += elapsed
        steps = self.optimizer.num_steps_sampled - steps_before
        rewards = [r for r, _ in self._episodes]
        result: dict[str, Any] = {
            "episode_reward_mean": _mean(rewards),
            "episode_reward_min": float(np.min(rewards)) if rewards else math.nan,
            "episode_reward_max": float(np.max(rewards)) if rewards else math.nan,
            "episode_len_mean": _mean([n for _, n in self._episodes]),
            "episodes_this_iter": len(episodes),
            "episodes_total": self.episodes_total,
            "timesteps_this_iter": steps,
            "timesteps_total": self.optimizer.num_steps_sampled,
            "training_iteration": self.iteration,
            "time_this_iter_s": elapsed,
            "time_total_s": self.time_total_s,
            "num_steps_trained": self.optimizer.num_steps_trained,
            "sample_throughput": steps / elapsed if elapsed > 0 else 0.0,
            "num_evaluators": len(self.evaluators.remote_evaluators),
            "num_healthy_evaluators": self.evaluators.num_healthy_evaluators,
            "num_evaluator_restarts": self.evaluators.num_evaluator_restarts,
        }
        for k, v in self.optimizer.stats().items():
            result.setdefault(k, v)
        learn_ms = self.optimizer.timers.get("learn")
        if learn_ms is not None and learn_ms.total_s > 0:
            result["learn_throughput"] = self.optimizer.num_steps_trained / learn_ms.total_s
        custom: dict[str, list[float]] = collections.defaultdict(list)
        for e in episodes:
            for k, v in e.custom_metrics.items():
                custom[k].append(float(v))
        for k, values in custom.items():
            result[f"custom_metrics/{k}_mean"] = float(np.mean(values))
            result[f"custom_metrics/{k}_min"] = float(np.min(values))
            result[f"custom_metrics/{k}_max"] = float(np.max(values))
        result.update(self._policy_rewards.metrics())
        if self.evaluation is not None and self.iteration % self.config.evaluation_interval == 0:
            result.update(self.evaluation.run(self.local_evaluator))
        if self._ope_episodes and self.iteration % max(1, self.config.evaluation_interval) == 0:
            result.update(self.off_policy_estimates())
        # learner/<stat> of the single-agent policy; learner/<policy_id>/<stat> multi-agent
        multi_agent = self.local_evaluator.multi_agent
        for pid, stats in learner_stats.items():
            prefix = f"learner/{pid}/" if multi_agent else "learner/"
            result.update({prefix + k: v for k, v in stats.items()})
        result.update(self.result_extras())
        maybe_push(self, result)  # serve_deployment: new weights to a serving app
        if self.callbacks is not None:
            self.callbacks.on_train_result(trainer=self, result=result)
        self.log_result(result)
        return result

    # -- acting ------------------------------------------------------------------------
    def compute_single_action(
        self, obs: Any, explore: bool = False, policy_id: str = DEFAULT_POLICY_ID
    ) -> Any:
        """The action of policy ``policy_id`` for one raw env observation, in the env's
        action format."""
        return self.local_evaluator.compute_single_action(obs, explore=explore, policy_id=policy_id)

    def compute_single_action_and_state(
        self,
        obs: Any,
        state: list[np.ndarray] | None = None,
        explore: bool = False,
        policy_id: str = DEFAULT_POLICY_ID,
    ) -> tuple[Any, list[np.ndarray]]:
        """``(action, state_out)`` of a (recurrent) policy; pass ``state_out`` to the next
        call and None at an episode's first step."""
        return self.local_evaluator.compute_single_action_and_state(obs, state, explore, policy_id)

    def export_policy(
        self,
        directory: str | Path,
        format: Literal["torchscript", "onnx"] = "torchscript",
        policy_id: str = DEFAULT_POLICY_ID,
    ) -> ExportedPolicy:
        """Write policy ``policy_id`` as a self-contained TorchScript (``policy.pt``) or
        ONNX (``policy.onnx``) model plus ``policy.json``, for serving without hierl.

        The model takes raw env observations (batched) and returns ``(actions,
        action_dist_inputs, vf_preds)``, recurrent ones also their state: the
        preprocessing, the observation filter's current statistics and the greedy action
        are folded in, so its actions equal ``compute_single_action(obs, explore=False)``
        (see :mod:`hierl.export` for the inputs, outputs and how to load it).

        Raises:
            ExportError: an unknown format, a policy that is not a TorchPolicyGraph, an
                observation or action space that cannot be exported, or onnx /
                onnxruntime missing (``pip install 'hierl[export]'``).
            ValueError: an unknown ``policy_id``.
        """
        policy = self.get_policy(policy_id)
        return export_policy(
            policy,
            directory,
            format,
            normalization=self.local_evaluator.filters[policy_id].normalization(),
            metadata={
                "algorithm": self.name,
                "iteration": self.iteration,
                "policy_id": policy_id,
                "observation_space": space_to_json(policy.observation_space),
                "action_space": space_to_json(policy.action_space),
            },
        )

    def get_weights(self) -> dict[str, Weights]:
        """Weights of the driver's policies."""
        return self.local_evaluator.get_weights()

    def set_weights(self, weights: Mapping[str, Weights]) -> None:
        """Load weights into the driver's policies and broadcast them."""
        self.local_evaluator.set_weights(weights)
        self.optimizer.push_local_weights()

    # -- checkpoints -------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """Everything ``restore`` needs, as arrays and JSON scalars.

        ``rng`` holds the driver's Python / numpy / torch generator states; the local
        evaluator's state includes its rollout position (see ``PolicyEvaluator.save``);
        ``inputs`` the remote evaluators' positions in logged data.
        """
        return {
            "rng": env_state.get_rng_state(),
            "evaluator": self.local_evaluator.save(),
            "inputs": self.evaluators.input_states(),
            "optimizer": self.optimizer.save(),
            "counters": {
                "iteration": self.iteration,
                "time_total_s": self.time_total_s,
                "episodes_total": self.episodes_total,
            },
            "episodes": np.asarray(list(self._episodes), dtype=np.float64).reshape(-1, 2),
            "policy_rewards": self._policy_rewards.get_state(),
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Inverse of ``get_state``; broadcasts weights and filters to remote evaluators."""
        try:
            self.local_evaluator.restore(state["evaluator"])
        except ValueError as e:
            raise CheckpointError(f"checkpoint does not fit this {self.name} trainer: {e}") from e
        self.optimizer.restore(state["optimizer"])
        self.evaluators.set_input_states(state.get("inputs", {}))
        counters = state["counters"]
        self.iteration = int(counters["iteration"])
        self.time_total_s = float(counters["time_total_s"])
        self.episodes_total = int(counters["episodes_total"])
        self._episodes.clear()
        self._episodes.extend((float(r), int(n)) for r, n in state["episodes"])
        self._policy_rewards.set_state(state.get("policy_rewards", {}))
        self.optimizer.push_local_weights(self.optimizer.global_vars())
        self.evaluators.push_filters()
        if state.get("rng") is not None:
            env_state.set_rng_state(state["rng"])  # last: nothing above may draw from it

    @classmethod
    def config_from_checkpoint(
        cls, config: dict[str, Any], overrides: dict[str, Any], checkpoint_dir: str | Path
    ) -> dict[str, Any]:
        """The stored config; policy classes and mapping functions must be passed again."""
        multi_agent.pop_code_descriptions(config, overrides, checkpoint_dir)
        return super().config_from_checkpoint(config, overrides, checkpoint_dir)

    def stop(self) -> None:
        """Release the optimizer and all evaluator actors."""
        self.optimizer.stop()
        self.evaluators.stop()
        if self.evaluation is not None:
            self.evaluation.stop()
        super().stop()
