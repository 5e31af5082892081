"""Tests for hierl.models: preprocessors, torch modules, action distributions."""

from __future__ import annotations

import dataclasses
import functools
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from hierl.models import (
    MLP,
    ActorCritic,
    Categorical,
    DiagGaussian,
    ImagePreprocessor,
    ModelConfig,
    MultiCategorical,
    NatureCNN,
    RecurrentActorCritic,
    get_action_dist,
    get_activation,
    get_preprocessor,
    make_actor_critic,
    to_env_action,
)

# ---------------------------------------------------------------------------------------------
# ModelConfig
# ---------------------------------------------------------------------------------------------


def test_model_config_normalises_lists() -> None:
    cfg = ModelConfig(hiddens=[32, 16], conv_filters=[[8, 4, 2], [16, 3, 2]])
    assert cfg.hiddens == (32, 16)
    assert cfg.conv_filters == ((8, 4, 2), (16, 3, 2))
    assert ModelConfig().conv_filters is None


def test_unknown_activation_lists_valid_ones() -> None:
    with pytest.raises(ValueError) as exc:
        ModelConfig(activation="gelu")
    for name in ("tanh", "relu", "elu", "silu"):
        assert name in str(exc.value)
    with pytest.raises(ValueError, match="tanh"):
        MLP(4, (8,), "sigmoid")
    assert get_activation("relu") is torch.nn.ReLU


def test_bad_conv_filters_rejected() -> None:
    with pytest.raises(ValueError):
        ModelConfig(conv_filters=[(8, 4)])


# ---------------------------------------------------------------------------------------------
# Preprocessors
# ---------------------------------------------------------------------------------------------


def test_discrete_preprocessor_respects_start() -> None:
    pre = get_preprocessor(spaces.Discrete(4, start=2))
    assert pre.shape == (4,) and pre.size == 4
    out = pre.transform(np.array([2, 5, 3]))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(
        out, np.array([[1, 0, 0, 0], [0, 0, 0, 1], [0, 1, 0, 0]], dtype=np.float32)
    )
    with pytest.raises(ValueError):
        pre.transform(np.array([1]))  # below start


def test_multidiscrete_preprocessor() -> None:
    pre = get_preprocessor(spaces.MultiDiscrete([2, 3]))
    assert pre.shape == (5,)
    out = pre.transform(np.array([[1, 0], [0, 2]]))
    np.testing.assert_array_equal(
        out, np.array([[0, 1, 1, 0, 0], [1, 0, 0, 0, 1]], dtype=np.float32)
    )


def test_multidiscrete_preprocessor_with_start() -> None:
    pre = get_preprocessor(spaces.MultiDiscrete([2, 3], start=[1, -1]))
    out = pre.transform(np.array([[2, -1]]))
    np.testing.assert_array_equal(out, np.array([[0, 1, 1, 0, 0]], dtype=np.float32))


def test_multibinary_preprocessor() -> None:
    pre = get_preprocessor(spaces.MultiBinary(3))
    out = pre.transform(np.array([[1, 0, 1]], dtype=np.int8))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [[1.0, 0.0, 1.0]])


def test_box_preprocessor_flattens_and_does_not_copy() -> None:
    pre = get_preprocessor(spaces.Box(-1, 1, (2, 3), dtype=np.float32))
    assert pre.shape == (6,)
    x = np.arange(12, dtype=np.float64).reshape(2, 2, 3)
    out = pre.transform(x)
    assert out.shape == (2, 6) and out.dtype == np.float32
    np.testing.assert_array_equal(out, np.arange(12, dtype=np.float32).reshape(2, 6))

    flat = get_preprocessor(spaces.Box(-1, 1, (4,), dtype=np.float32))
    x32 = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    out32 = flat.transform(x32)
    assert np.shares_memory(out32, x32)
    assert out32.shape == (5, 4)


def test_image_preprocessor_keeps_uint8_without_copying() -> None:
    space = spaces.Box(0, 255, (6, 5, 3), dtype=np.uint8)
    pre = get_preprocessor(space)
    assert pre.shape == (6, 5, 3) and pre.size == 90
    x = np.full((2, 6, 5, 3), 200, dtype=np.uint8)
    out = pre.transform(x)
    assert out.shape == (2, 6, 5, 3) and out.dtype == np.uint8
    assert np.shares_memory(out, x)  # no float copy on the way to the model
    # (H, W) frames are images too, not vectors
    assert isinstance(get_preprocessor(spaces.Box(0, 255, (84, 84), np.uint8)), ImagePreprocessor)


def test_bad_image_input_names_the_shape_and_what_is_expected() -> None:
    with pytest.raises(ValueError, match=r"\(84, 84, 3\).*float32.*images must be uint8"):
        get_preprocessor(spaces.Box(0, 1, (84, 84, 3), dtype=np.float32))
    # small 3-dim float boxes (board planes) are vectors
    assert get_preprocessor(spaces.Box(0, 1, (2, 6, 7), dtype=np.float32)).shape == (84,)
    with pytest.raises(ValueError, match=r"\(84, 3, 84\) is neither \(C, H, W\) nor"):
        NatureCNN((84, 3, 84))
    pre = get_preprocessor(spaces.Box(0, 255, (4, 84, 84), dtype=np.uint8))
    with pytest.raises(ValueError, match=r"must be uint8.*got dtype float32"):
        pre.transform(np.zeros((2, 4, 84, 84), np.float32))


def test_dict_with_nested_tuple_preprocessor() -> None:
    space = spaces.Dict(
        {
            "pos": spaces.Box(-1, 1, (2,), dtype=np.float32),
            "ctx": spaces.Tuple((spaces.Discrete(3), spaces.MultiBinary(2))),
        }
    )
    pre = get_preprocessor(space)
    keys = list(space.spaces)  # Dict key order (sorted by gymnasium): ["ctx", "pos"]
    assert keys == ["ctx", "pos"]
    assert pre.shape == (3 + 2 + 2,)
    obs = {
        "pos": np.array([[0.5, -0.5], [0.1, 0.2]], dtype=np.float32),
        "ctx": (np.array([2, 0]), np.array([[1, 0], [0, 1]], dtype=np.int8)),
    }
    out = pre.transform(obs)
    expected = np.array(
        [[0, 0, 1, 1, 0, 0.5, -0.5], [1, 0, 0, 0, 1, 0.1, 0.2]],
        dtype=np.float32,
    )
    np.testing.assert_allclose(out, expected)


def test_dict_preprocessor_matches_vector_env_layout() -> None:
    space = spaces.Dict({"a": spaces.Discrete(2), "b": spaces.Box(0, 1, (3,), dtype=np.float32)})
    batched_space = gym.vector.utils.batch_space(space, 4)
    batch = batched_space.sample()
    out = get_preprocessor(space).transform(batch)
    assert out.shape == (4, 5)
    np.testing.assert_array_equal(out[np.arange(4), batch["a"]], np.ones(4, dtype=np.float32))
    np.testing.assert_array_equal(out[:, 2:], batch["b"])


def test_nested_image_rejected() -> None:
    image = spaces.Box(0, 255, (8, 8, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match="nested images"):
        get_preprocessor(spaces.Dict({"img": image, "x": spaces.Discrete(2)}))
    with pytest.raises(ValueError, match="nested images"):
        get_preprocessor(spaces.Tuple((spaces.Discrete(2), spaces.Tuple((image,)))))


def test_unsupported_space_rejected() -> None:
    with pytest.raises(ValueError, match="Text"):
        get_preprocessor(spaces.Text(5))


# ---------------------------------------------------------------------------------------------
# Distributions
# ---------------------------------------------------------------------------------------------


def test_categorical_logp_entropy_kl() -> None:
    torch.manual_seed(0)
    logits = torch.randn(6, 4)
    dist = Categorical(logits)
    actions = torch.tensor([0, 1, 2, 3, 3, 1])
    expected = torch.log_softmax(logits, -1)[torch.arange(6), actions]
    torch.testing.assert_close(dist.logp(actions), expected)
    assert dist.logp(actions).shape == (6,)

    uniform = Categorical(torch.zeros(3, 5))
    torch.testing.assert_close(uniform.entropy(), torch.full((3,), math.log(5)))

    torch.testing.assert_close(dist.kl(Categorical(logits.clone())), torch.zeros(6))
    kl = dist.kl(uniform.__class__(torch.zeros(6, 4)))
    assert (kl > 0).all()
    ref = torch.distributions.kl_divergence(
        torch.distributions.Categorical(logits=logits),
        torch.distributions.Categorical(logits=torch.zeros(6, 4)),
    )
    torch.testing.assert_close(kl, ref)
    torch.testing.assert_close(
        dist.entropy(), torch.distributions.Categorical(logits=logits).entropy()
    )
    assert torch.equal(dist.deterministic_sample(), logits.argmax(-1))


def test_categorical_masked_logits_stay_finite() -> None:
    logits = torch.tensor([[0.0, -math.inf, 0.0]], requires_grad=True)
    dist = Categorical(logits)
    ent = dist.entropy()
    torch.testing.assert_close(ent.detach(), torch.tensor([math.log(2)]))
    ent.sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_categorical_sampling_in_range_and_seeded() -> None:
    torch.manual_seed(123)
    dist = Categorical(torch.randn(1000, 7))
    a = dist.sample()
    assert a.dtype == torch.int64 and a.shape == (1000,)
    assert int(a.min()) >= 0 and int(a.max()) < 7
    torch.manual_seed(5)
    s1 = dist.sample()
    torch.manual_seed(5)
    s2 = dist.sample()
    assert torch.equal(s1, s2)


def test_diag_gaussian_matches_torch_normal() -> None:
    torch.manual_seed(1)
    mean = torch.randn(5, 3)
    log_std = torch.randn(5, 3) * 0.5
    dist = DiagGaussian(torch.cat([mean, log_std], -1))
    ref = torch.distributions.Normal(mean, log_std.exp())
    actions = torch.randn(5, 3)
    torch.testing.assert_close(dist.logp(actions), ref.log_prob(actions).sum(-1))
    torch.testing.assert_close(dist.entropy(), ref.entropy().sum(-1))
    closed = (log_std + 0.5 * math.log(2 * math.pi * math.e)).sum(-1)
    torch.testing.assert_close(dist.entropy(), closed)
    assert torch.equal(dist.deterministic_sample(), mean)
    assert dist.sample().shape == (5, 3)

    other_in = torch.cat([mean + 0.3, log_std - 0.2], -1)
    kl = dist.kl(DiagGaussian(other_in))
    ref_kl = torch.distributions.kl_divergence(
        ref, torch.distributions.Normal(mean + 0.3, (log_std - 0.2).exp())
    ).sum(-1)
    torch.testing.assert_close(kl, ref_kl)
    assert (kl > 0).all()
    torch.testing.assert_close(
        dist.kl(DiagGaussian(torch.cat([mean, log_std], -1))), torch.zeros(5), atol=1e-6, rtol=0
    )


@pytest.mark.parametrize("dist_class", [DiagGaussian, Categorical])
def test_sample_with_logp_is_a_sample_and_its_log_probability(dist_class) -> None:
    """The same draw as ``sample()`` from the same seed, and ``logp`` of it (DiagGaussian
    reads it off its noise instead of recomputing it from the action)."""
    torch.manual_seed(2)
    inputs = torch.randn(64, 6) * torch.tensor([1.0, 1.0, 1.0, 0.5, 0.5, 0.5])
    dist = dist_class(inputs)
    torch.manual_seed(3)
    expected = dist.sample()
    torch.manual_seed(3)
    actions, logp = dist.sample_with_logp()
    assert torch.equal(actions, expected)
    torch.testing.assert_close(logp, dist.logp(actions), rtol=1e-5, atol=1e-5)


def test_diag_gaussian_clamps_log_std() -> None:
    dist = DiagGaussian(torch.tensor([[0.0, 50.0], [0.0, -50.0]]))
    torch.testing.assert_close(dist.log_std, torch.tensor([[2.0], [-20.0]]))


def test_multicategorical_logp_is_sum_of_components() -> None:
    torch.manual_seed(2)
    nvec = (2, 3, 4)
    logits = torch.randn(4, sum(nvec))
    dist = MultiCategorical(logits, nvec=nvec)
    actions = torch.tensor([[0, 2, 3], [1, 0, 0], [1, 1, 2], [0, 2, 1]])
    parts = torch.split(logits, nvec, -1)
    expected = sum(Categorical(p).logp(actions[:, i]) for i, p in enumerate(parts))
    torch.testing.assert_close(dist.logp(actions), expected)
    expected_ent = sum(Categorical(p).entropy() for p in parts)
    torch.testing.assert_close(dist.entropy(), expected_ent)
    torch.testing.assert_close(dist.kl(MultiCategorical(logits.clone(), nvec)), torch.zeros(4))
    assert (dist.kl(MultiCategorical(torch.zeros_like(logits), nvec)) > 0).all()
    s = dist.sample()
    assert s.shape == (4, 3) and s.dtype == torch.int64
    assert (s < torch.tensor(nvec)).all() and (s >= 0).all()
    assert dist.deterministic_sample().shape == (4, 3)
    with pytest.raises(ValueError):
        MultiCategorical(torch.zeros(2, 5), nvec=nvec)


def test_get_action_dist() -> None:
    cls, n = get_action_dist(spaces.Discrete(5))
    assert cls is Categorical and n == 5
    part, n = get_action_dist(spaces.MultiDiscrete([2, 3]))
    assert isinstance(part, functools.partial) and part.func is MultiCategorical and n == 5
    dist = part(torch.zeros(1, 5))
    assert dist.nvec == (2, 3)
    cls, n = get_action_dist(spaces.Box(-1, 1, (3,)))
    assert cls is DiagGaussian and n == 6
    _, n = get_action_dist(spaces.Box(-1, 1, (2, 2)))
    assert n == 8
    with pytest.raises(ValueError, match="MultiBinary") as exc:
        get_action_dist(spaces.MultiBinary(3))
    assert "Discrete" in str(exc.value) and "Box" in str(exc.value)


# ---------------------------------------------------------------------------------------------
# to_env_action
# ---------------------------------------------------------------------------------------------


def test_to_env_action_clips_box() -> None:
    space = spaces.Box(
        low=np.array([-1.0, 0.0], dtype=np.float32),
        high=np.array([1.0, 2.0], dtype=np.float32),
        dtype=np.float32,
    )
    actions = np.array([[-3.0, 1.0], [0.5, 5.0]], dtype=np.float64)
    out = to_env_action(space, actions)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [[-1.0, 1.0], [0.5, 2.0]])
    assert actions[0, 0] == -3.0  # input untouched
    assert all(space.contains(a) for a in out)


def test_to_env_action_reshapes_and_skips_infinite_bounds() -> None:
    space = spaces.Box(-np.inf, np.inf, (2, 2), dtype=np.float32)
    out = to_env_action(space, np.array([[100.0, -100.0, 3.0, 4.0]]))
    assert out.shape == (1, 2, 2)
    np.testing.assert_array_equal(out[0], [[100.0, -100.0], [3.0, 4.0]])


def test_to_env_action_discrete_start() -> None:
    out = to_env_action(spaces.Discrete(3, start=-1), np.array([0, 1, 2]))
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, [-1, 0, 1])
    np.testing.assert_array_equal(to_env_action(spaces.Discrete(3), np.array([2, 0])), [2, 0])
    md = spaces.MultiDiscrete([2, 3], start=[1, 5])
    out = to_env_action(md, np.array([[0, 2], [1, 0]]))
    np.testing.assert_array_equal(out, [[1, 7], [2, 5]])
    assert all(md.contains(a) for a in out)


# ---------------------------------------------------------------------------------------------
# Torch modules
# ---------------------------------------------------------------------------------------------


def _n_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_mlp_structure_and_init() -> None:
    mlp = MLP(4, (8, 6), "relu", out_size=2, out_gain=0.01)
    assert mlp.out_features == 2
    assert mlp(torch.zeros(3, 4)).shape == (3, 2)
    linears = [m for m in mlp.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 3
    assert all(torch.equal(lin.bias, torch.zeros_like(lin.bias)) for lin in linears)
    # Orthogonal with gain 0.01: rows of the 2x6 output weight are orthogonal with norm 0.01.
    w = linears[-1].weight.detach()
    torch.testing.assert_close(w @ w.T, 1e-4 * torch.eye(2), atol=1e-7, rtol=1e-4)
    assert MLP(4, (8,), "tanh").out_features == 8


def _torch_default_layers(module: torch.nn.Module) -> list[torch.nn.Module]:
    """Layers of ``module`` as PyTorch's init leaves them: weights and biases drawn from
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (kaiming_uniform with a=sqrt(5))."""
    layers = [m for m in module.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))]
    for layer in layers:
        bound = 1 / math.sqrt(layer.weight[0].numel())
        assert 0.5 * bound < layer.weight.abs().max() <= bound  # not orthogonal's scale
        assert 0 < layer.bias.abs().max() <= bound  # not zeroed
    return layers


def test_weight_init_torch_keeps_pytorchs_init_in_every_default_model() -> None:
    config = ModelConfig(hiddens=(64, 32), activation="relu", weight_init="torch")
    torch.manual_seed(0)
    mlp = MLP.from_config(17, config, out_size=6, out_gain=0.01)
    assert len(_torch_default_layers(mlp)) == 3  # the output layer too: out_gain unused
    torch.manual_seed(0)
    plain = torch.nn.Linear(17, 64)  # the same draws as an untouched nn.Linear
    assert torch.equal(mlp.net[0].weight, plain.weight)
    box = spaces.Box(-1.0, 1.0, (2,))
    assert len(_torch_default_layers(ActorCritic(spaces.Box(-1, 1, (5,)), box, config))) == 6
    image = spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert len(_torch_default_layers(ActorCritic(image, box, config))) == 6  # 3 conv, fc, heads
    recurrent = dataclasses.replace(config, use_lstm=True)
    lstm = RecurrentActorCritic(spaces.Box(-1, 1, (5,)), box, recurrent)
    assert lstm.lstm.bias_ih_l0.abs().max() > 0  # PyTorch's, not zeroed
    with pytest.raises(ValueError, match=r"weight_init 'xavier'.*'orthogonal', 'torch'"):
        ModelConfig(weight_init="xavier")


def test_nature_cnn_small_image() -> None:
    cnn = NatureCNN((42, 42, 3), conv_filters=((8, 4, 2), (16, 3, 2)))
    out = cnn(torch.randint(0, 256, (2, 42, 42, 3)).float())
    assert out.shape == (2, cnn.out_features) and cnn.out_features == 512
    default = NatureCNN((84, 84, 4))
    assert default(torch.zeros(1, 84, 84, 4)).shape == (1, 512)
    with pytest.raises(ValueError, match="too small"):
        NatureCNN((10, 10, 3))


def _forward(model: ActorCritic, space: gym.Space, batch: int) -> tuple:
    obs = np.stack([space.sample() for _ in range(batch)])
    x = torch.as_tensor(model.preprocessor.transform(obs))
    return model(x), x


@pytest.mark.parametrize(
    ("action_space", "n_inputs"),
    [
        (spaces.Discrete(4), 4),
        (spaces.Box(-1, 1, (3,), dtype=np.float32), 6),
        (spaces.MultiDiscrete([2, 3]), 5),
    ],
)
def test_actor_critic_shapes(action_space: gym.Space, n_inputs: int) -> None:
    obs_space = spaces.Box(-1, 1, (5,), dtype=np.float32)
    model = ActorCritic(obs_space, action_space, ModelConfig(hiddens=(16, 16)))
    (dist_inputs, values), x = _forward(model, obs_space, 7)
    assert dist_inputs.shape == (7, n_inputs) and model.num_dist_inputs == n_inputs
    assert values.shape == (7,)
    torch.testing.assert_close(model.value(x), values)
    dist = model.dist_class(dist_inputs)
    actions = dist.sample()
    assert dist.logp(actions).shape == (7,)
    env_actions = to_env_action(action_space, actions.numpy())
    assert all(action_space.contains(a) for a in env_actions)


def test_actor_critic_discrete_obs() -> None:
    obs_space = spaces.Discrete(6, start=1)
    model = ActorCritic(obs_space, spaces.Discrete(2), ModelConfig(hiddens=(8,)))
    x = torch.as_tensor(model.preprocessor.transform(np.array([1, 6, 3])))
    dist_inputs, values = model(x)
    assert dist_inputs.shape == (3, 2) and values.shape == (3,)


def test_actor_critic_image_obs() -> None:
    obs_space = spaces.Box(0, 255, (42, 42, 3), dtype=np.uint8)
    cfg = ModelConfig(conv_filters=((8, 4, 2), (16, 3, 2)), vf_share_layers=True)
    model = ActorCritic(obs_space, spaces.Discrete(3), cfg)
    assert isinstance(model.pi_torso, NatureCNN)
    (dist_inputs, values), _ = _forward(model, obs_space, 2)
    assert dist_inputs.shape == (2, 3) and values.shape == (2,)


def test_shared_vs_separate_torsos() -> None:
    obs_space = spaces.Box(-1, 1, (4,), dtype=np.float32)
    act = spaces.Discrete(2)
    shared = ActorCritic(obs_space, act, ModelConfig(hiddens=(32, 32), vf_share_layers=True))
    separate = ActorCritic(obs_space, act, ModelConfig(hiddens=(32, 32), vf_share_layers=False))
    torso = 4 * 32 + 32 + 32 * 32 + 32
    heads = (32 * 2 + 2) + (32 + 1)
    assert _n_params(shared) == torso + heads
    assert _n_params(separate) == 2 * torso + heads
    # value() must not touch the policy head when torsos are separate.
    x = torch.randn(3, 4)
    separate.value(x).sum().backward()
    assert separate.pi_head.weight.grad is None
    assert separate.pi_torso.net[0].weight.grad is None


def test_free_log_std_parameter_gets_gradients() -> None:
    obs_space = spaces.Box(-1, 1, (4,), dtype=np.float32)
    act = spaces.Box(-1, 1, (2,), dtype=np.float32)
    model = ActorCritic(obs_space, act, ModelConfig(hiddens=(8,), init_log_std=-0.5))
    assert isinstance(model.log_std, torch.nn.Parameter)
    assert any(p is model.log_std for p in model.parameters())
    x = torch.randn(5, 4)
    dist_inputs, _ = model(x)
    assert dist_inputs.shape == (5, 4)
    torch.testing.assert_close(dist_inputs[:, 2:], torch.full((5, 2), -0.5))
    assert model.pi_head.out_features == 2
    dist = model.dist_class(dist_inputs)
    loss = -dist.logp(torch.randn(5, 2)).mean() - dist.entropy().mean()
    loss.backward()
    assert model.log_std.grad is not None and model.log_std.grad.abs().sum() > 0

    no_free = ActorCritic(obs_space, act, ModelConfig(hiddens=(8,), free_log_std=False))
    assert no_free.log_std is None and no_free.pi_head.out_features == 4
    assert no_free(x)[0].shape == (5, 4)


# ---------------------------------------------------------------------------------------------
# Recurrent model
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"), [("lstm_cell_size", 0), ("max_seq_len", 0), ("max_seq_len", -2)]
)
def test_model_config_rejects_bad_lstm_sizes(field: str, value: int) -> None:
    with pytest.raises(ValueError, match=field):
        ModelConfig(**{field: value})


def test_make_actor_critic_picks_the_recurrent_model() -> None:
    obs_space = spaces.Box(-1, 1, (5,), dtype=np.float32)
    cfg = ModelConfig(hiddens=(8,), use_lstm=True, lstm_cell_size=6, max_seq_len=7)
    model = make_actor_critic(obs_space, spaces.Discrete(3), cfg)
    assert isinstance(model, RecurrentActorCritic) and model.is_recurrent
    assert model.max_seq_len == 7 and model.cell_size == 6
    plain = make_actor_critic(obs_space, spaces.Discrete(3), ModelConfig(hiddens=(8,)))
    assert isinstance(plain, ActorCritic) and not getattr(plain, "is_recurrent", False)
    with pytest.raises(ValueError, match="RecurrentActorCritic"):
        ActorCritic(obs_space, spaces.Discrete(3), cfg)


@pytest.mark.parametrize(
    ("obs_space", "action_space", "n_inputs"),
    [
        (spaces.Box(-1, 1, (5,), dtype=np.float32), spaces.Box(-1, 1, (2,), dtype=np.float32), 4),
        (spaces.Box(0, 255, (42, 42, 3), dtype=np.uint8), spaces.Discrete(3), 3),
    ],
)
def test_recurrent_actor_critic_shapes_and_state(
    obs_space: gym.Space, action_space: gym.Space, n_inputs: int
) -> None:
    cfg = ModelConfig(
        hiddens=(8,), conv_filters=((8, 4, 2), (16, 3, 2)), use_lstm=True, lstm_cell_size=6
    )
    model = RecurrentActorCritic(obs_space, action_space, cfg)
    init = model.get_initial_state()
    assert [s.shape for s in init] == [(6,), (6,)] and all((s == 0).all() for s in init)
    obs = np.stack([obs_space.sample() for _ in range(3 * 4)])
    x = torch.as_tensor(model.preprocessor.transform(obs)).reshape(3, 4, *model.preprocessor.shape)
    state = [torch.zeros(3, 6), torch.zeros(3, 6)]
    dist_inputs, values, (h, c) = model(x, state)
    assert dist_inputs.shape == (3, 4, n_inputs) and values.shape == (3, 4)
    assert h.shape == c.shape == (3, 6)
    # unrolling in two halves, carrying the state, gives the same outputs
    d1, v1, mid = model(x[:, :2], state)
    d2, v2, (h2, c2) = model(x[:, 2:], mid)
    torch.testing.assert_close(torch.cat([d1, d2], 1), dist_inputs)
    torch.testing.assert_close(torch.cat([v1, v2], 1), values)
    torch.testing.assert_close(h2, h)
    torch.testing.assert_close(c2, c)
