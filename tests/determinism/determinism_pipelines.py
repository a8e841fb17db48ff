"""Pipelines for the checker's command-line tests (``module:function`` targets)."""


from jaxfeed.pipeline import Dataset


def good():
    return Dataset.range(30).shuffle(10, seed=1).map(lambda x: x * 2, num_parallel_calls=2).batch(4)


def unseeded_shuffle():
    return Dataset.range(30).map(lambda x: x * 2).shuffle(10).batch(4)


def not_a_dataset():
    return [1, 2, 3]


class UnevenWork:
    """A map function whose 4th call finishes only after the 5th call has started (plus 50 ms): with two or
    more workers and deterministic=False, later elements overtake it; in order otherwise. No deadlock: the
    wait gives up after 2 s (a single worker)."""

    def __init__(self):
        import threading

        self.lock = threading.Lock()
        self.calls = 0
        self.fifth_started = threading.Event()

    def __call__(self, x):
        import time

        with self.lock:
            n = self.calls
            self.calls += 1
        if n == 4:
            self.fifth_started.set()
        if n == 3:
            self.fifth_started.wait(2.0)
            time.sleep(0.05)
        return x
