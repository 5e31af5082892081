"""The JSON wire format: observations decoded against their space, or one clear error."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from hierl.evaluators.wire import (
    WireError,
    decode_floats,
    decode_number,
    decode_observations,
    encode,
    loads,
    short_repr,
)

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


# -- numbers are checked in the dtype they are stored in ---------------------------------
@pytest.mark.parametrize(
    ("value", "space", "message"),
    [
        ([[0, 0, 1e300, 0]], CARTPOLE, r"value 1e\+300 at \[0, 2\] does not fit float32"),
        ([[0, -4e38, 0, 0]], CARTPOLE, "does not fit float32"),
        ([[0, 10**400, 0, 0]], CARTPOLE, "too large for float32"),
        ([[7e4]], gym.spaces.Box(-np.inf, np.inf, (1,), np.float16), "does not fit float16"),
        (
            [[2**63 - 1]],
            gym.spaces.Box(-(2**63), 2**63 - 1, (1,), np.int64),
            "does not fit int64.*wrap around",
        ),
    ],
)
def test_values_finite_in_json_but_not_in_the_stored_dtype_are_refused(value, space, message):
    with pytest.raises(WireError, match=message) as info:
        decode_observations(value, space)
    assert info.value.field == "observations"


def test_largest_float32_values_pass():
    big = float(np.finfo(np.float32).max)
    decoded = decode_observations([[big, -big, 0, 0]], CARTPOLE)
    assert np.isfinite(decoded).all() and decoded.dtype == np.float32


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (1e300, "does not fit float32"),
        (-(10**400), "expected a finite number"),
        (float("inf"), "NaN or infinite"),
        (True, "expected a finite number"),
        ("1", "expected a finite number"),
    ],
)
def test_numbers_are_checked_as_float32(value, message):
    with pytest.raises(WireError, match=message) as info:
        decode_number(value, "reward")
    assert info.value.field == "reward"
    assert decode_number(3e38, "reward") == pytest.approx(3e38)
    assert decode_number(None, "reward") == 0.0
    with pytest.raises(WireError, match="missing"):
        decode_number(None, "reward", required=True)


def test_float_lists_are_checked_after_the_cast():
    with pytest.raises(WireError, match="does not fit float32"):
        decode_floats([0.0, 1e300], "action_dist_inputs", 2, np.float32)
    with pytest.raises(WireError, match="expected a list of 2 numbers"):
        decode_floats([[0.0, 1.0]], "action_dist_inputs", 2, np.float32)
    assert decode_floats([1, 2], "x", 2, np.float32).dtype == np.float32


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"[" * 100_000, "nested too deeply"),
        (b"[" + b"9" * 5000 + b"]", "4300 digits"),
        (b"\xff", "not UTF-8"),
        (b"{", "malformed JSON"),
    ],
)
def test_bodies_the_parser_refuses_are_wire_errors(body, message):
    with pytest.raises(WireError, match=message) as info:
        loads(body)
    assert info.value.field == "body"


def test_quoted_values_stay_short_however_large_or_deep():
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    assert len(short_repr(deep)) <= 60
    assert len(short_repr("x" * 10**6)) <= 60
