"""Snippets in the shape of the tf.data guide (tensorflow.org/guide/data, data_performance), ported by
replacing ``tf.data`` with ``jaxfeed.data`` and tf ops per docs/porting.md. Each asserts what the guide
shows."""

import numpy as np
import pytest

import jaxfeed.data as tfdata
from jaxfeed import ops
from jaxfeed.pipeline import TensorSpec  # tf.TensorSpec


def test_reading_input_data_from_numpy_and_batching():
    features, labels = np.arange(60000 * 2, dtype=np.float32).reshape(60000, 2), np.arange(60000) % 10
    dataset = tfdata.Dataset.from_tensor_slices((features, labels))
    batched = dataset.shuffle(1000, seed=1).batch(32, drop_remainder=True).prefetch(tfdata.AUTOTUNE)
    x, y = next(iter(batched))
    assert x.shape == (32, 2) and y.shape == (32,)
    assert batched.cardinality() == 60000 // 32


def test_consuming_text_data_skips_headers_and_comments(tmp_path):
    files = []
    for i in range(2):
        path = tmp_path / f"titanic-{i}.csv"
        path.write_text("survived,sex,age\n# a comment\n" + "".join(f"{j % 2},m,{20 + j}\n" for j in range(3)))
        files.append(str(path))
    lines = tfdata.Dataset.from_tensor_slices(files).flat_map(
        lambda f: tfdata.TextLineDataset(f).skip(1).filter(lambda line: not line.startswith(b"#")))
    assert [bytes(line) for line in lines.take(4)] == [b"0,m,20", b"1,m,21", b"0,m,22", b"0,m,20"]


def test_make_csv_dataset_gives_feature_dicts(tmp_path):
    path = tmp_path / "titanic.csv"
    path.write_text("survived,sex,age,fare\n" + "".join(f"{i % 2},{'mf'[i % 2]},{20 + i},{7.25 * i}\n"
                                                         for i in range(10)))
    titanic = tfdata.experimental.make_csv_dataset(str(path), batch_size=4, label_name="survived", num_epochs=1,
                                                   shuffle=False)
    features, label = next(iter(titanic))
    assert list(features) == ["sex", "age", "fare"]
    assert features["age"].dtype == np.int32 and features["fare"].dtype == np.float32
    assert label.tolist() == [0, 1, 0, 1]


def test_windowing_with_window_and_flat_map():
    range_ds = tfdata.Dataset.range(100000)

    def make_window_dataset(ds, window_size=5, shift=1, stride=1):
        windows = ds.window(window_size, shift=shift, stride=stride)
        return windows.flat_map(lambda sub: sub.batch(window_size, drop_remainder=True))

    ds = make_window_dataset(range_ds, window_size=10, shift=5, stride=3)
    assert [w.tolist() for w in ds.take(2)] == [list(range(0, 30, 3)), list(range(5, 35, 3))]
    features_and_labels = range_ds.batch(10).map(lambda x: (x[:-5], x[-5:]))
    f, lab = next(iter(features_and_labels))
    assert f.tolist() == [0, 1, 2, 3, 4] and lab.tolist() == [5, 6, 7, 8, 9]


def test_resampling_an_imbalanced_dataset():
    labels = np.random.default_rng(0).choice(2, size=20000, p=[0.95, 0.05]).astype(np.int64)
    creditcard = tfdata.Dataset.from_tensor_slices((np.arange(20000, dtype=np.float32), labels))
    negative = creditcard.filter(lambda f, y: y == 0).repeat()
    positive = creditcard.filter(lambda f, y: y == 1).repeat()
    balanced = tfdata.Dataset.sample_from_datasets([negative, positive], [0.5, 0.5], seed=1).batch(100)
    assert 0.4 < next(iter(balanced))[1].mean() < 0.6
    resampled = creditcard.rejection_resample(lambda f, y: y, target_dist=[0.5, 0.5], initial_dist=[0.95, 0.05],
                                              seed=2).map(lambda extra, pair: pair).batch(200)
    assert 0.35 < next(iter(resampled))[1].mean() < 0.65


def test_iterator_checkpointing():
    range_ds = tfdata.Dataset.range(20)
    iterator = iter(range_ds)
    state = None
    for i in range(5):
        next(iterator)
        if i == 2:
            state = iterator.get_state()  # the guide's tf.train.Checkpoint(iterator=...).save()
    assert int(next(iterator)) == 5
    restored = range_ds.make_iterator(state=state)
    assert int(next(restored)) == 3


def test_preprocessing_images_with_jaxfeed_ops():
    images = np.random.default_rng(0).integers(0, 256, (8, 40, 50, 3), dtype=np.uint8)
    encoded = [ops.encode_png(img) for img in images]

    def parse_image(data, rng):
        image = ops.convert_image_dtype(ops.decode_png(data, channels=3), np.float32)
        image = ops.random_flip_left_right(ops.resize(image, (32, 32)), rng)
        return ops.per_image_standardization(image)

    ds = tfdata.Dataset.from_tensor_slices(np.array(encoded, dtype=object)).map(
        parse_image, with_rng=True, seed=3, num_parallel_calls=tfdata.AUTOTUNE).batch(4)
    batch = next(iter(ds))
    assert batch.shape == (4, 32, 32, 3) and batch.dtype == np.float32
    np.testing.assert_allclose(batch.reshape(4, -1).mean(axis=1), 0, atol=1e-5)


def test_bucketing_by_sequence_length():
    lengths = [3, 7, 1, 12, 5, 9, 2]
    ds = tfdata.Dataset.from_generator(lambda: (np.ones(n, np.int64) for n in lengths),
                                       output_signature=TensorSpec((None,), np.int64))
    buckets = ds.bucket_by_sequence_length(lambda x: len(x), bucket_boundaries=[4, 8],
                                           bucket_batch_sizes=[2, 2, 2])
    for batch in buckets:
        assert batch.shape[0] <= 2
        assert (batch.sum(axis=1) > 0).all()


def test_fixed_length_records_like_cifar(tmp_path):
    record = 1 + 32 * 32 * 3
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, (5, record), dtype=np.uint8)
    (tmp_path / "data_batch_1.bin").write_bytes(data.tobytes())
    ds = tfdata.FixedLengthRecordDataset(str(tmp_path / "data_batch_1.bin"), record).map(
        lambda r: (np.frombuffer(r, np.uint8)[0], np.frombuffer(r, np.uint8)[1:].reshape(3, 32, 32).transpose(1, 2, 0)))
    labels = [int(label) for label, _ in ds]
    assert labels == data[:, 0].tolist()


@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_save_then_load(tmp_path, compression):
    ds = tfdata.Dataset.range(10).map(lambda x: {"x": x, "y": x * 2})
    if compression:
        with pytest.raises(ValueError):
            ds.save(str(tmp_path / "s"), compression=compression)
        return
    ds.save(str(tmp_path / "s"))
    loaded = tfdata.Dataset.load(str(tmp_path / "s"))
    assert [int(e["y"]) for e in loaded] == list(range(0, 20, 2))
