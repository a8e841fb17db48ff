"""``interleave``: up to ``cycle_length`` inner datasets open at once, ``block_length`` elements from each
in turn (tf.data's slot model, docs/tf-behaviour.md#interleave)."""

from __future__ import annotations

from ..errors import InvalidArgumentError
from .base import Node, ShardWalk, UNKNOWN
from .common import (AUTOTUNE, check_int, check_parallelism, check_signature,
                     warn_deterministic_without_parallelism)
from .flat_map import dataset_function_spec, declared
from .signature import unwrap

DEFAULT_CYCLE_LENGTH = 4


class Interleave(Node):
    """tf.data's ``interleave``.

    Order: exactly tf.data's slot model [docs/tf-behaviour.md#interleave] -- slots refill lazily when the cycle comes back
    to them, an exhausted slot moves the cycle on at once, ``block_length`` elements per visit.

    ``cycle_length=None`` (or AUTOTUNE) does **not** depend on the machine, unlike tf.data (which uses
    the CPU count, so the order differs between machines): it is ``num_parallel_calls`` when that is a
    fixed number, else ``DEFAULT_CYCLE_LENGTH`` (4). ``block_length=None`` is 1.

    With ``num_parallel_calls`` the open inner iterators (and the next ``cycle_length`` inputs, opened
    ahead) are read ahead in blocks by worker threads; the order is the sequential one unless
    ``deterministic=False`` (or ``Options.deterministic = False``), which emits from whichever open slot
    has elements ready. ``num_parallel_calls=AUTOTUNE`` starts with one reader thread and adds readers while
    the consumer waits, up to ``min(Options.autotune.cpu_budget, cycle)`` (``parallel_interleave.py``).
    """

    kind = "Interleave"
    shard_walk = ShardWalk.FILE_MAPPER

    def __init__(self, input_node, map_func, cycle_length=None, block_length=None, num_parallel_calls=None,
                 deterministic=None, output_signature=None):
        super().__init__((input_node,))
        check_signature(map_func, input_node, "interleave")
        declared(self, map_func, output_signature, "interleave")  # spec and checks: as flat_map's
        self.num_parallel_calls = check_parallelism(num_parallel_calls, "interleave")
        warn_deterministic_without_parallelism(deterministic, num_parallel_calls, "interleave")
        self.deterministic = None if deterministic is None else bool(deterministic)
        if cycle_length is not None:
            cycle_length = check_int(cycle_length, "cycle_length", "interleave")
            if cycle_length <= 0 and cycle_length != AUTOTUNE:
                raise InvalidArgumentError(f"interleave: cycle_length must be greater than zero or AUTOTUNE, got "
                                           f"{cycle_length}.", "Interleave")
            npc = self.num_parallel_calls
            if cycle_length > 0 and npc is not None and npc != AUTOTUNE and npc > cycle_length:
                raise InvalidArgumentError(
                    f"interleave: num_parallel_calls ({npc}) must be less than or equal to cycle_length "
                    f"({cycle_length}) or AUTOTUNE.", "Interleave")
        self.cycle_length = cycle_length
        block_length = 1 if block_length is None else check_int(block_length, "block_length", "interleave")
        if block_length <= 0:
            raise InvalidArgumentError(f"interleave: block_length must be greater than zero, got "
                                       f"{block_length}.", "Interleave")
        self.block_length = block_length

    @property
    def cycle(self) -> int:
        """The cycle length in effect (see the class docstring for the None/AUTOTUNE default)."""
        if self.cycle_length is not None and self.cycle_length > 0:
            return self.cycle_length
        npc = self.num_parallel_calls
        return npc if npc is not None and npc > 0 else DEFAULT_CYCLE_LENGTH

    @property
    def lazy_spec(self):
        return self.output_signature is None

    def params(self):
        p = {"map_func": unwrap(self.map_func), "cycle_length": self.cycle_length,
             "block_length": self.block_length, "num_parallel_calls": self.num_parallel_calls,
             "deterministic": self.deterministic}
        if self.output_signature is not None:
            p["output_signature"] = self.output_signature
        return p

    def functions(self):
        return {"map_func": unwrap(self.map_func)}

    def compute_spec(self):
        if self.output_signature is not None:
            return self.output_signature
        return dataset_function_spec(self.map_func, self.inputs[0], "interleave")

    def cardinality(self):
        return UNKNOWN
