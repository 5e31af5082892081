"""Neural network models, observation preprocessing and action distributions.

Everything a policy needs to turn raw Gymnasium observations into action distributions
and value estimates, in three modules; their public names are re-exported here, imported
lazily, so that ``hierl.models.preprocessors`` loads without torch:

* :mod:`hierl.models.preprocessors` -- numpy only: :func:`get_preprocessor` (batched
  observations in Gymnasium's *vectorized* layout to float32 arrays) and
  :func:`to_env_action` (sampled actions to what the env accepts); the samplers import it
  directly.
* :mod:`hierl.models.networks` -- :class:`ModelConfig` and the torch modules
  :class:`MLP`, :class:`NatureCNN`, :class:`ActorCritic` and :class:`RecurrentActorCritic`
  (picked by :func:`make_actor_critic` when ``ModelConfig.use_lstm`` is set).
* :mod:`hierl.models.distributions` -- :class:`Categorical`, :class:`MultiCategorical` and
  :class:`DiagGaussian`, selected for an action space by :func:`get_action_dist`.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ActionDistribution": "hierl.models.distributions",
    "ActorCritic": "hierl.models.networks",
    "BoxPreprocessor": "hierl.models.preprocessors",
    "Categorical": "hierl.models.distributions",
    "DiagGaussian": "hierl.models.distributions",
    "DictPreprocessor": "hierl.models.preprocessors",
    "DiscretePreprocessor": "hierl.models.preprocessors",
    "ImagePreprocessor": "hierl.models.preprocessors",
    "MLP": "hierl.models.networks",
    "ModelConfig": "hierl.models.networks",
    "MultiBinaryPreprocessor": "hierl.models.preprocessors",
    "MultiCategorical": "hierl.models.distributions",
    "MultiDiscretePreprocessor": "hierl.models.preprocessors",
    "NatureCNN": "hierl.models.networks",
    "Preprocessor": "hierl.models.preprocessors",
    "RecurrentActorCritic": "hierl.models.networks",
    "TuplePreprocessor": "hierl.models.preprocessors",
    "get_action_dist": "hierl.models.distributions",
    "get_activation": "hierl.models.networks",
    "get_preprocessor": "hierl.models.preprocessors",
    "is_image_space": "hierl.models.preprocessors",
    "make_actor_critic": "hierl.models.networks",
    "to_env_action": "hierl.models.preprocessors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hierl.models' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
