"""Environment creation: Gymnasium ids, user creators, and vectorisation.

An *env creator* is a callable ``creator(env_config) -> gymnasium.Env | VectorEnv``.
``env_config`` is an ``EnvContext``: the user's dict plus ``worker_index`` and
``vector_index`` so that each copy can be told apart.  A creator that returns a
``gymnasium.vector.VectorEnv`` is used as is (stepped in one call: no per-sub-env
Python loop); plain envs are wrapped into a ``SameStepVectorEnv`` (Gymnasium's
``SyncVectorEnv`` in ``SAME_STEP`` autoreset mode).
"""

from __future__ import annotations

import importlib
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
from gymnasium.vector import SyncVectorEnv, VectorEnv

from hierl.config import ConfigError
from hierl.evaluators import atari
from hierl.evaluators.env_kinds import env_kind
from hierl.evaluators.vector_env import SameStepVectorEnv
from hierl.shared_registry import SharedRegistry

EnvCreator = Callable[[Mapping[str, Any]], "gym.Env | VectorEnv"]

_REGISTRY: SharedRegistry[EnvCreator] = SharedRegistry("envs")
"""Env creators by name; remote evaluators and Tune trials of this job see them too."""

#: Gymnasium ids of the board games of ``hierl.algorithms.alphazero.games``, by string
#: entry point: registering them imports nothing from ``hierl.algorithms``.
BOARD_GAME_ENVS: dict[str, str] = {
    "hierl/TicTacToe-v0": "hierl.algorithms.alphazero.games:TicTacToeEnv",
    "hierl/ConnectFour-v0": "hierl.algorithms.alphazero.games:ConnectFourEnv",
}


def register_board_game_envs() -> None:
    """Register ``hierl/TicTacToe-v0`` and ``hierl/ConnectFour-v0`` (idempotent).

    Called when this module is imported, so any env id resolved through hierl (and any
    ``gymnasium.make`` after ``hierl.evaluators`` is imported) can name them.
    """
    for env_id, entry_point in BOARD_GAME_ENVS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point)


class EnvContext(dict):
    """The user's ``env_config`` dict, plus which evaluator and which vector slot it is for."""

    def __init__(self, env_config: Mapping[str, Any], worker_index: int = 0, vector_index: int = 0):
        super().__init__(env_config)
        self.worker_index = worker_index
        self.vector_index = vector_index


def register_env(name: str, creator: EnvCreator) -> None:
    """Register ``creator`` under ``name`` so configs can refer to it by string, in this
    process and in the Ray workers of this job (remote evaluators, Tune trials)."""
    _REGISTRY.register(name, creator)


def is_registered_env(name: str) -> bool:
    """Whether ``name`` was given to ``register_env`` (here or by this job's driver)."""
    return _REGISTRY.get(name) is not None


def resolve_env_creator(env: str | EnvCreator, preprocessor_pref: str = "deepmind") -> EnvCreator:
    """Turn a registered name, a Gymnasium id or a callable into an env creator.

    Gymnasium ids may name their module as ``gymnasium.make`` accepts
    (``"my_package.envs:MyEnv-v0"`` imports ``my_package.envs`` first); ``ALE/*`` ids
    register ale-py on first use.  Atari ids (``ALE/*``, ``*NoFrameskip-v4``) get the
    DeepMind preprocessing of ``hierl.evaluators.atari`` unless ``preprocessor_pref``
    is ``"none"``.  ConfigError for an unknown id (with similar ids) or a missing extra.
    """
    if callable(env):
        return env
    if not isinstance(env, str):
        raise ValueError(
            f"env must be a Gymnasium id, a registered name or a callable, got {env!r}"
        )
    if preprocessor_pref not in atari.PREPROCESSOR_PREFS:
        raise ConfigError(
            f"preprocessor_pref '{preprocessor_pref}' is invalid; valid: "
            f"{', '.join(atari.PREPROCESSOR_PREFS)}"
        )
    registered = _REGISTRY.get(env)
    if registered is not None:
        return registered
    _import_env_module(env)
    env_id = env.split(":", 1)[1] if ":" in env else env
    if env_id not in gym.registry and atari.is_atari_id(env_id):
        atari.register_ale()
    if env_id not in gym.registry:
        stem = env_id.lower().split("-")[0]
        close = [k for k in gym.registry if k.lower().startswith(stem)][:5]
        hint = f"; similar ids: {', '.join(close)}" if close else ""
        raise ConfigError(
            f"unknown env '{env}': not a registered hierl env nor a Gymnasium id{hint}"
        )
    deepmind = preprocessor_pref == "deepmind" and atari.is_atari_id(env_id)

    def make(env_config: Mapping[str, Any]) -> gym.Env:
        try:
            if deepmind:
                return atari.make_atari(env_id, env_config)
            return gym.make(env_id, **dict(env_config))
        except TypeError as e:
            raise ConfigError(f"env_config {dict(env_config)} is invalid for '{env}': {e}") from e
        except gym.error.DependencyNotInstalled as e:
            raise ConfigError(
                f"env '{env}' needs a package that is not installed: {e}{_extra_hint(env_id)}"
            ) from e

    return make


def _import_env_module(env: str) -> None:
    """Import the module of a ``"module:EnvId"`` id (ConfigError naming it if it fails)."""
    if ":" not in env:
        return
    module = env.split(":", 1)[0]
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise ConfigError(f"env '{env}': cannot import module '{module}': {e}") from e


def _extra_hint(env_id: str) -> str:
    spec = gym.registry.get(env_id)
    entry = str(getattr(spec, "entry_point", ""))
    if "mujoco" in entry:
        return "; install it with: pip install 'hierl[mujoco]'"
    if "ale_py" in entry or atari.is_atari_id(env_id):  # ale-py, or OpenCV for the pipeline
        return f"; install it with: {atari.ATARI_EXTRA} (or preprocessor_pref='none')"
    return ""


def make_vector_env(
    creator: EnvCreator, env_config: Mapping[str, Any], num_envs: int, worker_index: int
) -> VectorEnv:
    """Create ``num_envs`` copies (or the creator's own VectorEnv) for one evaluator."""
    first = creator(EnvContext(env_config, worker_index, 0))
    kind = env_kind(first)
    if kind.vectorized:
        return first
    if not kind.plays_episodes:  # no single gymnasium.Env: copies cannot be stacked
        raise TypeError(f"env creator returned {type(first).__name__}, expected a gymnasium Env")
    envs = [first]

    def factory(i: int) -> Callable[[], gym.Env]:
        return lambda: envs[i] if i == 0 else creator(EnvContext(env_config, worker_index, i))

    return SameStepVectorEnv([factory(i) for i in range(num_envs)])


def env_spaces(creator: EnvCreator, env_config: Mapping[str, Any]) -> tuple[gym.Space, gym.Space]:
    """The single-env observation and action spaces of the env a creator makes."""
    env = creator(EnvContext(env_config, 0, 0))
    try:
        return env_kind(env).spaces(env)
    finally:
        env.close()


class EnvError(RuntimeError):
    """An environment raised (or misbehaved) in ``reset``/``step``.

    The message names the env id, the evaluator's worker index, the sub-env, the call
    and how many vector steps the evaluator had taken, and ends with the env's own
    traceback as text (so it survives being re-raised across Ray processes); the
    original exception is also chained as ``__cause__`` in the process that caught it.

    Attributes:
        env_id: the env's id or creator name.
        worker_index: the evaluator's index (0: the driver's local evaluator).
        sub_env: index of the sub-env that raised (None when unknown).
        method: the env call that raised (``"reset"`` or ``"step"``; "" when unknown).
        env_steps: vector steps the evaluator completed before the error (0: it failed
            before its first step, e.g. in its first ``reset``).
    """

    def __init__(
        self,
        message: str,
        *,
        env_id: str = "",
        worker_index: int | None = None,
        sub_env: int | None = None,
        method: str = "",
        env_steps: int | None = None,
    ):
        super().__init__(message)
        self.env_id = env_id
        self.worker_index = worker_index
        self.sub_env = sub_env
        self.method = method
        self.env_steps = env_steps

    def __reduce__(self) -> tuple[Any, ...]:  # keyword fields survive pickling (Ray)
        fields = {
            "env_id": self.env_id,
            "worker_index": self.worker_index,
            "sub_env": self.sub_env,
            "method": self.method,
            "env_steps": self.env_steps,
        }
        return (_rebuild_env_error, (type(self), str(self), fields))

    @property
    def before_first_step(self) -> bool:
        """Whether the evaluator failed before any env step (every reset may fail)."""
        return self.env_steps == 0

    @classmethod
    def wrap(
        cls,
        error: BaseException,
        *,
        env_id: str,
        worker_index: int,
        method: str,
        env_steps: int,
        sub_env: int | None = None,
    ) -> EnvError:
        """The EnvError for ``error`` raised by the env's ``method``; its sub-env is found
        in the traceback (``SyncVectorEnv``'s loop variable) when not given."""
        if sub_env is None:
            sub_env = _failing_sub_env(error)
        where = f"sub-env {sub_env}" if sub_env is not None else "sub-env unknown"
        when = "before its first step" if env_steps == 0 else f"after {env_steps} vector steps"
        text = "".join(traceback.format_exception(error)).rstrip()
        return cls(
            f"env '{env_id}' raised in {method}() on evaluator {worker_index}: "
            f"{type(error).__name__}: {error}\n(worker_index {worker_index}, {where}, {when})\n"
            f"--- the env's traceback ---\n{text}",
            env_id=env_id,
            worker_index=worker_index,
            sub_env=sub_env,
            method=method,
            env_steps=env_steps,
        )


def _rebuild_env_error(cls: type[EnvError], message: str, fields: dict[str, Any]) -> EnvError:
    return cls(message, **fields)


def _failing_sub_env(error: BaseException) -> int | None:
    """The loop index ``i`` of the innermost ``SyncVectorEnv`` frame in the traceback."""
    found = None
    tb = error.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if isinstance(frame.f_locals.get("self"), SyncVectorEnv):
            i = frame.f_locals.get("i")
            found = i if isinstance(i, int) else found
        tb = tb.tb_next
    return found


register_board_game_envs()  # hierl/TicTacToe-v0, hierl/ConnectFour-v0
