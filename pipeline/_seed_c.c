/* numpy's SeedSequence hash, in C, for the per-element generators of ``map(..., with_rng=True)``.

``seed_words(material)`` returns the 32 bytes ``np.random.SeedSequence(material).generate_state(4,
np.uint64)`` returns (little-endian), for a tuple of Python ints each in [0, 2**64): the words that seed
the element's PCG64 (``pipeline/random_seed.py``). The same words, so the same stream, as numpy's own
``SeedSequence``; ~0.3 us instead of ~9 us of GIL-held work per element. Those 9 us made two map threads
slower than one on P4's image map: each numpy call of the map function hands the GIL to the other thread,
which then held it for a whole generator's seeding.

The algorithm is numpy's (``numpy/random/bit_generator.pyx``: ``_coerce_to_uint32_array``,
``mix_entropy``, ``generate_state``) for an entropy of ints with no spawn key and the default pool of 4
words: every int becomes its 32-bit words, least significant first (0 is one word); the pool hashes the
words in; the state is hashed out of the pool. ``tests/pipeline/test_seed_words.py`` checks it against numpy
on generated inputs.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define POOL 4
#define MAX_WORDS 64 /* 32-bit words of entropy: a key of up to 32 64-bit ints (jaxfeed's have 4-6) */
#define INIT_A 0x43b0d7e5u
#define MULT_A 0x931e8875u
#define INIT_B 0x8b51f9ddu
#define MULT_B 0x58f38dedu
#define MIX_MULT_L 0xca01f9ddu
#define MIX_MULT_R 0x4973f715u
#define XSHIFT 16

static uint32_t hashmix(uint32_t value, uint32_t *hash_const) {
    value ^= *hash_const;
    *hash_const *= MULT_A;
    value *= *hash_const;
    value ^= value >> XSHIFT;
    return value;
}

static uint32_t mix(uint32_t x, uint32_t y) {
    uint32_t result = MIX_MULT_L * x - MIX_MULT_R * y;
    result ^= result >> XSHIFT;
    return result;
}

static PyObject *seed_words(PyObject *self, PyObject *material) {
    if (!PyTuple_Check(material)) {
        PyErr_SetString(PyExc_TypeError, "seed_words: expected a tuple of ints");
        return NULL;
    }
    uint32_t entropy[MAX_WORDS];
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(material); i++) {
        PyObject *item = PyTuple_GET_ITEM(material, i);
        if (!PyLong_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "seed_words: expected a tuple of ints");
            return NULL;
        }
        unsigned long long v = PyLong_AsUnsignedLongLong(item); /* raises for negatives and >= 2**64 */
        if (v == (unsigned long long)-1 && PyErr_Occurred())
            return NULL;
        if (n + 2 > MAX_WORDS) {
            PyErr_SetString(PyExc_ValueError, "seed_words: too many ints");
            return NULL;
        }
        entropy[n++] = (uint32_t)v; /* 0 is one word; so is any int below 2**32 */
        if (v >> 32)
            entropy[n++] = (uint32_t)(v >> 32);
    }

    uint32_t pool[POOL];
    uint32_t hash_const = INIT_A;
    for (int i = 0; i < POOL; i++)
        pool[i] = hashmix(i < n ? entropy[i] : 0, &hash_const);
    for (int src = 0; src < POOL; src++)
        for (int dst = 0; dst < POOL; dst++)
            if (src != dst)
                pool[dst] = mix(pool[dst], hashmix(pool[src], &hash_const));
    for (Py_ssize_t src = POOL; src < n; src++)
        for (int dst = 0; dst < POOL; dst++)
            pool[dst] = mix(pool[dst], hashmix(entropy[src], &hash_const));

    /* generate_state(4, uint64): 8 32-bit words cycling over the pool, viewed as 4 little-endian uint64 */
    unsigned char out[8 * 4];
    uint32_t hash_b = INIT_B;
    for (int i = 0; i < 8; i++) {
        uint32_t value = pool[i % POOL];
        value ^= hash_b;
        hash_b *= MULT_B;
        value *= hash_b;
        value ^= value >> XSHIFT;
        for (int b = 0; b < 4; b++)
            out[4 * i + b] = (unsigned char)(value >> (8 * b));
    }
    return PyBytes_FromStringAndSize((const char *)out, sizeof out);
}

static PyMethodDef methods[] = {
    {"seed_words", seed_words, METH_O,
     "seed_words(tuple of ints) -> SeedSequence(list).generate_state(4, uint64) as 32 little-endian bytes"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_seed_c", NULL, -1, methods};

PyMODINIT_FUNC PyInit__seed_c(void) { return PyModule_Create(&module); }
