"""``Dataset``: the public face of the graph. Each method makes a node; nothing runs until iteration.

Names, arguments and defaults follow ``tf.data.Dataset``. The node classes (in ``nodes/``) validate their
arguments and know their element spec and cardinality; their iterators (in ``iterators/``) run them.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from . import graph
from .iterators import catalog  # noqa: F401  (registers every iterator: engine/registry.py)
from .nodes import dataset_class
from .nodes.base import INFINITE, UNKNOWN, Node
from .nodes.common import AUTOTUNE, SHARD_HINT
from .options import Options

INFINITE_CARDINALITY = INFINITE
UNKNOWN_CARDINALITY = UNKNOWN


class Dataset:
    """An immutable, lazy pipeline of elements (see module docstring)."""

    __slots__ = ("_node", "_iterations", "_learned", "__weakref__")

    def __init__(self, node: Node):
        if not isinstance(node, Node):
            raise TypeError(f"Dataset wraps a graph node, got {type(node).__name__}")
        self._node = node
        # How many iterators this object has made: each one is a new epoch for the random stages
        # inside (tf.data's seed generator does the same per dataset).
        self._iterations = 0
        # What its iterators' AUTOTUNE tuners learned, for the next one (autotune.py, step 5): run-time
        # state like the epoch count, not part of the pipeline's definition.
        self._learned: dict = {}

    @property
    def node(self) -> Node:
        """The root of this dataset's graph (read-only): what passes, auto-shard, checkpoints and the
        determinism tools work on."""
        return self._node

    # ================================================================ sources
    @staticmethod
    def range(*args, output_type=np.int64, name=None) -> "Dataset":
        from .nodes.range import Range

        return _named(Range(*args, output_type=output_type), name)

    @staticmethod
    def from_tensors(tensors, name=None) -> "Dataset":
        from .nodes.tensor_slices import Tensors

        return _named(Tensors(tensors), name)

    @staticmethod
    def from_tensor_slices(tensors, name=None) -> "Dataset":
        from .nodes.tensor_slices import TensorSlices

        return _named(TensorSlices(tensors), name)

    @staticmethod
    def from_generator(generator, output_types=None, output_shapes=None, args=None, output_signature=None,
                       name=None, *, replayable=False) -> "Dataset":
        """tf.data's ``from_generator``. ``replayable=True`` declares that calling ``generator(*args)`` again
        yields the same sequence: its iterators can then be saved (a restore calls it again and skips what
        was consumed). Without it, saving refuses unless ``experimental_external_state_policy`` is WARN or
        IGNORE, as in tf.data."""
        from .nodes.generator import Generator

        return _named(Generator(generator, output_types, output_shapes, args, output_signature,
                                replayable=replayable), name)

    @staticmethod
    def list_files(file_pattern, shuffle=None, seed=None, name=None) -> "Dataset":
        from .nodes.list_files import ListFiles

        files = Dataset(ListFiles(file_pattern))
        if shuffle is None or shuffle:
            files = files.shuffle(max(files._node.length(), 1), seed=seed)
        return _named(files._node, name)

    @staticmethod
    def zip(*args, datasets=None, name=None) -> "Dataset":
        from .nodes.zip import Zip

        if datasets is not None and args:
            raise TypeError("Dataset.zip: give the datasets either positionally or as `datasets=`, not both")
        structure = datasets if datasets is not None else (args[0] if len(args) == 1 else args)
        return _named(Zip(structure), name)

    @staticmethod
    def sample_from_datasets(datasets, weights=None, seed=None, stop_on_empty_dataset=False,
                             rerandomize_each_iteration=None) -> "Dataset":
        from .nodes.sample import SampleFromDatasets

        if isinstance(weights, Dataset):  # a distribution per draw (tf.data's rejection_resample uses this)
            from .nodes.weighted_choice import sample_with_weight_dataset

            return sample_with_weight_dataset(list(datasets), weights, seed, stop_on_empty_dataset,
                                              rerandomize_each_iteration)
        return Dataset(SampleFromDatasets([_node_of(d, "sample_from_datasets") for d in datasets], weights,
                                          seed, stop_on_empty_dataset, rerandomize_each_iteration))

    @staticmethod
    def choose_from_datasets(datasets, choice_dataset, stop_on_empty_dataset=True) -> "Dataset":
        from .nodes.sample import ChooseFromDatasets

        return Dataset(ChooseFromDatasets([_node_of(d, "choose_from_datasets") for d in datasets],
                                          _node_of(choice_dataset, "choose_from_datasets"),
                                          stop_on_empty_dataset))

    # ================================================================ element-wise
    def map(self, map_func, num_parallel_calls=None, deterministic=None, synchronous=None,
            use_unbounded_threadpool=False, name=None, *, vectorized=False, executor=None,
            with_rng=False, seed=None, stateful=None, output_signature=None) -> "Dataset":
        """tf.data's ``map``, plus jaxfeed's keyword-only extensions:

        - ``output_signature``: the TensorSpec structure every result has; it becomes the element spec
          and each result is checked against it (InvalidArgumentError naming map and the element).
          Without it the spec has the structure, dtypes and ranks of one sample result and every
          dimension unknown (see README, "Differences from tf.data").

        - ``vectorized=True``: ``map_func`` works on batches as well as on single elements (it is
          elementwise along axis 0), so a following ``batch`` may run it once per batch.
        - ``executor="process"``: run the function in worker processes (for Python code that holds the
          GIL); ``"thread"`` uses threads. Needs ``num_parallel_calls``. Left unset (and
          ``Options.execution.executor`` too), a map with ``num_parallel_calls=AUTOTUNE`` lets AUTOTUNE
          choose: a probe of its first elements moves a function that holds the GIL to worker processes and
          keeps one that releases it (numpy, I/O) on threads -- the elements are the same either way;
          ``explain()`` and the statistics say which and why. A function whose side effects must happen
          in this process (appending to a list, counting) says ``stateful=True`` or
          ``executor="thread"``. Other maps run on threads.
        - ``with_rng=True``: call ``map_func(*element, rng)`` with a ``numpy.random.Generator`` derived from
          (seed, element position): random augmentation that is identical under any parallelism.
        - ``stateful``: declare whether the function keeps hidden state (overrides determinism's
          inspection of the function).

        tf.data's ``synchronous=True`` keeps a map without ``num_parallel_calls`` on the consumer's thread
        with nothing buffered: jaxfeed never parallelises such a map, so it always holds; with
        ``num_parallel_calls`` it is a ValueError, as in tf.data. ``use_unbounded_threadpool=True``: this
        map's threads are not capped by ``Options.threading.private_threadpool_size`` (AUTOTUNE's limit
        still is, as in tf.data).
        """
        from .nodes.map import Map

        if synchronous and num_parallel_calls is not None:
            raise ValueError("`synchronous` is not supported with `num_parallel_calls`, but "
                             f"`num_parallel_calls` was set to {num_parallel_calls}")
        return _named(Map(self._node, map_func, num_parallel_calls, deterministic, vectorized=vectorized,
                          executor=executor, with_rng=with_rng, seed=seed, stateful=stateful,
                          output_signature=output_signature,
                          use_unbounded_threadpool=use_unbounded_threadpool), name)

    def filter(self, predicate, name=None) -> "Dataset":
        from .nodes.filter import Filter

        return _named(Filter(self._node, predicate), name)

    def flat_map(self, map_func, name=None, *, output_signature=None) -> "Dataset":
        """tf.data's ``flat_map``; ``output_signature`` (jaxfeed) declares the spec of the elements of the
        datasets ``map_func`` returns, checked on each of them (as ``map``'s)."""
        from .nodes.flat_map import FlatMap

        return _named(FlatMap(self._node, map_func, output_signature), name)

    def interleave(self, map_func, cycle_length=None, block_length=None, num_parallel_calls=None,
                   deterministic=None, name=None, *, output_signature=None) -> "Dataset":
        """tf.data's ``interleave``; ``output_signature`` as in ``flat_map``."""
        from .nodes.interleave import Interleave

        return _named(Interleave(self._node, map_func, cycle_length, block_length, num_parallel_calls,
                                 deterministic, output_signature), name)

    def scan(self, initial_state, scan_func, name=None, *, output_signature=None) -> "Dataset":
        """tf.data's ``scan``; ``output_signature`` (jaxfeed) declares the spec of the outputs (not of the
        state), checked on each of them (as ``map``'s)."""
        from .nodes.scan import Scan

        return _named(Scan(self._node, initial_state, scan_func, output_signature), name)

    def enumerate(self, start=0, name=None) -> "Dataset":
        from .nodes.common import check_int

        start = check_int(start, "start", "enumerate")
        counter = Dataset.counter(start)  # infinite: the zip has the input's cardinality, INFINITE included
        return _named(Dataset.zip((counter, self))._node, name)

    def take_while(self, predicate, name=None) -> "Dataset":
        from .nodes.take_while import TakeWhile

        return _named(TakeWhile(self._node, predicate), name)

    def unique(self, name=None) -> "Dataset":
        from .nodes.unique import Unique

        return _named(Unique(self._node), name)

    def ignore_errors(self, log_warning=False, name=None) -> "Dataset":
        from .nodes.ignore_errors import IgnoreErrors

        return _named(IgnoreErrors(self._node, log_warning), name)

    # ================================================================ batching
    def batch(self, batch_size, drop_remainder=False, num_parallel_calls=None, deterministic=None,
              name=None) -> "Dataset":
        from .nodes.batch import Batch

        return _named(Batch(self._node, batch_size, drop_remainder, num_parallel_calls, deterministic), name)

    def padded_batch(self, batch_size, padded_shapes=None, padding_values=None, drop_remainder=False,
                     name=None) -> "Dataset":
        from .nodes.padded_batch import PaddedBatch

        return _named(PaddedBatch(self._node, batch_size, padded_shapes, padding_values, drop_remainder), name)

    def assert_cardinality(self, expected_cardinality, name=None) -> "Dataset":
        """The elements, with ``expected_cardinality`` as the static cardinality; iterating raises
        FailedPreconditionError where the count proves otherwise (``nodes/assert_cardinality.py``)."""
        from .nodes.assert_cardinality import AssertCardinality

        return _named(AssertCardinality(self._node, expected_cardinality), name)

    def ragged_batch(self, batch_size, drop_remainder=False, row_splits_dtype=np.int64, name=None) -> "Dataset":
        """Batches whose components of unknown shape are ``RaggedValue``s (row splits), no padding
        (``nodes/ragged_batch.py``)."""
        from .nodes.ragged_batch import RaggedBatch

        return _named(RaggedBatch(self._node, batch_size, drop_remainder, row_splits_dtype), name)

    def sparse_batch(self, batch_size, row_shape, name=None) -> "Dataset":
        """Batches as ``SparseValue``s of dense shape ``[n] + row_shape`` (``nodes/ragged_batch.py``)."""
        from .nodes.ragged_batch import SparseBatch

        return _named(SparseBatch(self._node, batch_size, row_shape), name)

    def unbatch(self, name=None) -> "Dataset":
        from .nodes.unbatch import Unbatch

        return _named(Unbatch(self._node), name)

    def rebatch(self, batch_size, drop_remainder=False, name=None) -> "Dataset":
        from .nodes.rebatch import Rebatch

        return _named(Rebatch(self._node, batch_size, drop_remainder), name)

    def window(self, size, shift=None, stride=1, drop_remainder=False, name=None) -> "Dataset":
        from .nodes.window import Window

        return _named(Window(self._node, size, shift, stride, drop_remainder), name)

    def group_by_window(self, key_func, reduce_func, window_size=None, window_size_func=None,
                        name=None) -> "Dataset":
        from .nodes.group_by_window import GroupByWindow

        return _named(GroupByWindow(self._node, key_func, reduce_func, window_size, window_size_func), name)

    def bucket_by_sequence_length(self, element_length_func, bucket_boundaries, bucket_batch_sizes,
                                  padded_shapes=None, padding_values=None, pad_to_bucket_boundary=False,
                                  no_padding=False, drop_remainder=False, name=None) -> "Dataset":
        from .nodes.group_by_window import bucket_by_sequence_length

        return bucket_by_sequence_length(self, element_length_func, bucket_boundaries, bucket_batch_sizes,
                                         padded_shapes, padding_values, pad_to_bucket_boundary, no_padding,
                                         drop_remainder)

    # ================================================================ order and count
    def shuffle(self, buffer_size, seed=None, reshuffle_each_iteration=None, name=None) -> "Dataset":
        from .nodes.shuffle import Shuffle

        return _named(Shuffle(self._node, buffer_size, seed, reshuffle_each_iteration), name)

    def repeat(self, count=None, name=None) -> "Dataset":
        from .nodes.repeat import Repeat

        return _named(Repeat(self._node, count), name)

    def take(self, count, name=None) -> "Dataset":
        from .nodes.take import Take

        return _named(Take(self._node, count), name)

    def skip(self, count, name=None) -> "Dataset":
        from .nodes.take import Skip

        return _named(Skip(self._node, count), name)

    def shard(self, num_shards, index, name=None) -> "Dataset":
        from .nodes.shard import Shard

        return _named(Shard(self._node, num_shards, index), name)

    def concatenate(self, dataset, name=None) -> "Dataset":
        from .nodes.concatenate import Concatenate

        return _named(Concatenate(self._node, _node_of(dataset, "concatenate")), name)

    # ================================================================ performance and state
    def prefetch(self, buffer_size, name=None) -> "Dataset":
        from .nodes.prefetch import Prefetch

        if buffer_size is None:  # tf.data's rule (prefetch_op.py): None means AUTOTUNE
            buffer_size = AUTOTUNE
        return _named(Prefetch(self._node, buffer_size), name)

    def cache(self, filename="", name=None) -> "Dataset":
        from .nodes.cache import Cache

        return _named(Cache(self._node, filename), name)

    def with_options(self, options: Options, name=None) -> "Dataset":
        from .nodes.with_options import WithOptions

        return _named(WithOptions(self._node, options), name)

    def options(self) -> Options:
        from .passes.options_pass import effective_options

        return effective_options(self._node)

    def apply(self, transformation_func: Callable[["Dataset"], "Dataset"]) -> "Dataset":
        result = transformation_func(self)
        if not isinstance(result, Dataset):
            raise TypeError("`transformation_func` must return a Dataset object, got "
                            f"{type(result).__name__}")
        return result

    # ================================================================ inspection
    @property
    def element_spec(self):
        return self._node.element_spec

    def cardinality(self) -> int:
        return self._node.cardinality()

    def __len__(self):
        n = self.cardinality()
        if n == INFINITE:
            raise TypeError("The dataset is infinite.")
        if n == UNKNOWN:
            raise TypeError("The dataset length is unknown.")
        return n

    def __bool__(self):
        return True  # never fall back to __len__, which may raise

    def graph(self) -> str:
        """The graph as an indented tree of nodes with their arguments."""
        return graph.describe(self._node)

    def explain(self, options: Options | None = None) -> str:
        """The graph as it will run: the rewritten tree, then what each pass changed and why, and the
        executors AUTOTUNE chose for parallel maps once an iterator ran them."""
        from .engine.executor_choice import chosen_executors
        from .passes import run_passes

        root, _, log = run_passes(self._node, options)
        chosen = chosen_executors(self._learned, root)
        return f"{graph.describe(root)}\n\nRewrites:\n{log}" + (f"\n\nChosen when run:\n{chosen}" if chosen else "")

    def fingerprint(self) -> str:
        return graph.fingerprint(self._node)

    def __repr__(self):
        return f"<Dataset element_spec={_spec_repr(self)}>\n{self.graph()}"

    # ================================================================ iteration
    def __iter__(self):
        from .dataset_iterator import DatasetIterator

        return DatasetIterator(self)

    def as_numpy_iterator(self):
        return iter(self)

    def as_numpy(self) -> list:
        """All elements, as a list (convenient in tests)."""
        return list(self)

    def make_iterator(self, state=None, options: Options | None = None):
        """An iterator, optionally restored from a state saved by ``get_state``."""
        from .dataset_iterator import DatasetIterator

        return DatasetIterator(self, state=state, options=options)

    def reduce(self, initial_state, reduce_func):
        """Fold the elements in order: ``reduce_func(state, element)`` (a tuple element is passed whole, as
        tf.data does); the new state must keep the initial state's structure and dtypes (TypeError)."""
        from .nodes.scan import check_new_state, leaf_dtypes
        from .structure import normalize, normalize_data

        state = normalize_data(initial_state, "reduce initial_state")
        dtypes = leaf_dtypes(state)
        with iter(self) as it:
            for block in iter(lambda: it.next_many(1024), []):
                for element in block:
                    new_state = normalize(reduce_func(state, element), "result of reduce_func")
                    check_new_state(state, dtypes, new_state, "reduce")
                    state = new_state
        return state

    def get_single_element(self, name=None):
        from .errors import InvalidArgumentError

        with iter(self) as it:
            head = it.next_many(2)
            if len(head) < 2:
                head += it.next_many(2 - len(head)) if head else []
        if not head:
            raise InvalidArgumentError("Dataset was empty.", "get_single_element")
        if len(head) > 1:
            raise InvalidArgumentError("Dataset had more than one element.", "get_single_element")
        return head[0]

    def rejection_resample(self, class_func, target_dist, initial_dist=None, seed=None, name=None) -> "Dataset":
        """``(class, element)`` pairs resampled towards ``target_dist`` (``transformations.rejection_resample``)."""
        from .transformations import rejection_resample

        return self.apply(rejection_resample(class_func, target_dist, initial_dist, seed))

    # ================================================================ saving
    def save(self, path, compression=None, shard_func=None, checkpoint_args=None) -> None:
        """Write the elements under ``path`` (any fsspec URL) for ``Dataset.load`` (``saved_dataset.py``)."""
        from . import saved_dataset

        saved_dataset.save(self, path, compression, shard_func, checkpoint_args)

    @staticmethod
    def load(path, element_spec=None, compression=None, reader_func=None) -> "Dataset":
        """The elements a ``save`` wrote under ``path``, in the saved order unless ``reader_func`` decides."""
        from . import saved_dataset

        return saved_dataset.load(path, element_spec, compression, reader_func)

    def snapshot(self, path, compression="AUTO", reader_func=None, shard_func=None, name=None) -> "Dataset":
        """Write the first complete pass under ``path``; later passes read it (``nodes/snapshot.py``)."""
        from .nodes.snapshot import Snapshot

        return _named(Snapshot(self._node, path, compression, reader_func, shard_func), name)

    # tf.data also exposes these as static constructors on Dataset
    @staticmethod
    def random(seed=None, rerandomize_each_iteration=None, name=None) -> "Dataset":
        """An infinite stream of uniformly random int64 values (``nodes/random.py``)."""
        from .nodes.random import Random

        return _named(Random(seed, rerandomize_each_iteration), name)

    @staticmethod
    def counter(start=0, step=1, dtype=np.int64, name=None) -> "Dataset":
        """``start, start + step, ...`` forever (a negative step counts down; 0 repeats ``start``);
        cardinality INFINITE_CARDINALITY, as tf.data's."""
        from .nodes.range import Counter

        return _named(Counter(start, step, output_type=dtype), name)


dataset_class.set_dataset_class(Dataset)  # for the nodes that wrap nodes in a Dataset (they cannot import this)


def _named(node: Node, name) -> Dataset:
    if name is not None:
        node.name = str(name)
    return Dataset(node)


def _node_of(value, what: str) -> Node:
    if not isinstance(value, Dataset):
        raise TypeError(f"{what}: expected a Dataset, got {type(value).__name__}")
    return value._node


def _spec_repr(ds) -> str:
    try:
        return repr(ds.element_spec)
    except Exception as e:  # a spec that needs user code may fail; the repr must not
        return f"<unavailable: {type(e).__name__}>"


__all__ = ["Dataset", "AUTOTUNE", "SHARD_HINT", "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY"]
