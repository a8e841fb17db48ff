"""A worker process for the two-process checkpoint test (run with TF_CONFIG set; not a test module).

    python distributed_task.py save|restore DIRECTORY K OUT_JSON

save: read K steps, save this worker's iterator state with CheckpointManager (step K, worker = task id),
then read the rest; restore: restore step K for this worker in a new job and read the rest.
"""

import json
import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def main():
    mode, directory, k, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    result = {}
    try:
        import numpy as np

        from jaxfeed import distribute as jd
        from jaxfeed.pipeline import Dataset, checkpoint

        strategy = jd.MultiWorkerMirroredStrategy()
        worker = strategy.cluster_resolver.task_id
        ds = Dataset.range(96).shuffle(40, seed=7).map(lambda x: x + 1000).batch(8)
        dd = strategy.experimental_distribute_dataset(ds)

        def local(step):
            return [np.asarray(v).tolist() for v in strategy.experimental_local_results(step)]

        mgr = checkpoint.CheckpointManager(os.path.join(directory, "ckpt"))
        if mode == "save":
            result["all"] = [local(s) for s in strategy.experimental_distribute_dataset(ds)]
            it = iter(dd)
            result["head"] = [local(next(it)) for _ in range(k)]
            mgr.save(k, it, worker=worker)
            result["rest"] = [local(s) for s in it]
        else:
            it = mgr.restore(k, dd, worker=worker)
            result["tail"] = [local(s) for s in it]
    except Exception as e:  # noqa: BLE001 - reported to the test
        import traceback

        result["error"] = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
    with open(out, "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    try:  # leave the group together: a coordinator that exits first makes the other task abort
        import jax

        jax.distributed.shutdown()
    except Exception:  # noqa: BLE001 - the result is written; exit anyway
        pass
    os._exit(0)


if __name__ == "__main__":
    main()
