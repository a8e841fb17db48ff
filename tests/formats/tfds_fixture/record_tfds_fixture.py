"""Prepare a tiny dataset with the real ``tensorflow_datasets`` (run with a separate Python that has
tensorflow-cpu, tensorflow-datasets and array-record; never a dependency of the project):

    python tests/formats/tfds_fixture/record_tfds_fixture.py

It writes ``jaxfeed_tiny/1.0.0`` (TFRecord shards) and ``jaxfeed_tiny_ar/1.0.0`` (ArrayRecord shards) under
``tests/data/tfds`` and ``expected.npz`` with every example as TFDS itself decodes it, per split.
"""

import json
import os
import shutil

import numpy as np
import tensorflow_datasets as tfds

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "..", "data", "tfds")
NAMES = ["cat", "dog", "bird"]


def example(i):
    rng = np.random.default_rng(i)
    return {
        "image": rng.integers(0, 256, (6, 5, 3), dtype=np.uint8),
        "mask": rng.integers(0, 256, (6, 5, 1), dtype=np.uint8),
        "label": NAMES[i % 3],
        "text": f"example number {i} ü",
        "id": i * 1000,
        "score": np.float32(i / 7),
        "values": rng.normal(size=(i % 4,)).astype(np.float32),
        "tokens": list(range(i % 5)),
        "boxes": {"xmin": [0.1 * (i % 3)] * (i % 3), "label": [j % 3 for j in range(i % 3)]},
    }


class Tiny(tfds.core.GeneratorBasedBuilder):
    name = "jaxfeed_tiny"
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
            "image": tfds.features.Image(shape=(6, 5, 3), encoding_format="png"),
            "mask": tfds.features.Image(shape=(6, 5, 1), encoding_format="png"),
            "label": tfds.features.ClassLabel(names=NAMES),
            "text": tfds.features.Text(),
            "id": np.int64,
            "score": np.float32,
            "values": tfds.features.Tensor(shape=(None,), dtype=np.float32),
            "tokens": tfds.features.Sequence(np.int64),
            "boxes": tfds.features.Sequence({"xmin": np.float32, "label": tfds.features.ClassLabel(names=NAMES)}),
        }), supervised_keys=("image", "label"))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(range(0, 23)), "test": self._generate_examples(range(100, 105))}

    def _generate_examples(self, ids):
        for i in ids:
            yield i, example(i)


class TinyAr(Tiny):
    name = "jaxfeed_tiny_ar"


def main():
    if os.path.exists(OUT):
        shutil.rmtree(OUT)
    expected = {}
    for cls, name, fmt in ((Tiny, "jaxfeed_tiny", "tfrecord"), (TinyAr, "jaxfeed_tiny_ar", "array_record")):
        builder = cls(data_dir=OUT, file_format=fmt)
        builder.download_and_prepare(download_config=tfds.download.DownloadConfig(num_shards=3, try_download_gcs=False))
        for split in ("train", "test", "train[:10%]", "train[5:9]+test[-2:]", "train[-30%:]"):
            if fmt == "array_record":  # TFDS reads ArrayRecord only as a random-access source
                examples = list(builder.as_data_source(split=split))
            else:
                examples = tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False))
            for i, ex in enumerate(examples):
                for key, value in _flat(ex):
                    expected[f"{name}|{split}|{i}|{key}"] = np.asarray(value)
    shutil.rmtree(os.path.join(OUT, "downloads"), ignore_errors=True)
    np.savez_compressed(os.path.join(OUT, "expected.npz"), **expected)
    print(json.dumps(sorted({k.rsplit("|", 2)[0] for k in expected})))


def _flat(ex, prefix=""):
    for k, v in ex.items():
        if isinstance(v, dict):
            yield from _flat(v, f"{prefix}{k}/")
        else:
            yield f"{prefix}{k}", v


if __name__ == "__main__":
    main()
