"""Tests for hierl.sample_batch (SampleBatch, CompressedColumn, MultiAgentBatch)."""

from __future__ import annotations

import itertools
import pickle

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hierl.sample_batch import (
    DEFAULT_POLICY_ID,
    CompressedColumn,
    MultiAgentBatch,
    SampleBatch,
    concat_samples,
    minibatch_bounds,
)

SB = SampleBatch
FAST = settings(max_examples=50, deadline=None)
ROW_ID = "row_id"


# ---------------------------------------------------------------------- helpers / strategies


@st.composite
def batches(draw: st.DrawFn, min_count: int = 0, max_count: int = 30) -> SampleBatch:
    """A batch with a row-id column plus columns of several dtypes and shapes."""
    n = draw(st.integers(min_count, max_count))
    return SampleBatch(
        {
            ROW_ID: np.arange(n, dtype=np.int64),
            SB.OBS: draw(hnp.arrays(np.float32, (n, 3))),
            SB.ACTIONS: draw(hnp.arrays(np.int64, (n,))),
            SB.TERMINATEDS: draw(hnp.arrays(np.bool_, (n,))),
            SB.NEW_OBS: draw(hnp.arrays(np.uint8, (n, 2, 2, 3))),
        }
    )


def assert_batches_equal(a: SampleBatch, b: SampleBatch) -> None:
    """Same columns; per column same dtype, shape and bytes (so NaNs compare equal)."""
    assert set(a.keys()) == set(b.keys())
    assert a.count == b.count
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        assert x.dtype == y.dtype, k
        assert x.shape == y.shape, k
        assert x.tobytes() == y.tobytes(), k


def assert_rows_aligned(original: SampleBatch, result: SampleBatch) -> None:
    """Every row of ``result`` equals the row of ``original`` named by its row id."""
    ids = result[ROW_ID]
    for k in original:
        np.testing.assert_array_equal(result[k], original[k][ids], err_msg=k)
        assert result[k].dtype == original[k].dtype


compressible_arrays = st.one_of(
    hnp.arrays(np.float32, hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=6)),
    hnp.arrays(np.int64, hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=6)),
    hnp.arrays(np.bool_, hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=6)),
    hnp.arrays(np.uint8, st.tuples(st.integers(0, 3), st.just(84), st.just(84), st.just(3))),
)


# ---------------------------------------------------------------------- construction


def test_column_constants() -> None:
    names = [
        "OBS",
        "NEW_OBS",
        "ACTIONS",
        "REWARDS",
        "TERMINATEDS",
        "TRUNCATEDS",
        "EPS_ID",
        "ENV_ID",
        "AGENT_INDEX",
        "T",
        "ACTION_LOGP",
        "ACTION_DIST_INPUTS",
        "VF_PREDS",
        "ADVANTAGES",
        "VALUE_TARGETS",
        "SEQ_LENS",
    ]
    for name in names:
        assert getattr(SampleBatch, name) == name.lower()
    assert SampleBatch.STATE_IN == "state_in_"
    assert SampleBatch.STATE_OUT == "state_out_"


def test_empty_batch_count_is_zero() -> None:
    b = SampleBatch()
    assert b.count == 0
    assert len(b) == 0
    assert b.size_bytes() == 0
    assert repr(b) == "SampleBatch(count=0, columns=[])"


def test_conversion_keeps_dtype_and_len_is_columns() -> None:
    b = SampleBatch({"a": [1, 2, 3]}, obs=np.zeros((3, 2), dtype=np.float32))
    assert isinstance(b["a"], np.ndarray)
    assert b["obs"].dtype == np.float32
    assert b.count == 3
    assert len(b) == 2
    assert repr(b) == "SampleBatch(count=3, columns=['a', 'obs'])"
    b["c"] = [True, False, True]
    assert b["c"].dtype == np.bool_


def test_length_mismatch_in_constructor_names_column() -> None:
    with pytest.raises(ValueError, match=r"'actions'.*length 2.*3 rows"):
        SampleBatch({"obs": np.zeros(3), "actions": np.zeros(2)})


def test_length_mismatch_on_setitem_names_column() -> None:
    b = SampleBatch(obs=np.zeros((4, 2)))
    with pytest.raises(ValueError, match=r"'rewards'.*5.*4"):
        b["rewards"] = np.zeros(5)
    assert "rewards" not in b
    with pytest.raises(ValueError, match="'x'"):
        b.update({"x": np.zeros(1)})
    with pytest.raises(ValueError, match="'y'"):
        b.setdefault("y", np.zeros(7))
    with pytest.raises(ValueError, match="'t'"):
        b["t"] = 3  # 0-d
    # Replacing the only column with a different length is allowed.
    single = SampleBatch(obs=np.zeros(2))
    single["obs"] = np.zeros(5)
    assert single.count == 5


def test_seq_lens_exempt_and_row_ops_keep_sequences_whole() -> None:
    b = SampleBatch(obs=np.arange(6.0), seq_lens=np.array([4, 2]))
    assert b.count == 6 and b.num_sequences == 2
    assert SampleBatch(obs=np.zeros(2)).num_sequences is None
    np.testing.assert_array_equal(b[0:4]["obs"], [0, 1, 2, 3])
    np.testing.assert_array_equal(b[0:4][SB.SEQ_LENS], [4])
    np.testing.assert_array_equal(b.slice(4)[SB.SEQ_LENS], [2])
    assert b[6:6].count == 0 and len(b[6:6][SB.SEQ_LENS]) == 0
    with pytest.raises(ValueError, match="sequence boundaries"):
        b[0:2]
    with pytest.raises(ValueError, match="sequence boundaries"):
        b.slice(1, 6)
    with pytest.raises(ValueError, match="step 2"):
        b[0:6:2]
    shuffled = b.shuffle(1)
    assert sorted(shuffled[SB.SEQ_LENS].tolist()) == [2, 4]
    with pytest.raises(ValueError, match="sum to 5 but the batch has 6 rows"):
        SampleBatch(obs=np.zeros(6), seq_lens=np.array([4, 1])).minibatches(2)
    with pytest.raises(ValueError, match="positive"):
        SampleBatch(obs=np.zeros(6), seq_lens=np.array([6, 0])).shuffle(0)


def test_chop_into_sequences_closed_form() -> None:
    eps = np.array([1, 1, 1, 1, 1, 2, 2, 3, 3, 3, 3, 3, 3, 3])
    b = SampleBatch(obs=np.zeros(14), eps_id=eps).chop_into_sequences(3)
    np.testing.assert_array_equal(b[SB.SEQ_LENS], [3, 2, 2, 3, 3, 1])
    # env_id changes split too; no id column: one segment
    b = SampleBatch(obs=np.zeros(4), eps_id=np.zeros(4), env_id=np.array([0, 0, 1, 1]))
    np.testing.assert_array_equal(b.chop_into_sequences(5)[SB.SEQ_LENS], [2, 2])
    np.testing.assert_array_equal(
        SampleBatch(obs=np.zeros(7)).chop_into_sequences(3)[SB.SEQ_LENS], [3, 3, 1]
    )
    assert len(SampleBatch(obs=np.zeros(0)).chop_into_sequences(3)[SB.SEQ_LENS]) == 0
    with pytest.raises(ValueError, match="max_seq_len"):
        SampleBatch(obs=np.zeros(2)).chop_into_sequences(0)


@st.composite
def sequence_batches(draw: st.DrawFn) -> SampleBatch:
    """A batch of random sequences; ``seq_id`` names each row's sequence, ``row_id`` the row."""
    lens = draw(st.lists(st.integers(1, 6), max_size=12))
    n = sum(lens)
    return SampleBatch(
        {
            ROW_ID: np.arange(n, dtype=np.int64),
            "seq_id": np.repeat(np.arange(len(lens)), lens).astype(np.int64),
            SB.OBS: draw(hnp.arrays(np.float32, (n, 2))),
            SB.SEQ_LENS: np.array(lens, dtype=np.int64),
        }
    )


def assert_whole_sequences(original: SampleBatch, result: SampleBatch) -> None:
    """``result`` is whole sequences of ``original``, in order inside each, with their lengths."""
    lens = result[SB.SEQ_LENS]
    assert lens.sum() == result.count
    starts = np.cumsum(lens) - lens
    bounds = np.cumsum(original[SB.SEQ_LENS]) - original[SB.SEQ_LENS]
    for start, n in zip(starts, lens, strict=True):
        seq = result["seq_id"][start]
        assert (result["seq_id"][start : start + n] == seq).all()
        assert n == original[SB.SEQ_LENS][seq]
        np.testing.assert_array_equal(result[ROW_ID][start : start + n], bounds[seq] + np.arange(n))
    for k in original:
        if k != SB.SEQ_LENS:
            np.testing.assert_array_equal(result[k], original[k][result[ROW_ID]], err_msg=k)


@FAST
@given(
    batch=sequence_batches(), size=st.integers(1, 20), shuffle=st.booleans(), seed=st.integers(0, 9)
)
def test_sequence_minibatches_cover_every_row_once_and_keep_sequences_whole(
    batch: SampleBatch, size: int, shuffle: bool, seed: int
) -> None:
    mbs = list(batch.minibatches(size, shuffle=shuffle, rng=seed))
    ids = np.concatenate([mb[ROW_ID] for mb in mbs]) if mbs else np.zeros(0, dtype=np.int64)
    np.testing.assert_array_equal(np.sort(ids), np.arange(batch.count))
    if not shuffle:
        np.testing.assert_array_equal(ids, np.arange(batch.count))
    for i, mb in enumerate(mbs):
        assert_whole_sequences(batch, mb)
        if i < len(mbs) - 2:  # at least size rows, over by less than one sequence
            assert size <= mb.count < size + mb[SB.SEQ_LENS][-1]
    if len(mbs) > 1:  # a tail under size / 2 is merged into the one before it
        assert 2 * mbs[-1].count >= size and mbs[-2].count >= size
    assert sum(mb.num_sequences for mb in mbs) == batch.num_sequences


@FAST
@given(batch=sequence_batches(), seed=st.integers(0, 99), data=st.data())
def test_sequence_shuffle_slice_split_and_concat(
    batch: SampleBatch, seed: int, data: st.DataObject
) -> None:
    shuffled = batch.shuffle(seed)
    assert_whole_sequences(batch, shuffled)
    assert sorted(shuffled["seq_id"].tolist()) == batch["seq_id"].tolist()
    bounds = np.concatenate(([0], np.cumsum(batch[SB.SEQ_LENS]))).tolist()
    cut = sorted(data.draw(st.lists(st.sampled_from(bounds), min_size=2, max_size=2)))
    part = batch[cut[0] : cut[1]]
    assert_whole_sequences(batch, part)
    rest = SampleBatch.concat_samples([batch[: cut[0]], part, batch[cut[1] :]])
    assert_batches_equal(rest, batch)
    # eps_id runs on sequence boundaries split like any batch
    batch[SB.EPS_ID] = batch["seq_id"] // 2
    if batch.count:
        pieces = batch.split_by_episode()
        assert_batches_equal(SampleBatch.concat_samples(pieces), batch)
        for p in pieces:
            assert_whole_sequences(batch, p)


def test_copy_is_deep() -> None:
    b = SampleBatch(obs=np.zeros((3, 2)), actions=np.arange(3))
    c = b.copy()
    assert isinstance(c, SampleBatch)
    c["obs"][0, 0] = 5.0
    assert b["obs"][0, 0] == 0.0
    assert_batches_equal(b.copy(), b)


def test_pickle_plain_batch() -> None:
    b = SampleBatch(obs=np.arange(6.0).reshape(3, 2), actions=np.arange(3))
    c = pickle.loads(pickle.dumps(b))
    assert isinstance(c, SampleBatch)
    assert_batches_equal(b, c)


# ---------------------------------------------------------------------- concat


@FAST
@given(batch=batches(), data=st.data())
def test_concat_of_random_splits_equals_original(batch: SampleBatch, data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, batch.count), max_size=5)))
    bounds = [0, *cuts, batch.count]
    parts = [batch.slice(s, e) for s, e in itertools.pairwise(bounds)]
    assert sum(p.count for p in parts) == batch.count
    assert_batches_equal(SampleBatch.concat_samples(parts), batch)
    assert_batches_equal(concat_samples(parts), batch)
    pairwise = parts[0]
    for p in parts[1:]:
        pairwise = pairwise.concat(p)
    assert_batches_equal(pairwise, batch)


def test_concat_empty_inputs() -> None:
    assert SampleBatch.concat_samples([]).count == 0
    assert len(SampleBatch.concat_samples([])) == 0
    b = SampleBatch(obs=np.arange(3))
    assert_batches_equal(SampleBatch.concat_samples([SampleBatch(), b]), b)


def test_concat_mismatched_columns_raises() -> None:
    a = SampleBatch(obs=np.zeros(2), actions=np.zeros(2))
    missing = SampleBatch(obs=np.zeros(2))
    extra = SampleBatch(obs=np.zeros(2), actions=np.zeros(2), rewards=np.zeros(2))
    with pytest.raises(ValueError, match="actions"):
        SampleBatch.concat_samples([a, missing])
    with pytest.raises(ValueError, match="rewards"):
        a.concat(extra)
    with pytest.raises(ValueError, match="'obs'"):
        a.concat(SampleBatch(obs=np.zeros((2, 3)), actions=np.zeros(2)))


def test_concat_returns_new_arrays() -> None:
    a = SampleBatch(obs=np.zeros(2))
    c = SampleBatch.concat_samples([a])
    c["obs"][0] = 1.0
    assert a["obs"][0] == 0.0


# ---------------------------------------------------------------------- slice / shuffle


@FAST
@given(batch=batches(), start=st.integers(-35, 35), end=st.integers(-35, 35))
def test_slicing_preserves_rows(batch: SampleBatch, start: int, end: int) -> None:
    for sliced in (batch[start:end], batch.slice(start, end)):
        assert isinstance(sliced, SampleBatch)
        for k in batch:
            np.testing.assert_array_equal(sliced[k], batch[k][start:end])
            assert sliced[k].dtype == batch[k].dtype
        assert sliced.count == len(range(batch.count)[start:end])


@FAST
@given(batch=batches(), seed=st.integers(0, 2**32 - 1))
def test_shuffle_is_one_permutation_for_all_columns(batch: SampleBatch, seed: int) -> None:
    before = batch.copy()
    shuffled = batch.shuffle(seed)
    assert shuffled is not batch
    assert shuffled.count == batch.count
    np.testing.assert_array_equal(np.sort(shuffled[ROW_ID]), np.arange(batch.count))
    assert_rows_aligned(batch, shuffled)
    assert_batches_equal(batch, before)  # input untouched
    assert_batches_equal(batch.shuffle(np.random.default_rng(seed)), shuffled)


def test_shuffle_actually_permutes() -> None:
    b = SampleBatch({ROW_ID: np.arange(100), "x": np.arange(100) * 2})
    s = b.shuffle(0)
    assert not np.array_equal(s[ROW_ID], b[ROW_ID])
    np.testing.assert_array_equal(s["x"], s[ROW_ID] * 2)


# ---------------------------------------------------------------------- minibatches


@FAST
@given(batch=batches(), size=st.integers(1, 40), shuffle=st.booleans(), seed=st.integers(0, 99))
def test_minibatches_cover_every_row_once(
    batch: SampleBatch, size: int, shuffle: bool, seed: int
) -> None:
    mbs = list(batch.minibatches(size, shuffle=shuffle, rng=seed))
    n = batch.count
    expected = [size] * (n // size) + ([n % size] if n % size else [])
    if len(expected) > 1 and 2 * expected[-1] < size:  # a small tail joins the last one
        expected[-2:] = [expected[-2] + expected[-1]]
    assert [mb.count for mb in mbs] == expected
    ids = np.concatenate([mb[ROW_ID] for mb in mbs]) if mbs else np.zeros(0, dtype=np.int64)
    np.testing.assert_array_equal(np.sort(ids), np.arange(n))
    if not shuffle:
        np.testing.assert_array_equal(ids, np.arange(n))
    for mb in mbs:
        assert_rows_aligned(batch, mb)


@pytest.mark.parametrize("size", [0, -3])
def test_minibatches_invalid_size(size: int) -> None:
    b = SampleBatch(obs=np.zeros(4))
    with pytest.raises(ValueError, match=str(size)):
        b.minibatches(size)


# ---------------------------------------------------------------------- compression


@FAST
@given(arr=compressible_arrays, bulk=st.booleans())
def test_compress_decompress_is_identity(arr: np.ndarray, bulk: bool) -> None:
    b = SampleBatch(obs=arr, actions=np.arange(len(arr)))
    assert not b.is_compressed()
    assert b.compress(bulk=bulk) is b
    assert b.is_compressed()
    assert b.is_compressed(SB.OBS)
    assert not b.is_compressed(SB.ACTIONS)
    assert b.count == len(arr)
    assert b.decompress_if_needed() is b
    assert not b.is_compressed()
    out = b[SB.OBS]
    assert isinstance(out, np.ndarray)
    assert out.dtype == arr.dtype
    assert out.shape == arr.shape
    assert out.tobytes() == arr.tobytes()
    out[...] = out  # decompressed arrays are writable


def test_compressed_column_roundtrip_non_contiguous_and_pickle() -> None:
    base = np.arange(60, dtype=np.int64).reshape(6, 10)
    view = base[:, ::3].T  # not C-contiguous
    col = CompressedColumn.from_array(view)
    assert len(col) == view.shape[0]
    np.testing.assert_array_equal(col.decompress(), view)
    col2 = pickle.loads(pickle.dumps(col))
    assert (col2.shape, col2.dtype, col2.data) == (col.shape, col.dtype, col.data)
    with pytest.raises(ValueError, match="object"):
        CompressedColumn.from_array(np.array([None, 1], dtype=object))


def test_compress_selected_columns_only_and_noop_paths() -> None:
    b = SampleBatch(obs=np.zeros((3, 4)), new_obs=np.ones((3, 4)), actions=np.arange(3))
    b.compress(SB.ACTIONS)
    assert b.is_compressed(SB.ACTIONS)
    assert not b.is_compressed(SB.OBS)
    b.compress(["missing_column"])  # absent columns are skipped
    b.decompress_if_needed([SB.OBS])  # not compressed: no-op
    assert b.is_compressed(SB.ACTIONS)
    with pytest.raises(KeyError):
        b.is_compressed("missing_column")


def test_compressed_image_is_smaller() -> None:
    img = np.zeros((8, 84, 84, 3), dtype=np.uint8)
    img[:, 20:40, 10:70, :] = 200
    b = SampleBatch(obs=img, actions=np.arange(8))
    raw = b.size_bytes()
    b.compress()
    assert b.size_bytes() < raw // 10
    per_row = SampleBatch(obs=img).compress(bulk=False)
    assert per_row.size_bytes() < img.nbytes // 10


@pytest.mark.parametrize("bulk", [True, False])
def test_compressed_batch_survives_pickle(bulk: bool) -> None:
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 4, size=(5, 84, 84, 3), dtype=np.uint8)
    b = SampleBatch(obs=obs, new_obs=obs[::-1].copy(), rewards=rng.random(5, dtype=np.float32))
    b.compress(bulk=bulk)
    c = pickle.loads(pickle.dumps(b))
    assert isinstance(c, SampleBatch)
    assert c.is_compressed(SB.OBS)
    assert c.count == 5
    c.decompress_if_needed()
    np.testing.assert_array_equal(c[SB.OBS], obs)
    np.testing.assert_array_equal(c[SB.NEW_OBS], obs[::-1])
    assert c[SB.REWARDS].dtype == np.float32


@FAST
@given(batch=batches(min_count=1), size=st.integers(1, 10), bulk=st.booleans())
def test_row_ops_on_compressed_batches(batch: SampleBatch, size: int, bulk: bool) -> None:
    original = batch.copy()
    comp = batch.copy().compress((SB.OBS, SB.NEW_OBS, ROW_ID), bulk=bulk)
    # concat decompresses copies, leaving inputs compressed
    joined = SampleBatch.concat_samples([comp, comp])
    assert not joined.is_compressed()
    assert comp.is_compressed(SB.OBS)
    assert_batches_equal(joined, SampleBatch.concat_samples([original, original]))
    # slicing / shuffling / minibatches return uncompressed batches
    sliced = comp[1:]
    assert not sliced.is_compressed()
    assert_batches_equal(sliced, original[1:])
    shuffled = comp.shuffle(3)
    assert not shuffled.is_compressed()
    assert_batches_equal(shuffled, original.shuffle(3))
    mbs = list(comp.minibatches(size, rng=1))
    assert not any(mb.is_compressed() for mb in mbs)
    assert_batches_equal(
        SampleBatch.concat_samples(mbs),
        SampleBatch.concat_samples(list(original.minibatches(size, rng=1))),
    )
    assert comp.is_compressed(ROW_ID)


# ---------------------------------------------------------------------- split_by_episode


def test_split_by_episode_eps_id_runs() -> None:
    b = SampleBatch(eps_id=np.array([1, 1, 2, 2, 2, 1]), t=np.array([0, 1, 0, 1, 2, 2]))
    runs = b.split_by_episode()
    assert [r.count for r in runs] == [2, 3, 1]
    assert [r[SB.EPS_ID].tolist() for r in runs] == [[1, 1], [2, 2, 2], [1]]
    assert [r[SB.T].tolist() for r in runs] == [[0, 1], [0, 1, 2], [2]]


def test_split_by_episode_also_splits_on_env_id() -> None:
    b = SampleBatch(
        eps_id=np.array([1, 1, 2, 2, 2, 1]),
        env_id=np.array([0, 0, 0, 1, 1, 1]),
    )
    runs = b.split_by_episode()
    assert [r[SB.EPS_ID].tolist() for r in runs] == [[1, 1], [2], [2, 2], [1]]
    assert [r[SB.ENV_ID].tolist() for r in runs] == [[0, 0], [0], [1, 1], [1]]


def test_split_by_episode_edge_cases() -> None:
    with pytest.raises(ValueError, match="eps_id"):
        SampleBatch(obs=np.zeros(3)).split_by_episode()
    assert SampleBatch(eps_id=np.zeros(0, dtype=np.int64)).split_by_episode() == []
    runs = SampleBatch(eps_id=np.array([7, 7, 7])).split_by_episode()
    assert [r.count for r in runs] == [3]


@FAST
@given(data=st.data(), with_env=st.booleans())
def test_split_by_episode_concat_is_identity(data: st.DataObject, with_env: bool) -> None:
    n = data.draw(st.integers(0, 40))
    cols = {
        SB.EPS_ID: data.draw(hnp.arrays(np.int64, (n,), elements=st.integers(0, 2))),
        SB.OBS: data.draw(hnp.arrays(np.float32, (n, 2))),
    }
    if with_env:
        cols[SB.ENV_ID] = data.draw(hnp.arrays(np.int32, (n,), elements=st.integers(0, 1)))
    batch = SampleBatch(cols)
    runs = batch.split_by_episode()
    if n:
        assert_batches_equal(SampleBatch.concat_samples(runs), batch)
    else:
        assert runs == []
    keys = [SB.EPS_ID, SB.ENV_ID] if with_env else [SB.EPS_ID]
    for run in runs:
        assert run.count > 0
        for k in keys:
            assert np.all(run[k] == run[k][0])
    for prev, nxt in itertools.pairwise(runs):
        assert any(prev[k][-1] != nxt[k][0] for k in keys)


# ---------------------------------------------------------------------- MultiAgentBatch


def test_multi_agent_batch_counts_and_concat_with_sample_batches() -> None:
    p1 = SampleBatch(obs=np.zeros((3, 2)), actions=np.arange(3))
    p2 = SampleBatch(obs=np.ones((5, 2)), actions=np.arange(5))
    ma = MultiAgentBatch({"p1": p1, "p2": p2}, env_steps=4)
    assert ma.count == 4
    assert ma.env_steps() == 4
    assert ma.agent_steps() == 8
    assert "env_steps=4" in repr(ma)

    sb = SampleBatch(obs=np.full((2, 2), 7.0), actions=np.arange(2))
    wrapped = sb.as_multi_agent()
    assert list(wrapped.policy_batches) == [DEFAULT_POLICY_ID]
    assert wrapped.count == 2

    d = SampleBatch(obs=np.full((6, 2), 9.0), actions=np.arange(6))
    out = MultiAgentBatch.concat_samples([ma, sb, MultiAgentBatch({DEFAULT_POLICY_ID: d}, 6)])
    assert out.count == 4 + 2 + 6
    assert out.agent_steps() == 8 + 2 + 6
    assert set(out.policy_batches) == {"p1", "p2", DEFAULT_POLICY_ID}
    np.testing.assert_array_equal(
        out.policy_batches[DEFAULT_POLICY_ID][SB.ACTIONS], np.r_[np.arange(2), np.arange(6)]
    )
    assert_batches_equal(out.policy_batches["p1"], p1)

    dispatched = concat_samples([sb, ma])
    assert isinstance(dispatched, MultiAgentBatch)
    assert dispatched.count == 6
    assert isinstance(concat_samples([sb, sb]), SampleBatch)
    assert MultiAgentBatch.concat_samples([]).count == 0
    with pytest.raises(TypeError):
        SampleBatch.concat_samples([sb, ma])  # type: ignore[list-item]


def test_multi_agent_compress_delegates_and_pickles() -> None:
    obs = np.zeros((4, 84, 84, 3), dtype=np.uint8)
    ma = MultiAgentBatch({"a": SampleBatch(obs=obs), "b": SampleBatch(obs=obs[:2].copy())}, 4)
    raw = ma.size_bytes()
    assert ma.compress() is ma
    assert ma.is_compressed()
    assert all(b.is_compressed(SB.OBS) for b in ma.policy_batches.values())
    assert ma.size_bytes() < raw
    ma2 = pickle.loads(pickle.dumps(ma))
    assert ma2.count == 4
    assert ma2.agent_steps() == 6
    assert ma2.decompress_if_needed() is ma2
    assert not ma2.is_compressed()
    np.testing.assert_array_equal(ma2.policy_batches["a"][SB.OBS], obs)
    with pytest.raises(ValueError, match="-1"):
        MultiAgentBatch({}, -1)
    with pytest.raises(TypeError):
        MultiAgentBatch({"a": {"obs": obs}}, 4)  # type: ignore[dict-item]


# ---------------------------------------------------------------------- minibatch tail rule


@pytest.mark.parametrize(
    ("n", "size", "counts"),
    [
        (1025, 256, [256, 256, 256, 257]),  # a 1-row tail is merged
        (1150, 256, [256, 256, 256, 382]),  # 126 < 128: merged too
        (1152, 256, [256, 256, 256, 256, 128]),  # 128 = size / 2: its own minibatch
        (1200, 256, [256, 256, 256, 256, 176]),
        (1024, 256, [256] * 4),  # an exact multiple is unchanged
        (200, 256, [200]),  # smaller than one minibatch: one
        (0, 256, []),
    ],
)
def test_small_tail_is_merged_into_the_last_minibatch(n: int, size: int, counts: list) -> None:
    assert [stop - start for start, stop in minibatch_bounds(n, size)] == counts
    batch = SampleBatch({ROW_ID: np.arange(n)})
    mbs = list(batch.minibatches(size, rng=0))
    assert [mb.count for mb in mbs] == counts
    ids = np.concatenate([mb[ROW_ID] for mb in mbs]) if mbs else np.zeros(0, dtype=np.int64)
    np.testing.assert_array_equal(np.sort(ids), np.arange(n))


@settings(max_examples=300, deadline=None)
@given(n=st.integers(0, 3000), size=st.integers(1, 600))
def test_minibatch_bounds_use_every_row_once_and_none_is_small(n: int, size: int) -> None:
    bounds = minibatch_bounds(n, size)
    rows = np.concatenate([np.arange(a, b) for a, b in bounds]) if bounds else np.zeros(0)
    np.testing.assert_array_equal(rows, np.arange(n))  # each row exactly once, in order
    sizes = [b - a for a, b in bounds]
    if n >= size:
        assert all(2 * k >= size for k in sizes) and all(k < size + size / 2 for k in sizes)
        assert sizes[:-1] == [size] * (len(sizes) - 1)
    else:
        assert sizes == ([n] if n else [])


def test_sequence_minibatches_merge_a_small_tail_sequence() -> None:
    # sequences of 4, 4, 4, 1 rows at size 4: the 1-row tail joins the third minibatch
    batch = SampleBatch({ROW_ID: np.arange(13), SB.SEQ_LENS: np.array([4, 4, 4, 1])})
    mbs = list(batch.minibatches(4, shuffle=False))
    assert [mb.count for mb in mbs] == [4, 4, 5]
    assert mbs[-1][SB.SEQ_LENS].tolist() == [4, 1]
    # a tail of half a minibatch or more stays its own
    batch = SampleBatch({ROW_ID: np.arange(14), SB.SEQ_LENS: np.array([4, 4, 4, 2])})
    assert [mb.count for mb in batch.minibatches(4, shuffle=False)] == [4, 4, 4, 2]
