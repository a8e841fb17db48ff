"""``OverlapJudge`` (engine/overlap.py): when a producer thread pays for the stage it runs ahead of."""

import pytest

from jaxfeed.pipeline.engine import overlap
from jaxfeed.pipeline.engine.overlap import OverlapJudge


def feed(judge, n, away, making):
    return [judge.observe(away, making) for _ in range(n)]


def test_a_consumer_that_does_next_to_nothing_moves_the_stage_on_demand_after_one_window():
    judge = OverlapJudge(window=4)
    assert feed(judge, 3, away=0.01, making=1.0) == [False] * 3
    assert not judge.on_demand
    assert judge.observe(0.01, 1.0) is True
    assert judge.on_demand and judge.moves == 1
    assert judge.last_ratio == pytest.approx(0.01)


def test_a_consumer_that_works_between_calls_keeps_the_thread():
    judge = OverlapJudge(window=4)
    assert not any(feed(judge, 40, away=overlap.TO_DEMAND * 1.5, making=1.0))
    assert not judge.on_demand and judge.moves == 0


def test_the_decision_is_on_the_window_sums_not_single_calls():
    judge = OverlapJudge(window=4)
    # three idle calls and one long piece of work: 3 * 0 + 1 * 0.8 over 4 * 1.0 is 20%: not idle
    assert feed(judge, 3, away=0.0, making=1.0) + [judge.observe(0.8, 1.0)] == [False] * 4
    assert not judge.on_demand


def test_back_to_the_thread_once_the_consumer_works_and_the_next_move_needs_twice_the_window():
    judge = OverlapJudge(window=4)
    feed(judge, 4, away=0.0, making=1.0)
    assert judge.on_demand
    # between the thresholds: stays on demand (hysteresis)
    assert not any(feed(judge, 8, away=(overlap.TO_DEMAND + overlap.TO_THREAD) / 2, making=1.0))
    assert judge.on_demand
    assert feed(judge, 4, away=overlap.TO_THREAD * 2, making=1.0)[-1] is True
    assert not judge.on_demand and judge.window == 8
    assert not any(feed(judge, 7, away=0.0, making=1.0))  # 7 idle calls no longer decide
    assert judge.observe(0.0, 1.0) and judge.on_demand


def test_the_window_stops_growing():
    judge = OverlapJudge(window=overlap.MAX_WINDOW // 2)
    for _ in range(3):
        feed(judge, judge.window, away=0.0, making=1.0)
        feed(judge, judge.window, away=1.0, making=1.0)
    assert judge.window == overlap.MAX_WINDOW


def test_nothing_measured_either_way_is_not_counted_and_nothing_to_make_counts_as_busy():
    judge = OverlapJudge(window=2)
    assert not any(feed(judge, 5, away=0.0, making=0.0))
    assert judge.last_ratio is None
    feed(judge, 2, away=0.01, making=0.0)
    assert judge.last_ratio == float("inf") and not judge.on_demand


def test_describe_says_where_and_why():
    judge = OverlapJudge(window=1)
    assert judge.describe() == "thread"
    judge.observe(0.0, 1.0)
    assert judge.describe("step").startswith("on demand (read on the consumer's thread")
    assert "0% of the time making each step took" in judge.describe("step")
    judge.observe(1.0, 1.0)
    assert judge.describe().startswith("thread (back from on demand")
