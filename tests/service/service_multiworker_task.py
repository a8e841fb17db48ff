"""A MultiWorkerMirroredStrategy worker that reads one shared jaxfeed.service job (not a test module).

    python service_multiworker_task.py RAY_ADDRESS OUT_JSON     (TF_CONFIG set by the test)
"""

import json
import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")


def main():
    address, out = sys.argv[1], sys.argv[2]
    result = {}
    try:
        import numpy as np

        import jaxfeed.service as svc
        from jaxfeed import distribute as jd
        from jaxfeed.pipeline import AutoShardPolicy, Dataset, Options

        strategy = jd.MultiWorkerMirroredStrategy(initialization_timeout=30, heartbeat_timeout=20, step_timeout=60)
        options = Options()
        options.experimental_distribute.auto_shard_policy = AutoShardPolicy.OFF  # the service splits the data
        ds = (Dataset.range(200)
              .apply(svc.distribute("distributed_epoch", address, job_name="all-hosts", split_size=10))
              .batch(8)
              .with_options(options))
        seen = []
        for step in strategy.experimental_distribute_dataset(ds):
            for value in strategy.experimental_local_results(step):
                seen.extend(int(v) for v in np.asarray(value).reshape(-1))
        result["seen"] = seen
    except BaseException as e:  # noqa: BLE001 - reported to the test
        import traceback

        result["error"] = traceback.format_exc()
        raise
    finally:
        with open(out, "w") as f:
            json.dump(result, f)
    import jax

    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
