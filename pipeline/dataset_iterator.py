"""``DatasetIterator``: what ``iter(dataset)`` returns.

It runs the passes over the dataset's graph, builds the iterator tree in a fresh context and exposes the
tf.data iterator protocol (``next``, ``get_next``, ``get_next_as_optional``), saved state
(``get_state``/``set_state``), statistics and the record of skipped errors. Closing it (explicitly, as a
context manager, or by garbage collection) stops every thread and process of the tree.
"""

from __future__ import annotations

from . import graph
from .checkpoint import compatibility
from .checkpoint.compatibility import STATE_VERSION
from .errors import FailedPreconditionError, InvalidArgumentError, OpError, OutOfRangeError
from .engine.blocks import restored_error, saved_error
from .engine.context import IteratorContext
from .engine import interrupts
from .iterators.base import Iterator
from .passes import run_passes


class Optional:
    """tf.experimental.Optional: a value or nothing (``get_next_as_optional``)."""

    __slots__ = ("_value", "_has")

    def __init__(self, value=None, has_value=False):
        self._value, self._has = value, has_value

    def has_value(self) -> bool:
        return self._has

    def get_value(self):
        if not self._has:
            raise InvalidArgumentError("The Optional does not have a value.", "Optional.get_value")
        return self._value


def build_tree(root, ctx, learned: dict):
    """The iterator tree of the optimized graph ``root`` in ``ctx`` (nothing started). AUTOTUNE knobs start
    from ``learned``, what the previous iterator of the same Dataset left there, matched by their node's place
    in the graph (the same Dataset and options give the same graph). Elastic resume builds a worker's tree
    this way too, so that it holds the same kinds of iterators (a parallel map's executor choice included)."""
    places = {id(node): i for i, node in enumerate(graph.walk(root))}
    ctx._shared["autotune_learned"] = (learned, places)
    return ctx.build(root)


def _restore_tree(it, root_state) -> None:
    """``it.set_state(root_state)``; a state that does not fit an iterator (a missing key, a wrong type:
    a state from another jaxfeed version, or edited by hand) is an InvalidArgumentError naming the node."""
    try:
        it.set_state(root_state)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as e:
        notes = getattr(e, "__notes__", None) or []
        if isinstance(e, OpError) or any("in user function" in n for n in notes):
            raise  # a jaxfeed error, or the user's function failing again on restore (flat_map, interleave)
        raise _unfit_state_error(e) from e


def _restore_deferred(it, state) -> None:
    """The error the root iterator had met past what the last ``next_many`` returned, raised again by the next
    call (a saved state's ``deferred``: a ``Failure``; absent when there was none -- then the root's own
    restored state decides)."""
    error = restored_error(state.get("deferred"), "'deferred'")
    if error is not None:
        it.defer(error)


def _unfit_state_error(exc: BaseException) -> InvalidArgumentError:
    """An InvalidArgumentError for a state that does not fit an iterator: names the innermost iterator
    whose ``set_state`` failed (found in the traceback) and what was wrong."""
    label, tb = None, exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        owner = frame.f_locals.get("self")
        if frame.f_code.co_name == "set_state" and isinstance(owner, Iterator):
            label = owner.node.label()
        tb = tb.tb_next
    what = f"missing entry {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
    where = f"the saved state of {label}" if label else "the saved state"
    return InvalidArgumentError(f"Iterator state does not fit this pipeline's iterators: {where} is not what "
                                f"this jaxfeed's iterator expects ({what}). Was it written by another jaxfeed "
                                "version, or edited?", label or "set_state")


def _start_ahead(it) -> None:
    """``Options.experimental_warm_start``: start every stage's background work now, inputs before the stages
    that read them (a started stage reads its input from its own thread; iterators are not thread-safe, so
    nothing may still be starting below it)."""
    for child in it.children():
        if child is not None:
            _start_ahead(child)
    it.start_ahead()


def _refuse_closed(*_):
    raise FailedPreconditionError("The iterator is closed.", "iterator")


class DatasetIterator:
    def __init__(self, dataset, state: dict | None = None, options=None):
        self._dataset = dataset
        iteration = dataset._iterations
        dataset._iterations += 1
        root, effective, log = run_passes(dataset._node, options)
        self.rewrites = log
        self.graph = root
        self._fingerprint = graph.fingerprint(dataset._node)
        self._signature = None  # the graph signature saved with each state, made at the first save
        stats = None
        if effective.experimental_statistics:
            from .stats import StatsRecorder

            stats = StatsRecorder()
        self._closed = False
        self._it = None
        if state is not None:
            state = compatibility.accept(state, dataset._node, self._fingerprint)
            iteration = int(state.get("iteration", 0))  # random stages must use the saved epoch key
        self._ctx = IteratorContext(effective, iteration=(iteration,), stats=stats)
        self._it = build_tree(root, self._ctx, dataset._learned)
        if state is not None:
            _restore_tree(self._it, state["root"])
            _restore_deferred(self._it, state)
        self._it.judge_consumer()
        if effective.experimental_warm_start:
            _start_ahead(self._it)
        interrupts.install()  # Ctrl-C in the middle of a step: raised when it is over (see the module)

    # ------------------------------------------------------------------ protocol
    def __iter__(self):
        return self

    def __next__(self):
        try:
            return self._it.next()
        except StopIteration:
            raise StopIteration from None

    next = __next__

    def get_next(self):
        try:
            return self._it.next()
        except StopIteration:
            raise OutOfRangeError("End of sequence", "get_next") from None

    def get_next_as_optional(self) -> Optional:
        try:
            return Optional(self._it.next(), True)
        except StopIteration:
            return Optional()

    def next_many(self, n: int) -> list:
        """Up to ``n`` elements at once (``[]`` at the end): fewer Python calls per element."""
        return self._it.next_many(n)

    @property
    def element_spec(self):
        return self._dataset.element_spec

    @property
    def root_iterator(self):
        """The root of the running iterator tree, for an outer stage that adapts it (the distributed
        iterator's prefetch to the devices takes the place of the pipeline's last prefetch: ``serve_on_caller``).
        A new tree after ``set_state`` when the saved iteration differs."""
        return self._it

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict:
        """The iterator's position: a small nested dict (see ``jaxfeed.pipeline.checkpoint`` to save it)."""
        self._check_open()
        compatibility.check_external_state(self._dataset._node, self._ctx.options)
        if self._signature is None:
            self._signature = compatibility.graph_signature(self._dataset._node)
        state = {"version": STATE_VERSION, "fingerprint": self._fingerprint,
                 "iteration": self._ctx.iteration[0], "nodes": self._signature, "root": self._it.get_state()}
        if self._it._deferred is not None:  # an error met after what the last next_many returned: raised by
            state["deferred"] = saved_error(self._it._deferred)  # the next call, after a restore too
        return state

    def set_state(self, state: dict) -> None:
        self._check_open()
        state = compatibility.accept(state, self._dataset._node, self._fingerprint)
        iteration = (int(state.get("iteration", 0)),)
        if iteration != self._ctx.iteration:
            # The tree was built with another iteration key; rebuild so random stages use the saved one.
            self._ctx.iteration = iteration
            self._it.close()
            self._it = self._ctx.build(self.graph)
            self._it.judge_consumer()
        _restore_tree(self._it, state["root"])
        _restore_deferred(self._it, state)
        if self._ctx.options.experimental_warm_start:
            _start_ahead(self._it)

    # ------------------------------------------------------------------ reports
    @property
    def skipped(self) -> list:
        """What ``ignore_errors`` skipped: dicts naming the node, the element or file/offset, the error."""
        return self._ctx.skipped

    def stats(self):
        """Per-node statistics and the bottleneck (needs ``Options.experimental_statistics = True``)."""
        if self._ctx.stats is None:
            raise FailedPreconditionError("Statistics are off; set Options().experimental_statistics = True "
                                          "and attach it with with_options.", "stats")
        return self._ctx.stats.report(self._it)

    # ------------------------------------------------------------------ lifetime
    def _check_open(self):
        if self._closed:
            raise FailedPreconditionError("The iterator is closed.", "iterator")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._it is not None:
                self._it.close()
                # From now on the tree refuses to run: its threads and processes are gone, and running it
                # again would wait forever for them (prefetch) or go on past the elements they held (maps).
                # Shadowing the root's methods costs the per-element path nothing, unlike a flag check.
                self._it.next = self._it.next_many = _refuse_closed
        finally:
            self._ctx.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


interrupts.step(DatasetIterator.__next__, DatasetIterator.get_next, DatasetIterator.get_next_as_optional,
                DatasetIterator.next_many, DatasetIterator.get_state, DatasetIterator.set_state)
