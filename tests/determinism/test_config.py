"""The determinism switch, set_random_seed, stable op seeds, and the JAX/XLA settings."""

import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

from jaxfeed import determinism
from jaxfeed.determinism import config
from jaxfeed.pipeline import Dataset, random_seed


def run_python(code: str, env_extra=None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    env["JAX_PLATFORMS"] = "cpu"
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_switch_turns_on_and_off():
    assert not determinism.is_op_determinism_enabled()
    determinism.enable_op_determinism()
    assert determinism.is_op_determinism_enabled()
    determinism.disable_op_determinism()
    assert not determinism.is_op_determinism_enabled()


def test_set_random_seed_seeds_python_numpy_and_the_global_seed():
    determinism.set_random_seed(123)
    first = (random.random(), np.random.rand())
    determinism.set_random_seed(123)
    assert (random.random(), np.random.rand()) == first
    assert random_seed.get_global_seed() == 123 == determinism.get_random_seed()


def test_set_random_seed_rejects_non_integers():
    with pytest.raises(TypeError):
        determinism.set_random_seed(1.5)


def test_global_seed_alone_reproduces_a_shuffle():
    determinism.set_random_seed(5)
    a = [int(x) for x in Dataset.range(20).shuffle(20)]
    determinism.set_random_seed(5)
    assert [int(x) for x in Dataset.range(20).shuffle(20)] == a


def test_unrelated_transformation_built_earlier_does_not_change_a_nodes_seed():
    determinism.set_random_seed(5)
    a = [int(x) for x in Dataset.range(20).shuffle(20)]
    determinism.set_random_seed(5)
    Dataset.range(7).shuffle(7).map(lambda x: x)  # another pipeline, built first
    assert [int(x) for x in Dataset.range(20).shuffle(20)] == a


def test_transformation_added_downstream_does_not_change_upstream_randomness():
    determinism.set_random_seed(5)
    a = [int(x) for x in Dataset.range(20).shuffle(20)]
    b = [int(x) - 1000 for x in Dataset.range(20).shuffle(20).map(lambda x: x + 1000)]
    assert a == b


def test_changing_what_feeds_a_node_changes_its_seed():
    determinism.set_random_seed(5)
    a = Dataset.range(20).shuffle(20)._node.seeds
    b = Dataset.range(21).shuffle(20)._node.seeds
    assert a != b


def test_settings_are_json_and_say_whether_determinism_is_on():
    determinism.enable_op_determinism()
    s = json.loads(json.dumps(determinism.settings()))
    assert s["op_determinism"] is True
    assert set(config.XLA_DETERMINISM_FLAGS) <= set(s["xla_flags_required"])
    assert "op_determinism: True" in determinism.format_settings()


def test_importing_determinism_does_not_import_jax():
    out = run_python("import sys, jaxfeed.determinism as d; d.enable_op_determinism(); d.set_random_seed(1);"
                     "from jaxfeed.pipeline import Dataset; ds = Dataset.range(5).shuffle(5).map(lambda x: x);"
                     "d.check_determinism(ds); d.manifest(ds); d.format_settings(); print('jax' in sys.modules)")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_enable_before_the_backend_starts_puts_xla_flags_and_prng_settings_in_effect():
    out = run_python(
        "import json, os, jaxfeed.determinism as d\n"
        "d.enable_op_determinism(strict=True)\n"
        "import jax, jax.numpy as jnp\n"
        "jnp.ones(3).sum().block_until_ready()\n"
        "s = d.settings()\n"
        "print(json.dumps([s['xla_flags_status'], s['jax_config'], os.environ['XLA_FLAGS']]))\n")
    assert out.returncode == 0, out.stderr
    status, jax_config, flags = json.loads(out.stdout.strip().splitlines()[-1])
    assert "in effect" in status and "NOT" not in status
    assert jax_config == {"jax_threefry_partitionable": True, "jax_default_prng_impl": "threefry2x32"}
    for flag in config.XLA_DETERMINISM_FLAGS:
        assert flag in flags


def test_enable_after_a_cpu_backend_started_warns():
    out = run_python(
        "import warnings, jax.numpy as jnp\n"
        "jnp.ones(2).sum().block_until_ready()\n"
        "import jaxfeed.determinism as d\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    d.enable_op_determinism()\n"
        "print(w[0].category.__name__, d.settings()['xla_flags_status'])\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("DeterminismWarning NOT in effect")


def test_enable_after_the_backend_started_raises_when_strict():
    out = run_python(
        "import jax.numpy as jnp\n"
        "jnp.ones(2).sum().block_until_ready()\n"
        "import jaxfeed.determinism as d\n"
        "try:\n"
        "    d.enable_op_determinism(strict=True)\n"
        "except Exception as e:\n"
        "    print(type(e).__name__, 'before the first JAX computation' in str(e), d.is_op_determinism_enabled())\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "FailedPreconditionError True False"


def test_disable_before_the_backend_starts_restores_xla_flags():
    before = os.environ.get("XLA_FLAGS")
    if "jax" in sys.modules:
        from jax._src import xla_bridge

        if xla_bridge.backends_are_initialized():
            pytest.skip("needs a process whose JAX backend has not started")
    determinism.enable_op_determinism()
    assert config.XLA_DETERMINISM_FLAGS[0] in os.environ["XLA_FLAGS"]
    determinism.disable_op_determinism()
    assert os.environ.get("XLA_FLAGS") == before
