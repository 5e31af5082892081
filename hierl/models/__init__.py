"""Neural network models, observation preprocessing and action distributions.

Everything a policy needs to turn raw Gymnasium observations into action distributions
and value estimates, in three modules; their public names are re-exported here, imported
lazily, so that ``hierl.models.preprocessors`` loads without torch:

* ``hierl.models.preprocessors`` -- numpy only: ``get_preprocessor`` (batched
  observations in Gymnasium's *vectorized* layout to float32 arrays) and
  ``to_env_action`` (sampled actions to what the env accepts); the samplers import it
  directly.
* ``hierl.models.networks`` -- ``ModelConfig`` and the torch modules
  ``MLP``, ``NatureCNN``, ``ActorCritic`` and ``RecurrentActorCritic``
  (picked by ``make_actor_critic`` when ``ModelConfig.use_lstm`` is set).
* ``hierl.models.distributions`` -- ``Categorical``, ``MultiCategorical`` and
  ``DiagGaussian``, selected for an action space by ``get_action_dist``.
* ``hierl.models.registry`` -- custom models by name: ``register_model`` and
  ``ModelConfig.custom_model`` (built by ``make_custom_model``).
"""

from __future__ import annotations

from hierl._lazy import lazy_exports
from hierl.models import preprocessors

_EXPORTS = {
    **dict.fromkeys(
        (
            "ActionDistribution",
            "Categorical",
            "DiagGaussian",
            "MultiCategorical",
            "get_action_dist",
        ),
        "hierl.models.distributions",
    ),
    **dict.fromkeys(
        (
            "ActorCritic",
            "MLP",
            "ModelConfig",
            "NatureCNN",
            "RecurrentActorCritic",
            "get_activation",
            "make_actor_critic",
            "make_custom_model",
        ),
        "hierl.models.networks",
    ),
    **dict.fromkeys(("register_model", "registered_models"), "hierl.models.registry"),
    **dict.fromkeys(preprocessors.__all__, preprocessors.__name__),  # numpy only
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports("hierl.models", globals(), _EXPORTS)
