"""Acting through a numpy view of a small fully connected actor-critic.

One env's step through torch is a couple of dozen one-row tensor ops (linear layers,
activations, the distribution's sample and log-density, conversions), and on CPU each
pays torch's dispatch cost: ~170 µs a step for two 64x64 MLPs and a Gaussian on a slow
core, longer than a MuJoCo physics step.  The same arithmetic in numpy costs ~35 µs.
``NumpyActor`` does it on numpy *views* of the model's parameters (no copies:
in-place updates by the optimizer, ``set_weights`` or ``load_state_dict`` are seen at
once), for the default feed-forward ``ActorCritic`` with MLP
torsos and ``Categorical`` or
``DiagGaussian`` actions.  Sampling draws from numpy's
global generator, which ``hierl.utils.seed_everything`` seeds and checkpoints save,
as they do torch's.  ``NumpyActor.forward_train`` and ``NumpyActor.backward``
give the same model's forward pass with its intermediate values and the gradients of
its parameters for given output gradients (what ``torch.autograd`` computes, up to
float32 rounding), for losses written in numpy (PPO's Gaussian update,
``hierl.algorithms.ppo_numpy``).  Value bootstrapping and everything else stay in
torch.

``ModelConfig.numpy_acting`` switches it off; ``NumpyActor.mirror`` returns None for
any model it cannot reproduce exactly (custom models, images, LSTMs, other
distributions), and those act through torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from hierl.models.distributions import Categorical, DiagGaussian
from hierl.models.networks import MLP, ActorCritic

__all__ = ["HALF_LOG_2PI", "NumpyActor", "ParamGrads", "TrainPass"]

Array = np.ndarray


def _tanh(x: Array) -> Array:
    return np.tanh(x, out=x)


def _relu(x: Array) -> Array:
    return np.maximum(x, 0.0, out=x)


def _elu(x: Array) -> Array:
    return np.where(x > 0.0, x, np.expm1(np.minimum(x, 0.0))).astype(np.float32, copy=False)


def _silu(x: Array) -> Array:
    return x * (0.5 + 0.5 * np.tanh(0.5 * x))  # x * sigmoid(x), without exp overflow


def _tanh_grad(pre: Array, y: Array) -> Array:
    return 1.0 - y * y


def _relu_grad(pre: Array, y: Array) -> Array:
    return (y > 0.0).astype(np.float32)  # torch: the gradient passes where the output > 0


def _elu_grad(pre: Array, y: Array) -> Array:
    return np.where(y > 0.0, np.float32(1.0), y + np.float32(1.0))  # exp(x) = y + 1 for x <= 0


def _silu_grad(pre: Array, y: Array) -> Array:
    sig = 0.5 + 0.5 * np.tanh(0.5 * pre)
    return sig * (1.0 + pre * (1.0 - sig))


_DERIVATIVES: dict[Callable[[Array], Array], Callable[[Array, Array], Array]] = {
    _tanh: _tanh_grad,
    _relu: _relu_grad,
    _elu: _elu_grad,
    _silu: _silu_grad,
}
"""d activation / d input from ``(input, output)``; tanh and ReLU run in place, so they
read the output only (their input array *is* the output)."""

ParamGrads = list[tuple[nn.Parameter, Array]]
"""Gradients of a model's parameters: ``(parameter, gradient of the same shape)``."""


_ACTIVATIONS: dict[type[nn.Module], Callable[[Array], Array]] = {
    nn.Tanh: _tanh,
    nn.ReLU: _relu,
    nn.ELU: _elu,
    nn.SiLU: _silu,
}

HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
"""``log(sqrt(2 pi))``, the Gaussian log-density's constant (per dimension)."""


class _Dense:
    """``y = act(x @ W.T + b)`` on views of an ``nn.Linear``'s parameters."""

    def __init__(self, layer: nn.Linear, activation: Callable[[Array], Array] | None) -> None:
        self.layer = layer
        self.weight_t = layer.weight.detach().numpy().T  # a view, not a copy
        self.bias = layer.bias.detach().numpy() if layer.bias is not None else None
        self.activation = activation

    def __call__(self, x: Array) -> Array:
        y = x @ self.weight_t
        if self.bias is not None:
            y += self.bias
        return y if self.activation is None else self.activation(y)

    def forward_train(self, x: Array) -> tuple[Array, Array]:
        """``(output, pre-activation)``; for in-place activations they are one array."""
        pre = x @ self.weight_t
        if self.bias is not None:
            pre += self.bias
        return (pre if self.activation is None else self.activation(pre)), pre

    def backward(
        self, x: Array, pre: Array, y: Array, grad_y: Array, grads: ParamGrads, input_grad: bool
    ) -> Array | None:
        """Append this layer's parameter gradients to ``grads`` given the gradient of its
        output; the gradient of its input if ``input_grad``."""
        g = grad_y if self.activation is None else grad_y * _DERIVATIVES[self.activation](pre, y)
        grads.append((self.layer.weight, g.T @ x))
        if self.layer.bias is not None:
            grads.append((self.layer.bias, g.sum(axis=0)))
        return g @ self.weight_t.T if input_grad else None


def _mlp_layers(torso: nn.Module) -> list[_Dense] | None:
    """The dense layers of an ``MLP`` of Linear/activation pairs; None otherwise."""
    if type(torso) is not MLP:
        return None
    modules = list(torso.net)
    layers: list[_Dense] = []
    i = 0
    while i < len(modules):
        layer = modules[i]
        if type(layer) is not nn.Linear:
            return None
        follow = modules[i + 1] if i + 1 < len(modules) else None
        activation = _ACTIVATIONS.get(type(follow)) if follow is not None else None
        if follow is not None and activation is None:
            return None
        layers.append(_Dense(layer, activation))
        i += 2 if activation is not None else 1
    return layers


def _run(layers: list[_Dense], x: Array) -> Array:
    for layer in layers:
        x = layer(x)
    return x


Tape = list[tuple[Array, Array, Array]]
"""``(input, pre-activation, output)`` of each layer of a torso, in order."""


def _run_train(layers: list[_Dense], x: Array) -> tuple[Array, Tape]:
    tape: Tape = []
    for layer in layers:
        y, pre = layer.forward_train(x)
        tape.append((x, pre, y))
        x = y
    return x, tape


def _backprop(layers: list[_Dense], tape: Tape, grad: Array, grads: ParamGrads) -> None:
    for i in range(len(layers) - 1, -1, -1):
        x, pre, y = tape[i]
        grad = layers[i].backward(x, pre, y, grad, grads, input_grad=i > 0)


class TrainPass:
    """What ``NumpyActor.forward_train`` keeps for ``NumpyActor.backward``."""

    def __init__(self, pi_tape: Tape, vf_tape: Tape | None, features: Array, vf_features: Array):
        self.pi_tape = pi_tape
        self.vf_tape = vf_tape
        self.features = features
        self.vf_features = vf_features


class NumpyActor:
    """Numpy forward pass and action sampling for one ``ActorCritic`` on CPU.

    Build it with ``mirror``; ``act`` gives what
    ``TorchPolicyGraph.compute_actions`` gives (actions, log-probabilities, values and
    distribution inputs, in the same dtypes), equal to torch's forward pass up to float32
    rounding.

    Attributes:
        max_rows: Batches with more rows than this act through torch, whose intra-op
            threads and vectorised kernels win once the per-op cost is amortised.
    """

    max_rows = 64

    def __init__(
        self,
        model: ActorCritic,
        pi_layers: list[_Dense],
        vf_layers: list[_Dense] | None,
    ) -> None:
        """Use ``mirror``."""
        self._model = model
        self._params = list(model.parameters())
        self._pointers = self._storage()
        self._pi_layers = pi_layers
        self._vf_layers = vf_layers
        self._pi_head = _Dense(model.pi_head, None)
        self._vf_head = _Dense(model.vf_head, None)
        self._log_std = model.log_std.detach().numpy() if model.log_std is not None else None
        self._gaussian = model.dist_class is DiagGaussian

    @classmethod
    def mirror(cls, model: nn.Module) -> NumpyActor | None:
        """A numpy actor over ``model``'s parameters, or None when it cannot reproduce
        ``model`` exactly: anything but a CPU ``ActorCritic`` (not a subclass) with
        MLP torsos of Linear layers and tanh/relu/elu/silu activations and Categorical or
        DiagGaussian actions."""
        if type(model) is not ActorCritic or model.is_image:
            return None
        if model.dist_class not in (Categorical, DiagGaussian):
            return None
        if any(p.device.type != "cpu" or p.dtype != torch.float32 for p in model.parameters()):
            return None
        pi_layers = _mlp_layers(model.pi_torso)
        vf_layers = None if model.vf_torso is None else _mlp_layers(model.vf_torso)
        if pi_layers is None or (model.vf_torso is not None and vf_layers is None):
            return None
        return cls(model, pi_layers, vf_layers)

    def is_current(self) -> bool:
        """Whether the views still see the parameters' memory (False once a parameter's
        storage was swapped, e.g. by ``param.data = ...`` or ``model.to(device)``)."""
        return self._storage() == self._pointers

    def _storage(self) -> list[int]:
        return [p.data_ptr() for p in self._params]

    def _dist_inputs(self, head: Array) -> Array:
        """The policy head's output, with the free log-std appended when the model has one
        (``[mean, log_std]``, without ``broadcast_to``'s overhead)."""
        if self._log_std is None:
            return head
        dim = self._log_std.shape[0]
        dist_inputs = np.empty((len(head), 2 * dim), np.float32)
        dist_inputs[:, :dim] = head
        dist_inputs[:, dim:] = self._log_std
        return dist_inputs

    def forward(self, obs: Array) -> tuple[Array, Array]:
        """``(dist_inputs (B, D), values (B,))`` as ``ActorCritic.forward`` computes them."""
        obs = np.asarray(obs, dtype=np.float32)
        features = _run(self._pi_layers, obs)
        dist_inputs = self._dist_inputs(self._pi_head(features))
        vf_features = features if self._vf_layers is None else _run(self._vf_layers, obs)
        values = self._vf_head(vf_features)[:, 0]
        return dist_inputs, values

    def forward_train(self, obs: Array) -> tuple[Array, Array, TrainPass]:
        """``forward`` that also keeps what ``backward`` needs."""
        obs = np.asarray(obs, dtype=np.float32)
        features, pi_tape = _run_train(self._pi_layers, obs)
        dist_inputs = self._dist_inputs(self._pi_head(features))
        if self._vf_layers is None:
            vf_features, vf_tape = features, None
        else:
            vf_features, vf_tape = _run_train(self._vf_layers, obs)
        values = self._vf_head(vf_features)[:, 0]
        return dist_inputs, values, TrainPass(pi_tape, vf_tape, features, vf_features)

    def backward(self, tape: TrainPass, grad_dist_inputs: Array, grad_values: Array) -> ParamGrads:
        """Gradients of every parameter of the model for the gradients of a loss with
        respect to ``forward_train``'s outputs (``(B, D)`` and ``(B,)``, float32)."""
        grads: ParamGrads = []
        grad_head = grad_dist_inputs
        if self._log_std is not None:
            dim = self._log_std.shape[0]
            grads.append((self._model.log_std, grad_dist_inputs[:, dim:].sum(axis=0)))
            grad_head = np.ascontiguousarray(grad_dist_inputs[:, :dim])
        shared = tape.vf_tape is None
        pi_deep, vf_deep = bool(self._pi_layers), bool(self._vf_layers)
        grad_features = self._pi_head.backward(
            tape.features, None, None, grad_head, grads, input_grad=pi_deep
        )
        grad_vf = self._vf_head.backward(
            tape.vf_features,
            None,
            None,
            grad_values[:, None],
            grads,
            input_grad=pi_deep if shared else vf_deep,
        )
        if shared and pi_deep:  # both heads' gradients meet in the one torso
            grad_features = grad_features + grad_vf
        elif vf_deep:
            _backprop(self._vf_layers, tape.vf_tape, grad_vf, grads)
        if pi_deep:
            _backprop(self._pi_layers, tape.pi_tape, grad_features, grads)
        return grads

    def act(self, obs: Array, explore: bool) -> tuple[Array, Array, Array, Array]:
        """``(actions, logp, values, dist_inputs)`` for a batch of observations: a sample
        of the action distribution (``explore``) or its mode."""
        dist_inputs, values = self.forward(obs)
        if self._gaussian:
            actions, logp = _gaussian_act(dist_inputs, explore)
        else:
            actions, logp = _categorical_act(dist_inputs, explore)
        return actions, logp, values, dist_inputs


def _gaussian_act(dist_inputs: Array, explore: bool) -> tuple[Array, Array]:
    """As ``DiagGaussian``: ``mean + std * eps`` and its log-density, read off
    ``eps`` (the mean and its density without ``explore``)."""
    dim = dist_inputs.shape[-1] // 2
    mean = dist_inputs[:, :dim]
    log_std = np.minimum(dist_inputs[:, dim:], DiagGaussian.LOG_STD_MAX)
    np.maximum(log_std, DiagGaussian.LOG_STD_MIN, out=log_std)
    logp = log_std.sum(-1)
    logp += dim * HALF_LOG_2PI
    np.negative(logp, out=logp)
    if not explore:
        return mean.copy(), logp
    eps = np.random.standard_normal(mean.shape).astype(np.float32)
    logp -= 0.5 * np.einsum("ij,ij->i", eps, eps)
    actions = np.exp(log_std)
    actions *= eps
    actions += mean
    return actions, logp


def _categorical_act(logits: Array, explore: bool) -> tuple[Array, Array]:
    """As ``Categorical``: an exponential race over the probabilities (or the
    argmax) and the action's log-probability."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    if explore:
        race = np.exp(log_probs) / np.random.standard_exponential(logits.shape)
        actions = race.argmax(axis=-1)
    else:
        actions = logits.argmax(axis=-1)
    logp = np.take_along_axis(log_probs, actions[:, None], axis=-1)[:, 0]
    return actions.astype(np.int64), logp.astype(np.float32, copy=False)
