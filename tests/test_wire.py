"""The JSON wire format: observations decoded against their space, or one clear error."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from hierl.evaluators.wire import WireError, decode_observations, encode

CARTPOLE = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
IMAGE = gym.spaces.Box(0, 255, (3, 2, 2), np.uint8)


@settings(max_examples=50, deadline=None)
@given(
    arrays(
        np.float32,
        st.tuples(st.integers(1, 8), st.just(4)),
        elements=st.floats(-1e6, 1e6, width=32),
    )
)
def test_float_observations_round_trip_through_json(batch):
    wire = json.loads(json.dumps(encode(batch)))
    decoded = decode_observations(wire, CARTPOLE)
    assert decoded.dtype == np.float32
    np.testing.assert_array_equal(decoded, batch)


@settings(max_examples=30, deadline=None)
@given(arrays(np.uint8, st.tuples(st.integers(1, 4), st.just(3), st.just(2), st.just(2))))
def test_images_stay_uint8(batch):
    decoded = decode_observations(json.loads(json.dumps(encode(batch))), IMAGE)
    assert decoded.dtype == np.uint8
    np.testing.assert_array_equal(decoded, batch)


@pytest.mark.parametrize(
    ("value", "space", "message"),
    [
        ({"obs": 1}, CARTPOLE, r"expected a list of observations of shape \[4\]"),
        ([], CARTPOLE, "expected a list of observations"),
        (
            [[1, 2, 3]],
            CARTPOLE,
            r"observations of shape \[3\]; expected \[4\] \(Box\(float32, \(4,\)\)\)",
        ),
        ([[1, 2, 3, 4], [1, 2]], CARTPOLE, "ragged or hold non-numbers"),
        ([[1, 2, "a", 4]], CARTPOLE, "ragged or hold non-numbers"),
        ([[1, 2, float("nan"), 4]], CARTPOLE, "NaN or infinite"),
        ([[[[256] * 2] * 2] * 3], IMAGE, r"takes \[0, 255\]"),
        ([[[[0.5] * 2] * 2] * 3], IMAGE, "takes integers, got fractions"),
        ([2], gym.spaces.Discrete(2), r"Discrete\(2\) takes \[0, 1\]"),
        ([[0.0] * 4] * 5, CARTPOLE, "5 observations; at most 4 per request"),
    ],
)
def test_bad_observations_name_the_field_and_what_is_expected(value, space, message):
    with pytest.raises(WireError, match=message) as info:
        decode_observations(value, space, max_batch=4)
    assert info.value.field == "observations"
    assert str(info.value).startswith("observations: ")


def test_spaces_without_a_wire_format_are_refused():
    space = gym.spaces.Dict({"a": CARTPOLE})
    with pytest.raises(WireError, match="Dict spaces have no JSON wire format"):
        decode_observations([{"a": [0, 0, 0, 0]}], space)


def test_multi_discrete_bounds_are_per_element_and_shifted_by_start():
    space = gym.spaces.MultiDiscrete([3, 5], start=[10, 0])
    np.testing.assert_array_equal(
        decode_observations([[11, 4], [12, 0]], space), [[11, 4], [12, 0]]
    )
    with pytest.raises(
        WireError, match=r"value 13 in observation 0, element \(0,\).*takes \[10, 12\]"
    ):
        decode_observations([[13, 0]], space)
    with pytest.raises(
        WireError, match=r"value 4 in observation 1, element \(0,\).*takes \[0, 2\]"
    ):
        decode_observations([[0, 0], [4, 0]], gym.spaces.MultiDiscrete([3, 5]))
