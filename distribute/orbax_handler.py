"""Orbax integration: a jaxfeed iterator saved and restored in the same ``ocp.CheckpointManager`` step as
the model (``pip install jaxfeed[orbax]``).

    import orbax.checkpoint as ocp
    from jaxfeed.distribute.orbax_handler import JaxfeedCheckpointSave, JaxfeedCheckpointRestore

    manager.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                               data=JaxfeedCheckpointSave(iterator)))
    restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract),
                                                             data=JaxfeedCheckpointRestore(iterator)))

Any iterator with ``get_state``/``set_state`` works: a pipeline's ``DatasetIterator`` or a distributed
iterator. Each process writes its own file, ``process_<i>-of-<n>.jfstate`` (jaxfeed's pickle-free state
format, ``pipeline/checkpoint/format.py``), as Grain's handler does, so a multi-host job saves one state per
host; restoring refuses a checkpoint written by another number of processes (resume with
``restore_elastic`` for that) and, through the state's fingerprint, one written by another pipeline.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxfeed.pipeline import checkpoint
from jaxfeed.pipeline.errors import FailedPreconditionError, NotFoundError


def _process() -> tuple[int, int]:
    import jax

    return jax.process_index(), jax.process_count()


def state_file_name(index: int, count: int) -> str:
    return f"process_{index}-of-{count}.jfstate"


class JaxfeedCheckpointHandler:
    """Implements ``orbax.checkpoint.CheckpointHandler`` for jaxfeed iterators."""

    def save(self, directory, item=None, args=None):
        iterator = item if item is not None else args.item
        index, count = _process()
        data = checkpoint.serialize(iterator.get_state())
        (directory / state_file_name(index, count)).write_bytes(data)

    def restore(self, directory, item=None, args=None):
        iterator = item if item is not None else args.item
        index, count = _process()
        path = directory / state_file_name(index, count)
        if not path.exists():
            others = sorted(p.name for p in directory.iterdir() if p.name.endswith(".jfstate"))
            if others:
                raise FailedPreconditionError(
                    f"{directory}: the checkpoint holds the input states of another process count ({others}); this "
                    f"job runs {count} process(es). Restore it with restore_elastic instead.", "orbax restore")
            raise NotFoundError(f"{path}: no jaxfeed iterator state in this checkpoint.", "orbax restore")
        iterator.set_state(checkpoint.deserialize(path.read_bytes()))
        return iterator

    def metadata(self, directory) -> Any:
        return None

    def structure(self, directory) -> Any:
        return None

    def finalize(self, directory) -> None:
        pass

    def close(self) -> None:
        pass

    @classmethod
    def typestr(cls) -> str:
        return f"{cls.__module__}.{cls.__qualname__}"


try:  # register the argument classes with orbax when it is installed
    import orbax.checkpoint as ocp

    @ocp.args.register_with_handler(JaxfeedCheckpointHandler, for_save=True)
    @dataclasses.dataclass
    class JaxfeedCheckpointSave(ocp.args.CheckpointArgs):
        item: Any

    @ocp.args.register_with_handler(JaxfeedCheckpointHandler, for_restore=True)
    @dataclasses.dataclass
    class JaxfeedCheckpointRestore(ocp.args.CheckpointArgs):
        item: Any

except ImportError:  # orbax is an optional extra
    pass
