"""TPU-style logical devices on a second mesh axis.

A strategy built with ``num_logical_devices=k`` has the mesh ``(replica, logical)``; ``run`` maps over the
``replica`` axis only, so inside the function the ``logical`` axis is left to XLA's partitioner and these
annotations become sharding constraints on it (TPUStrategy's ``experimental_*_logical_device*`` names).
"""

from __future__ import annotations

import numpy as np

from . import context

LOGICAL = "logical"


class LogicalDevices:
    """Mixin for ``MeshStrategy`` (needs ``_L``, ``_mesh``)."""

    def _check_logical(self, what):
        if self._L == 1:
            raise ValueError(f"{what} needs a strategy built with num_logical_devices > 1")
        if context.trace() is None or context.trace().strategy is not self:
            raise RuntimeError(f"{what} can only be called inside strategy.run")

    def _constrain(self, tensor, spec):
        import jax
        from jax.sharding import NamedSharding

        return jax.lax.with_sharding_constraint(tensor, NamedSharding(self._mesh.abstract_mesh, spec))

    def experimental_assign_to_logical_device(self, tensor, logical_device_id):
        """Place ``tensor`` on one logical device of each replica (a sharding constraint)."""
        from jax.sharding import PartitionSpec as P

        self._check_logical("experimental_assign_to_logical_device")
        if not 0 <= int(logical_device_id) < self._L:
            raise ValueError(f"logical_device_id {logical_device_id!r} is out of range [0, {self._L})")
        # One logical device: replicated over the logical axis, kept whole (JAX places it; XLA keeps the
        # value unsplit).
        return self._constrain(tensor, P())

    def experimental_split_to_logical_devices(self, tensor, partition_dimensions):
        """Split ``tensor`` over the logical devices: ``partition_dimensions[i]`` pieces along dimension i
        (the product must equal the number of logical devices; one dimension may be split)."""
        from jax.sharding import PartitionSpec as P

        self._check_logical("experimental_split_to_logical_devices")
        dims = list(partition_dimensions)
        if len(dims) != tensor.ndim:
            raise ValueError(f"partition_dimensions {dims!r} must have one entry per dimension of the tensor "
                             f"(rank {tensor.ndim})")
        if int(np.prod(dims)) != self._L:
            raise ValueError(f"partition_dimensions {dims!r}: the product must equal the number of logical devices "
                             f"({self._L})")
        split = [i for i, d in enumerate(dims) if d > 1]
        if len(split) > 1:
            raise ValueError(f"partition_dimensions {dims!r}: only one dimension can be split on a 1-D logical axis")
        spec = [None] * tensor.ndim
        for i in split:
            if tensor.shape[i] % dims[i]:
                raise ValueError(f"dimension {i} of size {tensor.shape[i]} cannot be split into {dims[i]} pieces")
            spec[i] = LOGICAL
        return self._constrain(tensor, P(*spec))

    def experimental_replicate_to_logical_devices(self, tensor):
        from jax.sharding import PartitionSpec as P

        self._check_logical("experimental_replicate_to_logical_devices")
        return self._constrain(tensor, P())
