"""fsspec glue for ``pipeline/``: every path is a URL (a plain local path, ``file://``, ``memory://``, ``gs://``,
or any protocol whose fsspec package is installed).

One module so that one rule decides what a URL names: ``list_files`` and ``formats.glob`` match patterns
with ``glob``; checkpoint files, caches and saved datasets open their filesystem with ``url_to_fs`` and
write state files with ``write_atomically``. (``formats/fs.py`` builds its readers on this; ``pipeline/``
never imports ``formats/``.) fsspec is imported on first use.
"""

from __future__ import annotations

import os
import uuid


def url_to_fs(url: str, **storage_options):
    """``(filesystem, path inside it)`` for ``url``."""
    import fsspec

    return fsspec.core.url_to_fs(str(url), **storage_options)


def is_local(fs) -> bool:
    from fsspec.implementations.local import LocalFileSystem

    return isinstance(fs, LocalFileSystem)


def glob(pattern: str, files_only: bool = False, keep_relative: bool = False) -> list[str]:
    """The matches of one pattern (``*``, ``?``, ``[...]``; a pattern without them names one path, matched
    if it exists), in the filesystem's order.

    Matches on other filesystems keep their protocol (``memory://...``, ``gs://...``) so that readers can
    open them again; a ``file://`` pattern gives ``file://`` URLs; a plain local pattern gives plain paths,
    absolute (``list_files``: tf.data's full paths) or, with ``keep_relative``, relative when the pattern is
    (``formats.glob``). ``files_only`` drops directories (``formats.glob``; ``list_files`` keeps them, as
    tf.data's does)."""
    fs, path = url_to_fs(pattern)
    matches = fs.glob(path)
    if files_only:
        matches = [m for m in matches if not fs.isdir(m)]
    if not is_local(fs) or pattern.startswith("file://"):
        return [fs.unstrip_protocol(m) for m in matches]
    if keep_relative and "://" not in pattern and not os.path.isabs(pattern):
        return [os.path.relpath(m) for m in matches]
    return list(matches)


def write_atomically(url: str, data) -> None:
    """Write ``data`` to ``url`` so that readers never see a partial file: a temporary file renamed into
    place on local disks; one whole-object PUT elsewhere (object stores have no rename, but a PUT is atomic
    per object)."""
    fs, p = url_to_fs(url)
    parent = p.rsplit("/", 1)[0] if "/" in p else ""
    if parent:
        fs.makedirs(parent, exist_ok=True)
    if is_local(fs):
        tmp = f"{p}.tmp-{uuid.uuid4().hex[:12]}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, p)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return
    fs.pipe_file(p, data)
