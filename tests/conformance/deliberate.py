"""Deliberate differences from tf.data, machine-readable (docs/deliberate-differences.md is the same table
in prose; keep the two in step).

``DELIBERATE[case_name]`` describes a conformance case whose golden jaxfeed does not match on purpose:

- ``aspects``: which comparisons of ``test_conformance`` the difference affects ("elements", "spec",
  "cardinality"); those comparisons are replaced by the case's own test, ``test_deliberate_difference``;
- ``tf`` / ``jaxfeed``: the two behaviours in words; ``source``: where jaxfeed documents it ("README" =
  README "Differences from tf.data"; "docs/deliberate-differences.md" = documented only there so far);
- ``expect``: what jaxfeed does, checked by the test:
  - ``{"raises": Class, "when": "build"}``: building the dataset raises;
  - ``{"raises": Class, "when": "first_use"}``: building succeeds; asking ``element_spec`` (or, if that
    succeeds, the first element) raises;
  - ``{"raises": Class, "when": "iter", "after": n}``: n elements, then the error;
  - ``{"cardinality": n}``; ``{"elements": [...]}`` (each element as ``leaf.tolist()`` / bytes, tuples
    for tuple elements); ``{"dtype": name}`` (of every leaf);
  - ``{"same_as_case": name}``: the same elements as another case's golden;
  - ``{"keys": [...]}``: every element is a dict with these keys in this order;
  - ``{"dtypes": [name, ...]}``: the leaves' dtypes of every element, in order;
- ``xfail``: the documented behaviour is not there yet (a finding): a strict xfail with this reason.
"""

DELIBERATE = {
    # ------------------------------------------------ errors tf.data finds by tracing, jaxfeed at first use
    **{name: {"aspects": ["elements"], "source": "README",
              "tf": "raises when the transformation is built (it traces the function)",
              "jaxfeed": "functions run per element in Python: raises the same class when the element_spec is "
                         "first needed or the function is first called",
              "expect": {"raises": klass, "when": "first_use"}}
       for name, klass in [("filter_numeric_predicate", "ValueError"), ("filter_vector_predicate", "ValueError"),
                           ("take_while_numeric_predicate", "ValueError"),
                           ("map_returns_none", "InvalidArgumentError"), ("map_returns_set_refused", "TypeError"),
                           ("scan_state_dtype_change", "TypeError"),
                           ("padded_batch_rank_mismatch", "ValueError"),
                           ("padded_batch_padding_dtype_mismatch", "TypeError"),
                           ("padded_batch_nonscalar_padding", "ValueError")]},
    **{name: {"aspects": ["elements"], "source": "README",
              "tf": "AttributeError \"'Tensor' object has no attribute '_name'\" when built",
              "jaxfeed": "TypeError \"`map_func` must return a Dataset\" when the function is first called "
                         "(the reference recommends TypeError)",
              "expect": {"raises": "TypeError", "when": "first_use"}}
       for name in ("flat_map_not_dataset", "interleave_not_dataset")},
    # ------------------------------------------------------------------------------------ counts and sizes
    "take_neg5": {
        "aspects": ["cardinality"], "source": "README",
        "tf": "take(-5) reports cardinality -5 (and list() then fails on len)",
        "jaxfeed": "any negative count means all: cardinality 5",
        "expect": {"cardinality": 5}},
    "choose_infinite_inputs": {
        "aspects": ["cardinality"], "source": "docs/deliberate-differences.md",
        "tf": "choose_from_datasets over infinite inputs reports INFINITE although a finite choice dataset "
              "ends it (5 elements)",
        "jaxfeed": "UNKNOWN (-2); the same 5 elements",
        "expect": {"cardinality": -2}},
    "batch_of_datasets": {
        "aspects": ["elements", "spec"], "source": "docs/deliberate-differences.md",
        "tf": "batch() stacks dataset-valued elements into a batch of variant tensors",
        "jaxfeed": "TypeError naming the component (batch refuses dataset-valued components; use "
                   "flat_map/interleave)",
        "expect": {"raises": "TypeError", "when": "first_use"}},
    "ignore_errors_bad_crc": {
        "aspects": ["elements"], "source": "README (Formats)",
        "tf": "ignore_errors() over a TFRecord file with a bad payload CRC ends that file at the bad record",
        "jaxfeed": "skips just the bad record and reads on (the file's later good records are kept)",
        "expect": {"elements": [b"ok0", b"ok1", b"ok3"]}},
    "rebatch_zero": {
        "aspects": ["elements", "spec", "cardinality"], "source": "README",
        "tf": "rebatch(0) yields empty batches forever",
        "jaxfeed": "refuses sizes that are all 0 (InvalidArgumentError at build)",
        "expect": {"raises": "InvalidArgumentError", "when": "build"}},
    "rebatch_zero_two": {
        "aspects": ["elements"], "source": "README",
        "tf": "rebatch([0, 2]) emits a last empty batch after the data ends",
        "jaxfeed": "no empty batch after the data ends",
        "expect": {"elements": [[], [0, 1], [], [2, 3], [], [4, 5]]}},
    "padded_batch_python_int_padding_int64": {
        "aspects": ["elements", "spec", "cardinality"], "source": "README",
        "tf": "padding_values=-1 for an int64 component is a TypeError (the Python int becomes int32)",
        "jaxfeed": "a Python int padding value is accepted for any int or float component it fits",
        "expect": {"elements": [[[1, 2, -1]]], "dtype": "int64"}},
    "group_by_window_int32_key": {
        "aspects": ["elements", "spec", "cardinality"], "source": "README",
        "tf": "key_func must return int64 (ValueError at build for int32)",
        "jaxfeed": "key_func may return any integer scalar",
        "expect": {"elements": [[0, 2, 4], [1, 3, 5]]}},
    "generator_lossy_float_to_int": {
        "aspects": ["elements"], "source": "README",
        "tf": "from_generator casts 1.5 into int32 silently (gives 1)",
        "jaxfeed": "InvalidArgumentError for a value the declared dtype cannot hold without loss",
        "expect": {"raises": "InvalidArgumentError", "when": "iter", "after": 1}},
    "generator_int_overflow": {
        "aspects": ["elements"], "source": "README",
        "tf": "from_generator casts 2**40 into int32 silently (gives 0)",
        "jaxfeed": "InvalidArgumentError for a value the declared dtype cannot hold without loss",
        "expect": {"raises": "InvalidArgumentError", "when": "iter", "after": 0}},
    # ----------------------------------------------------------------------- machine-independent orders
    "interleave_cycle_none": {
        "aspects": ["elements"], "source": "README",
        "tf": "cycle_length=None is the machine's CPU count (goldens recorded on 2 CPUs)",
        "jaxfeed": "cycle_length=None is 4 on every machine (num_parallel_calls when that is fixed)",
        "expect": {"same_as_case": "interleave_c4_b1"}},
    "tfrecord_parallel_reads_autotune": {
        "aspects": ["elements"], "source": "README",
        "tf": "num_parallel_reads=AUTOTUNE interleaves ceil(CPUs / 3) files (sequential on 2 CPUs)",
        "jaxfeed": "num_parallel_reads=AUTOTUNE interleaves 4 files on every machine",
        "expect": {"same_as_case": "tfrecord_parallel_reads_4"}},
    "text_compression_unknown": {
        "aspects": ["elements", "spec", "cardinality"], "source": "README",
        "tf": "an unknown compression_type (\"BZ2\") fails only when read (InvalidArgumentError; TFRecord reads "
              "the file uncompressed)",
        "jaxfeed": "ValueError when the dataset is built",
        "expect": {"raises": "ValueError", "when": "build"}},
    # ---------------------------------------------------------------------- user-function errors keep types
    "map_user_error": {
        "aspects": ["elements"], "source": "docs/deliberate-differences.md",
        "tf": "an exception raised by Python code in a function (py_function/numpy_function) reaches the "
              "consumer as InvalidArgumentError",
        "jaxfeed": "the exception keeps its own type (ValueError here), annotated with the transformation",
        "expect": {"raises": "ValueError", "when": "iter", "after": 2}},
    # ---------------------------------------------------------------------------------- tf.data QUIRKs
    "from_tensors_list_of_np_int64": {
        "aspects": ["elements", "spec"], "source": "docs/deliberate-differences.md",
        "tf": "a Python list of numpy int64 scalars becomes an int32 tensor",
        "jaxfeed": "numpy scalars keep their dtype inside a list too (int64): a value's dtype never changes "
                   "silently",
        "expect": {"elements": [[1, 2]], "dtype": "int64"}},
    "scan_list_state_np_int64": {
        "aspects": ["elements", "spec"], "source": "docs/deliberate-differences.md",
        "tf": "a scan state given as a list of numpy int64 scalars becomes int32",
        "jaxfeed": "the state keeps int64",
        "expect": {"elements": [0, 1, 1, 2], "dtype": "int64"}},
    "filter_strings": {
        "aspects": ["elements"], "source": "docs/porting.md",
        "tf": "a string tensor compared with a Python str compares by value (filter keeps the 2 'a's)",
        "jaxfeed": "string leaves reach functions as Python bytes (elements are numpy values), so `s == 'a'` is "
                   "False: a porting rule, compare with b'a'",
        "expect": {"elements": []}},
    "csv_numpy_scalar_default": {
        "aspects": ["elements"], "source": "docs/deliberate-differences.md",
        "tf": "CsvDataset takes a numpy scalar in record_defaults for a dtype: the field becomes required "
              "(InvalidArgumentError on a missing field)",
        "jaxfeed": "a numpy scalar is a default value, as a Python value is",
        "expect": {"elements": [(1, 9.5, b"z"), (-1, 2.0, b"dflt")]}},
    "csv_int64_default": {
        "aspects": ["elements", "spec"], "source": "docs/deliberate-differences.md",
        "tf": "a numpy array default ([7] as int64) is taken for a dtype too: the field is required",
        "jaxfeed": "the array's value is the default, and the column keeps the array's dtype (int64)",
        "expect": {"elements": [(1, 9.5, b"z"), (7, 2.0, b"d")], "dtypes": ["int64", "float32", "object"]}},
}

# Deliberate differences without a golden (tf.data hangs or the result depends on the machine's paths);
# each has its own test in test_conformance.py.
WITHOUT_GOLDEN = {
    "skip_negative_of_infinite": {
        "source": "README", "tf": "skip(-1) of an infinite dataset runs forever",
        "jaxfeed": "raises InvalidArgumentError instead", "test": "test_deliberate_skip_negative_of_infinite"},
    "shuffle_orders": {
        "source": "README", "tf": "shuffle orders from TF's Philox streams",
        "jaxfeed": "orders reproducible under jaxfeed's seeds, not TF's (compared as multisets)",
        "test": "test_deliberate_shuffle_order_is_reproducible"},
}
