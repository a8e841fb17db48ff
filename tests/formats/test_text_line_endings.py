"""TextLineDataset's ``\\r`` rule, as TensorFlow 2.21 gives it (docs/tf-behaviour.md#text-line).

Every ``\\r`` byte is dropped; lines end at ``\\n``; what follows the last ``\\n`` is a line only if it holds a
byte other than ``\\r`` (``b"a\\n\\r"`` is one line, ``b"\\r"`` none). The expected values below are what
``tf.data.TextLineDataset`` returned for the same bytes (uncompressed, GZIP and ZLIB; ``buffer_size`` None, 1,
2, 3 and 5 all alike); the tests do not import TensorFlow.
"""

import gzip
import zlib

import pytest

from jaxfeed.formats import TextLineDataset
from jaxfeed.pipeline.testing import assert_resumes_everywhere

# (file bytes, TF 2.21's lines)
TF_LINES = [
    (b"a\n\r", [b"a"]),
    (b"a\n\r\r", [b"a"]),
    (b"\r", []),
    (b"\r\r", []),
    (b"\n\r", [b""]),
    (b"a\rb\n", [b"ab"]),
    (b"a\r\n", [b"a"]),
    (b"a\r", [b"a"]),
    (b"a\r\r", [b"a"]),
    (b"\r\n", [b""]),
    (b"a\n\r\nb", [b"a", b"", b"b"]),
    (b"\r\r\n", [b""]),
    (b"a\n\nb\n", [b"a", b"", b"b"]),
    (b"a\n\n\nb", [b"a", b"", b"", b"b"]),
    (b"ab", [b"ab"]),
    (b"", []),
    (b"\n", [b""]),
    (b"\n\n", [b"", b""]),
    (b"a\r\rb\r\n", [b"ab"]),
    (b"\ra", [b"a"]),
    (b"a\n\rb", [b"a", b"b"]),
    (b"a\n\r\r\n", [b"a", b""]),
    (b"x\r\ny\r", [b"x", b"y"]),
    (b"a\n \r", [b"a", b" "]),
    (b"ab\r\ncd\r\r\n\r\nef\n\r\r\ng\rh\n\r", [b"ab", b"cd", b"", b"ef", b"", b"gh"]),
]

COMPRESS = {"": lambda b: b, "GZIP": gzip.compress, "ZLIB": zlib.compress}


def write(tmp_path, name, data: bytes, compression: str = "") -> str:
    path = tmp_path / name
    path.write_bytes(COMPRESS[compression](data))
    return str(path)


@pytest.mark.parametrize("data,lines", TF_LINES)
@pytest.mark.parametrize("compression", ["", "GZIP", "ZLIB"])
@pytest.mark.parametrize("buffer_size", [None, 1, 2, 3])
def test_lines_and_carriage_returns_as_tf(tmp_path, data, lines, compression, buffer_size):
    path = write(tmp_path, "t", data, compression)
    assert list(TextLineDataset(path, compression or None, buffer_size=buffer_size)) == lines


# several files, each read on its own: a file of only "\r" gives nothing, a trailing "\r" no empty line
FILES = [b"a\n\r", b"\r", b"b\r\n\r\r", b"", b"\r\rc\rd\r\n\r\n\r", b"e"]
TF_FILES_LINES = [b"a", b"b", b"cd", b"", b"e"]
TF_FILES_LINES_PARALLEL_2 = [b"a", b"b", b"cd", b"e", b""]  # num_parallel_reads=2 (interleaved, cycle 2)


@pytest.mark.parametrize("compression", ["", "GZIP", "ZLIB"])
@pytest.mark.parametrize("buffer_size", [None, 1, 2, 5])
def test_several_files_as_tf(tmp_path, compression, buffer_size):
    names = [write(tmp_path, f"f{i}", data, compression) for i, data in enumerate(FILES)]
    assert list(TextLineDataset(names, compression or None, buffer_size=buffer_size)) == TF_FILES_LINES
    assert list(TextLineDataset(names, compression or None, buffer_size=buffer_size,
                                num_parallel_reads=2)) == TF_FILES_LINES_PARALLEL_2


@pytest.mark.parametrize("compression", ["", "GZIP"])
def test_trailing_carriage_returns_resume_everywhere(tmp_path, compression):
    names = [write(tmp_path, f"f{i}", data, compression) for i, data in enumerate(FILES)]
    assert_resumes_everywhere(lambda: TextLineDataset(names, compression or None, buffer_size=2))
