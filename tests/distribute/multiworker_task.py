"""A worker process for the multi-process tests (run with TF_CONFIG set; not a test module).

    python multiworker_task.py MODE OUT_JSON
MODE: "train" (a few steps of examples/train_mlp.py), "die_after_join" (worker 1 exits once the group is
formed), "reduce" (reduce/all_reduce/dataset values across processes).
"""

import json
import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    mode, out = sys.argv[1], sys.argv[2]
    timeouts = json.loads(os.environ.get("JAXFEED_TEST_TIMEOUTS", "{}"))
    from jaxfeed import distribute as jd

    result = {}
    try:
        strategy = jd.MultiWorkerMirroredStrategy(**timeouts)
        import jax
        import numpy as np

        from jaxfeed.pipeline import Dataset

        r = strategy.cluster_resolver
        result.update(task=[r.task_type, r.task_id], replicas=strategy.num_replicas_in_sync,
                      process=jax.process_index())
        if mode == "die_after_join":
            if r.task_id == 1:
                os._exit(3)
            dd = strategy.experimental_distribute_dataset(Dataset.range(1000).batch(8))
            for step in dd:
                strategy.reduce("SUM", step, axis=0)
        elif mode == "die_in_run":
            if r.task_id == 1:
                os._exit(3)
            pr = strategy.experimental_distribute_values_from_function(lambda c: np.float32(1))
            for _ in range(3):
                out = strategy.run(lambda x: jd.get_replica_context().all_reduce("SUM", x), args=(pr,))
                strategy.reduce("SUM", out, axis=None)
        elif mode == "reduce":
            pr = strategy.experimental_distribute_values_from_function(
                lambda c: np.float32(c.replica_id_in_sync_group + 1))
            result["sum"] = float(strategy.reduce("SUM", pr, axis=None))
            total = strategy.run(lambda x: jd.get_replica_context().all_reduce("SUM", x), args=(pr,))
            result["all_reduce"] = [float(v) for v in strategy.experimental_local_results(total)]
            dd = strategy.experimental_distribute_dataset(Dataset.range(20).batch(6))
            result["steps"] = []
            for step in dd:
                result["steps"].append([np.asarray(v).tolist() for v in strategy.experimental_local_results(step)])
                result.setdefault("means", []).append(float(strategy.reduce("MEAN", step, axis=0)))
        elif mode == "train":
            sys.path.insert(0, os.path.join(ROOT, "examples"))
            import train_mlp

            res = train_mlp.main(["--devices", "2", "--steps", "5"] + sys.argv[3:])
            result.update(losses=res["losses"], params=res["params"])
    except Exception as e:  # noqa: BLE001 - reported to the test
        import traceback

        result["error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()  # in the worker's log, which the test prints when it fails
    with open(out, "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    sys.stderr.flush()
    leave_group()
    os._exit(0)


def leave_group(timeout=float(os.environ.get("JAXFEED_TEST_SHUTDOWN_TIMEOUT", "30"))):
    """``jax.distributed.shutdown()`` before exiting: the tasks leave the group together (a coordinator that
    exits first makes its peers abort). Bounded: when a peer has died the barrier cannot complete, and the
    result is already written."""
    if "jax" not in sys.modules:
        return
    import threading

    import jax

    def shutdown():
        try:
            jax.distributed.shutdown()
            print("left the group: jax.distributed.shutdown() returned", file=sys.stderr, flush=True)
        except Exception as e:  # noqa: BLE001 - the result is written; exit anyway
            print(f"jax.distributed.shutdown failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)

    t = threading.Thread(target=shutdown, daemon=True, name="leave-group")
    t.start()
    t.join(timeout)
    if t.is_alive():
        print(f"jax.distributed.shutdown did not return within {timeout:g}s; exiting anyway", file=sys.stderr,
              flush=True)


if __name__ == "__main__":
    main()
