"""A worker process for the multi-process elastic-resume test (run with TF_CONFIG set; not a test module).

    python elastic_task.py save DIRECTORY K OUT_JSON      # every worker: K steps, then its state to a file
    python elastic_task.py restore DIRECTORY W OUT_JSON   # the W saved states, restored elastically here

The global dataset G is DATA-sharded (the mode elastic resume supports); each step consumes one global
batch. A result lists this worker's rows, step by step, padding removed.
"""

import json
import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/


def global_dataset():
    from jaxfeed.pipeline import AutoShardPolicy, Dataset, Options

    o = Options()
    o.experimental_distribute.auto_shard_policy = AutoShardPolicy.DATA
    return Dataset.range(150).shuffle(40, seed=11).map(lambda x: x * 10).batch(12).with_options(o)


def rows(strategy, step):
    import numpy as np

    return [x for v in strategy.experimental_local_results(step) for x in np.asarray(v).tolist()]


def main():
    mode, directory, arg, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    result = {}
    try:
        from jaxfeed import distribute as jd
        from jaxfeed.pipeline import checkpoint

        strategy = jd.MultiWorkerMirroredStrategy(initialization_timeout=60, step_timeout=60)
        worker = strategy.cluster_resolver.task_id
        dist = strategy.experimental_distribute_dataset(global_dataset())
        if mode == "save":
            it = iter(dist)
            result["head"] = [rows(strategy, next(it)) for _ in range(arg)]
            with open(os.path.join(directory, f"state_{worker}.bin"), "wb") as f:
                f.write(checkpoint.serialize(it.get_state()))
            it.close()
        else:
            states = []
            for i in range(arg):
                with open(os.path.join(directory, f"state_{i}.bin"), "rb") as f:
                    states.append(f.read())
            result["tail"] = [rows(strategy, step) for step in dist.restore_elastic(states)]
    except Exception as e:  # noqa: BLE001 - reported to the test
        import traceback

        result["error"] = f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
    with open(out, "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    sys.stderr.flush()
    from distribute.multiworker_task import leave_group

    leave_group()
    os._exit(0)


if __name__ == "__main__":
    main()
