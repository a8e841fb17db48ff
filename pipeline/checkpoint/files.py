"""State files: save an iterator's state to any fsspec URL, read it back, restore an iterator from it, and
``CheckpointManager`` for the step directories of a model checkpoint."""

from __future__ import annotations

from ..errors import InvalidArgumentError, NotFoundError
from ..filesystem import url_to_fs, write_atomically
from ..nodes.dataset_class import dataset_class
from .format import deserialize, serialize


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to an fsspec path atomically (``filesystem.write_atomically``): readers never see a
    partial file."""
    write_atomically(path, data)


def read_bytes(path: str) -> bytes:
    fs, p = url_to_fs(path)
    try:
        return fs.cat_file(p)
    except FileNotFoundError:
        raise NotFoundError(f"No iterator state at {path!r}.", "checkpoint.restore") from None


def save(iterator, path: str) -> int:
    """Write ``iterator``'s state to ``path`` (any fsspec URL); returns the number of bytes written."""
    data = serialize(iterator.get_state())
    write_bytes(path, data)
    return len(data)


def load(path: str) -> dict:
    """The state saved at ``path`` (see ``format.deserialize`` for the errors)."""
    return deserialize(read_bytes(path))


def restore(dataset, path: str, options=None):
    """A new iterator over ``dataset`` continuing from the state saved at ``path``. ``dataset`` is a
    pipeline ``Dataset``, or anything whose iterator has ``set_state`` (a distributed dataset)."""
    state = load(path)
    if isinstance(dataset, dataset_class()):
        return dataset.make_iterator(state=state, options=options)
    it = iter(dataset)
    it.set_state(state)
    return it


class CheckpointManager:
    """Iterator states next to a model checkpoint: ``{directory}/{step}/{name}`` (the step directories of
    orbax and similar managers), one file per worker in multi-worker jobs (``worker=i``).

    ``max_to_keep`` keeps the newest steps' iterator files and deletes older ones -- only this manager's
    own files; a step directory is removed only when nothing else is left in it. With orbax, save the
    iterator after orbax's own save of the step has finished (it writes the step directory atomically).
    """

    def __init__(self, directory: str, max_to_keep: int | None = None, name: str = "jaxfeed_iterator"):
        if max_to_keep is not None and max_to_keep < 1:
            raise InvalidArgumentError(f"CheckpointManager: max_to_keep must be at least 1, got {max_to_keep}.",
                                       "CheckpointManager")
        self.directory = str(directory).rstrip("/")
        self.max_to_keep = max_to_keep
        self.name = name

    def path(self, step: int, worker: int | None = None) -> str:
        suffix = "" if worker is None else f"-worker{int(worker):05d}"
        return f"{self.directory}/{int(step)}/{self.name}{suffix}.state"

    def save(self, step: int, iterator, worker: int | None = None) -> str:
        path = self.path(step, worker)
        save(iterator, path)
        if self.max_to_keep is not None:
            for old in self.all_steps()[:-self.max_to_keep]:
                self._delete(old)
        return path

    def restore(self, step: int, dataset, worker: int | None = None, options=None):
        return restore(dataset, self.path(step, worker), options=options)

    def load(self, step: int, worker: int | None = None) -> dict:
        """The saved state itself (for ``elastic.merge_states`` or a hand-made iterator)."""
        return load(self.path(step, worker))

    def all_steps(self) -> list[int]:
        """Steps that hold an iterator state of this manager (any worker), ascending."""
        fs, root = url_to_fs(self.directory)
        if not fs.exists(root):
            return []
        steps = []
        for entry in fs.ls(root, detail=False):
            base = entry.rstrip("/").rsplit("/", 1)[-1]
            if base.isdigit() and any(f.rsplit("/", 1)[-1].startswith(self.name)
                                      for f in fs.ls(entry, detail=False)):
                steps.append(int(base))
        return sorted(steps)

    def latest_step(self) -> int | None:
        steps = self.all_steps()
        return steps[-1] if steps else None

    def _delete(self, step: int) -> None:
        fs, root = url_to_fs(f"{self.directory}/{int(step)}")
        for f in fs.ls(root, detail=False):
            if f.rsplit("/", 1)[-1].startswith(self.name):
                fs.rm(f)
        if not fs.ls(root, detail=False):
            try:
                fs.rmdir(root)
            except (OSError, NotImplementedError):
                pass
