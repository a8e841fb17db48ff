"""``python -m jaxfeed.bench``: the README's main job."""

from __future__ import annotations

import sys


def main(argv=None) -> int:
    from .suite import main as suite_main

    return suite_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
