"""What a rewrite test compares: the plain graph (no rewrites), the rewrites explain() shows, every element
and every error in order."""

from jaxfeed.pipeline import Options
from jaxfeed.pipeline.testing import assert_elements_equal


def rewrites(ds):
    return str(ds.explain())


def plain(ds):
    opts = Options()
    opts.experimental_optimization.apply_default_optimizations = False
    return ds.with_options(opts)


def run_collecting_errors(ds):
    """Every element and every error (by type and message) in order, continuing after errors."""
    out, it = [], iter(ds)
    while True:
        try:
            out.append(("ok", next(it)))
        except StopIteration:
            return out
        except Exception as e:  # noqa: BLE001
            out.append(("error", type(e).__name__, str(e)))


def assert_same_with_errors(ds):
    expected, actual = run_collecting_errors(plain(ds)), run_collecting_errors(ds)
    assert [a[0] for a in actual] == [e[0] for e in expected]
    for a, e in zip(actual, expected):
        if a[0] == "ok":
            assert_elements_equal([a[1]], [e[1]])
        else:
            assert a == e
