"""External environments: apps that own their loop drive episodes over HTTP.

``settings`` (ExternalInputConfig, the trainer's ``input_external``), ``episodes`` (the
rows of client-driven episodes), ``server`` (the HTTP endpoint) and ``evaluator``
(ExternalEvaluator, picked by ``input: "external"``).  The client is
``hierl.serve.client.PolicyClient``.  Names are imported lazily (the offline
settings import ``settings`` while the evaluators package is still loading).
"""

from __future__ import annotations

from hierl._lazy import lazy_exports

_EXPORTS = {
    "EXTERNAL": "hierl.evaluators.external.settings",
    "EpisodeError": "hierl.evaluators.external.episodes",
    "ExternalEvaluator": "hierl.evaluators.external.evaluator",
    "ExternalInputConfig": "hierl.evaluators.external.settings",
    "ExternalInputTimeout": "hierl.evaluators.external.evaluator",
    "ExternalServer": "hierl.evaluators.external.server",
    "SpacesEnv": "hierl.evaluators.external.evaluator",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports("hierl.evaluators.external", globals(), _EXPORTS)
