"""``engine/worker_safety.py``: which generators may move to a worker process without hiding a change."""

import functools

import numpy as np
import pytest

from jaxfeed.pipeline.engine.worker_safety import safety_reason

CALLS = []
LIMIT = 5
NAMES = ("a", "b")
TABLE = np.zeros(3)


def reads_constants(path):
    for i in range(LIMIT):
        yield NAMES[i % 2], path, np.arange(i)


def nested_generator_expression(n):
    yield from (np.arange(i) for i in range(n))


def appends(x):
    CALLS.append(x)
    yield 1


def assigns_global(x):
    global LIMIT
    LIMIT += 1
    yield 1


def rebinding_closure():
    count = 0

    def gen(x):
        nonlocal count
        count += 1
        yield count

    return gen


def reading_closure():
    step = 3

    def gen(x):
        yield x * step

    return gen


def closure_over_a_list():
    seen = []

    def gen(x):
        seen.append(x)
        yield x

    return gen


def helper(x):
    CALLS.append(x)
    return x


def calls_a_helper_that_appends(x):
    yield helper(x)


def calls_a_pure_helper(x):
    yield double(x)


def double(x):
    return 2 * x


def default_array(x, table=TABLE):
    yield table


def reads_an_array(x):
    yield TABLE[x]


class Source:
    def gen(self):
        yield 1

    def __call__(self):
        yield 1


@pytest.mark.parametrize("fn", [reads_constants, nested_generator_expression, reading_closure(),
                                calls_a_pure_helper, lambda x: iter(range(x))])
def test_generators_that_reach_nothing_changeable_may_move(fn):
    assert safety_reason(fn) is None


@pytest.mark.parametrize("fn,why", [
    (appends, "reads the global 'CALLS': holds a list"),
    (assigns_global, "assigns the global 'LIMIT'"),
    (rebinding_closure(), "rebinds the nonlocal 'count'"),
    (closure_over_a_list(), "closes over 'seen': holds a list"),
    (calls_a_helper_that_appends, "reads the global 'helper': helper reads the global 'CALLS'"),
    (default_array, "default argument that holds a ndarray"),
    (reads_an_array, "reads the global 'TABLE': holds a ndarray"),
    (Source().gen, "not a plain function"),
    (Source(), "not a plain function"),
    (functools.partial(reads_constants, "p"), "not a plain function"),
    (lambda: iter(CALLS), "reads the global 'CALLS'"),
])
def test_generators_that_could_change_this_process_stay(fn, why):
    assert why in safety_reason(fn)


def test_the_bench_generator_may_move():
    from jaxfeed.bench import workloads

    assert safety_reason(workloads.parquet_rows) is None
