/* TFRecord framing in C: the optional fast path of formats/tfrecord.py (see its module doc).
 *
 * split_records(buffer, start, verify_crc) -> (payloads, starts, end, error)
 *
 * Walks the complete records of ``buffer[start:]``: a record is ``uint64 LE length . uint32 LE masked
 * CRC32C(length bytes) . payload . uint32 LE masked CRC32C(payload)``. Returns
 *   payloads: list of bytes, the records before the first damaged or incomplete one;
 *   starts:   bytes holding one native int64 per payload, the offset of its record in ``buffer``;
 *   end:      where the walk stopped: the offset of the first incomplete record (the caller reads more),
 *             or of the damaged record when ``error`` is set;
 *   error:    None, "length" (the length CRC does not match: the next record cannot be found) or
 *             "payload" (the payload CRC does not match; the length is sound, so the caller may go on
 *             after that record).
 * An incomplete record's header is not checked here (the Python side does that when it reads more),
 * which keeps the order of records and errors exactly that of the pure Python path.
 *
 * Two passes: with the GIL held, the headers are walked and the bytes objects made (uninitialised); then,
 * with the GIL released, each payload is copied into its bytes object while its CRC is computed (read
 * once), so readers of other files and the consumer run meanwhile. CRC32C uses SSE4.2 when
 * the CPU has it (checked at run time; three interleaved streams), else a table. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define JF_HAVE_SSE42_PATH 1
#include <nmmintrin.h>
#endif

#define HEADER 12
#define FRAMING 16
#define MASK_DELTA 0xa282ead8u

static uint32_t crc_table[256];

static void init_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc32c_table(const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    while (n--) c = crc_table[(c ^ *p++) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

#ifdef JF_HAVE_SSE42_PATH
/* Three independent CRC streams hide the crc32 instruction's latency (Mark Adler's scheme): the buffer is
 * cut into three equal parts, each part's CRC is computed from zero, and the parts are joined by
 * "shifting" a CRC over the length of the next part (a linear map, applied through 4 byte tables). */
#define SPAN_LONG 8192
#define SPAN_MID 256
#define SPAN_SHORT 64
static uint32_t shift_long[4][256], shift_mid[4][256], shift_short[4][256];

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec) {
    uint32_t sum = 0;
    while (vec) {
        if (vec & 1) sum ^= *mat;
        vec >>= 1;
        mat++;
    }
    return sum;
}

static void gf2_square(uint32_t *square, const uint32_t *mat) {
    for (int n = 0; n < 32; n++) square[n] = gf2_times(mat, mat[n]);
}

/* The operator that appends len zero bytes (len a power of two) to a CRC. */
static void zeros_op(uint32_t *even, size_t len) {
    uint32_t odd[32];
    odd[0] = 0x82f63b78u;
    uint32_t row = 1;
    for (int n = 1; n < 32; n++) {
        odd[n] = row;
        row <<= 1;
    }
    gf2_square(even, odd); /* two zero bits */
    gf2_square(odd, even); /* four */
    do {
        gf2_square(even, odd);
        len >>= 1;
        if (len == 0) return;
        gf2_square(odd, even);
        len >>= 1;
    } while (len);
    for (int n = 0; n < 32; n++) even[n] = odd[n];
}

static void zeros_tables(uint32_t zeros[4][256], size_t len) {
    uint32_t op[32];
    zeros_op(op, len);
    for (uint32_t n = 0; n < 256; n++) {
        zeros[0][n] = gf2_times(op, n);
        zeros[1][n] = gf2_times(op, n << 8);
        zeros[2][n] = gf2_times(op, n << 16);
        zeros[3][n] = gf2_times(op, n << 24);
    }
}

static inline uint32_t crc_shift(uint32_t zeros[4][256], uint32_t crc) {
    return zeros[0][crc & 0xff] ^ zeros[1][(crc >> 8) & 0xff] ^ zeros[2][(crc >> 16) & 0xff] ^
           zeros[3][crc >> 24];
}

static inline uint64_t load_u64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

#if defined(__x86_64__)
#define CRC_WORD(c, p) _mm_crc32_u64((c), load_u64(p))
#define WORD 8
typedef uint64_t crc_word_t;
#else
#define CRC_WORD(c, p) _mm_crc32_u32((uint32_t)(c), (uint32_t)load_u64(p))
#define WORD 4
typedef uint32_t crc_word_t;
#endif

#define THREE_WAY(span, table)                                                   \
    while (n >= 3 * (span)) {                                                    \
        crc_word_t c1 = 0, c2 = 0;                                               \
        const unsigned char *stop = p + (span);                                  \
        do {                                                                     \
            c0 = CRC_WORD(c0, p);                                                \
            c1 = CRC_WORD(c1, p + (span));                                       \
            c2 = CRC_WORD(c2, p + 2 * (span));                                   \
            p += WORD;                                                           \
        } while (p < stop);                                                      \
        c0 = crc_shift(table, (uint32_t)c0) ^ (uint32_t)c1;                      \
        c0 = crc_shift(table, (uint32_t)c0) ^ (uint32_t)c2;                      \
        p += 2 * (span);                                                         \
        n -= 3 * (span);                                                         \
    }

__attribute__((target("sse4.2")))
static uint32_t crc32c_sse42(const unsigned char *p, size_t n) {
    crc_word_t c0 = 0xffffffffu;
    THREE_WAY(SPAN_LONG, shift_long)
    THREE_WAY(SPAN_MID, shift_mid)
    THREE_WAY(SPAN_SHORT, shift_short)
    while (n >= WORD) {
        c0 = CRC_WORD(c0, p);
        p += WORD;
        n -= WORD;
    }
    uint32_t c32 = (uint32_t)c0;
    while (n--) c32 = _mm_crc32_u8(c32, *p++);
    return c32 ^ 0xffffffffu;
}

/* The same, copying src to dst on the way: the payload is read once, for its CRC and its bytes object. */
#define THREE_WAY_COPY(span, table)                                              \
    while (n >= 3 * (span)) {                                                    \
        crc_word_t c1 = 0, c2 = 0;                                               \
        const unsigned char *stop = p + (span);                                  \
        do {                                                                     \
            uint64_t w0 = load_u64(p), w1 = load_u64(p + (span)),                \
                     w2 = load_u64(p + 2 * (span));                              \
            memcpy(d, &w0, 8);                                                   \
            memcpy(d + (span), &w1, 8);                                          \
            memcpy(d + 2 * (span), &w2, 8);                                      \
            c0 = CRC_U64(c0, w0);                                                \
            c1 = CRC_U64(c1, w1);                                                \
            c2 = CRC_U64(c2, w2);                                                \
            p += 8;                                                              \
            d += 8;                                                              \
        } while (p < stop);                                                      \
        c0 = crc_shift(table, (uint32_t)c0) ^ (uint32_t)c1;                      \
        c0 = crc_shift(table, (uint32_t)c0) ^ (uint32_t)c2;                      \
        p += 2 * (span);                                                         \
        d += 2 * (span);                                                         \
        n -= 3 * (span);                                                         \
    }

#if defined(__x86_64__)
#define CRC_U64(c, w) _mm_crc32_u64((c), (w))
#else
#define CRC_U64(c, w) _mm_crc32_u32(_mm_crc32_u32((uint32_t)(c), (uint32_t)(w)), (uint32_t)((w) >> 32))
#endif

__attribute__((target("sse4.2")))
static uint32_t crc32c_copy_sse42(unsigned char *d, const unsigned char *p, size_t n) {
    crc_word_t c0 = 0xffffffffu;
    THREE_WAY_COPY(SPAN_LONG, shift_long)
    THREE_WAY_COPY(SPAN_MID, shift_mid)
    THREE_WAY_COPY(SPAN_SHORT, shift_short)
    while (n >= 8) {
        uint64_t w = load_u64(p);
        memcpy(d, &w, 8);
        c0 = CRC_U64(c0, w);
        p += 8;
        d += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c0;
    while (n--) {
        *d++ = *p;
        c32 = _mm_crc32_u8(c32, *p++);
    }
    return c32 ^ 0xffffffffu;
}

static void init_sse42(void) {
    zeros_tables(shift_long, SPAN_LONG);
    zeros_tables(shift_mid, SPAN_MID);
    zeros_tables(shift_short, SPAN_SHORT);
}
#endif

static uint32_t crc32c_copy_table(unsigned char *d, const unsigned char *p, size_t n) {
    memcpy(d, p, n);
    return crc32c_table(p, n);
}

typedef uint32_t (*crc_fn)(const unsigned char *, size_t);
typedef uint32_t (*crc_copy_fn)(unsigned char *, const unsigned char *, size_t);
static crc_fn crc32c = crc32c_table;
static crc_copy_fn crc32c_copy = crc32c_copy_table;

static inline uint32_t masked(uint32_t c) {
    return ((c >> 15) | (c << 17)) + MASK_DELTA;
}

static inline uint64_t load_u64le(const unsigned char *p) {
    return (uint64_t)p[0] | ((uint64_t)p[1] << 8) | ((uint64_t)p[2] << 16) | ((uint64_t)p[3] << 24) |
           ((uint64_t)p[4] << 32) | ((uint64_t)p[5] << 40) | ((uint64_t)p[6] << 48) | ((uint64_t)p[7] << 56);
}

static inline uint32_t load_u32le(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

enum { OK = 0, BAD_LENGTH = 1, BAD_PAYLOAD = 2 };

/* Recycled payload objects. Each record's bytes object costs a malloc, and a free when the consumer drops
 * it: for records of about 1 KiB glibc's slower paths (its thread cache stops at 1032 bytes), ~15% of
 * a read. So the walker keeps a reference to the payload objects it made, oldest first, in a ring of at
 * most RING_ITEMS objects and RING_BYTES payload bytes. When the oldest has no reference left but the
 * ring's (refcount 1: no one can see it any more) and is the size wanted, it is rewritten in place and
 * handed out again -- what CPython does with zip's and enumerate's result tuples. Otherwise a new object
 * is made, and the oldest is let go when the ring is full. The ring is touched only with the GIL held;
 * builds without a GIL (where a refcount of 1 proves nothing) do not recycle. */
#define RING_ITEMS 4096
#define RING_BYTES (4 << 20)
#define RING_ITEM_MAX (64 << 10) /* larger records are rarer, and malloc serves them well */
#ifdef Py_GIL_DISABLED
#define RECYCLE 0
#else
#define RECYCLE 1
#endif
static PyObject *ring[RING_ITEMS];
static size_t ring_head = 0, ring_len = 0;
static Py_ssize_t ring_bytes = 0;
static unsigned long long ring_reused = 0, ring_made = 0;

static void ring_drop_oldest(void) {
    PyObject *o = ring[ring_head];
    ring_bytes -= Py_SIZE(o);
    ring_head = (ring_head + 1) % RING_ITEMS;
    ring_len--;
    Py_DECREF(o); /* frees it if the consumer has let go of it too */
}

static PyObject *new_payload(Py_ssize_t length) {
    if (!RECYCLE || length < 1 || length > RING_ITEM_MAX) return PyBytes_FromStringAndSize(NULL, length);
    if (ring_len) {
        PyObject *o = ring[ring_head];
        if (Py_REFCNT(o) == 1 && Py_SIZE(o) == length) { /* move it from oldest to newest */
            ring_head = (ring_head + 1) % RING_ITEMS;
            ring[(ring_head + ring_len - 1) % RING_ITEMS] = o;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
            ((PyBytesObject *)o)->ob_shash = -1; /* forget the hash cached for the old contents */
#pragma GCC diagnostic pop
            Py_INCREF(o);
            ring_reused++;
            return o;
        }
    }
    while (ring_len && (ring_len == RING_ITEMS || ring_bytes + length > RING_BYTES)) ring_drop_oldest();
    PyObject *o = PyBytes_FromStringAndSize(NULL, length);
    if (o == NULL) return NULL;
    Py_INCREF(o);
    ring[(ring_head + ring_len) % RING_ITEMS] = o;
    ring_len++;
    ring_bytes += length;
    ring_made++;
    return o;
}

static PyObject *recycling_py(PyObject *self, PyObject *args) {
    int release = 0;
    if (!PyArg_ParseTuple(args, "|p:recycling", &release)) return NULL;
    PyObject *out = Py_BuildValue("{s:n,s:n,s:K,s:K}", "held", (Py_ssize_t)ring_len, "held_bytes", ring_bytes,
                                  "reused", ring_reused, "made", ring_made);
    if (release)
        while (ring_len) ring_drop_oldest();
    return out;
}

static PyObject *split_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start;
    int verify;
    if (!PyArg_ParseTuple(args, "y*np:split_records", &view, &start, &verify)) return NULL;
    const unsigned char *buf = (const unsigned char *)view.buf;
    size_t size = (size_t)view.len;
    if (start < 0 || (size_t)start > size) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "split_records: start is outside the buffer");
        return NULL;
    }
    int64_t *starts = NULL;
    size_t count = 0, cap = 0, pos = (size_t)start;
    int status = OK;
    PyObject *offsets = NULL, *error = NULL, *result = NULL;
    PyObject *payloads = NULL;
    /* Pass 1, GIL held: walk the headers (length CRCs are 8 bytes each), then make the bytes objects,
     * uninitialised, in a list of the exact size. */
    while (size - pos >= HEADER) {
        const unsigned char *h = buf + pos;
        uint64_t length = load_u64le(h);
        size_t avail = size - pos;
        if (avail < FRAMING || length > (uint64_t)(avail - FRAMING)) break; /* incomplete: read more */
        if (verify && masked(crc32c(h, 8)) != load_u32le(h + 8)) {
            status = BAD_LENGTH;
            break;
        }
        if (count == cap) {
            size_t grow = cap ? cap * 2 : 1024;
            int64_t *more = (int64_t *)realloc(starts, grow * sizeof(int64_t));
            if (more == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            starts = more;
            cap = grow;
        }
        starts[count++] = (int64_t)pos;
        pos += (size_t)length + FRAMING;
    }
    payloads = PyList_New((Py_ssize_t)count);
    if (payloads == NULL) goto done;
    for (size_t i = 0; i < count; i++) {
        PyObject *b = new_payload((Py_ssize_t)load_u64le(buf + starts[i]));
        if (b == NULL) goto done; /* the list's remaining slots are NULL: freeing it is safe */
        PyList_SET_ITEM(payloads, (Py_ssize_t)i, b);
    }
    /* Pass 2, GIL released: copy each payload into its bytes object, computing its CRC on the way (one
     * read of the payload). The objects are reachable only from our list (and the recycling ring, which
     * reuses nothing our list holds), so no other thread can see them half written; the buffer stays
     * exported (unresizable) meanwhile. Other threads -- another file's
     * reader, the consumer -- run while this copies. */
    size_t bad = count;
    {
        PyObject **items = ((PyListObject *)payloads)->ob_item;
        Py_BEGIN_ALLOW_THREADS
        for (size_t i = 0; i < count; i++) {
            const unsigned char *h = buf + starts[i];
            size_t length = (size_t)PyBytes_GET_SIZE(items[i]);
            unsigned char *dst = (unsigned char *)PyBytes_AS_STRING(items[i]);
            if (verify) {
                uint32_t c = crc32c_copy(dst, h + HEADER, length);
                if (masked(c) != load_u32le(h + HEADER + length)) {
                    bad = i;
                    break;
                }
            } else {
                memcpy(dst, h + HEADER, length);
            }
        }
        Py_END_ALLOW_THREADS
    }
    if (bad < count) { /* the first damaged payload ends the block, before any later header error */
        if (PyList_SetSlice(payloads, (Py_ssize_t)bad, (Py_ssize_t)count, NULL) < 0) goto done;
        pos = (size_t)starts[bad];
        count = bad;
        status = BAD_PAYLOAD;
    }
    offsets = PyBytes_FromStringAndSize(count ? (const char *)starts : NULL,
                                        (Py_ssize_t)(count * sizeof(int64_t)));
    if (offsets == NULL) goto done;
    if (status == BAD_LENGTH) {
        error = PyUnicode_FromString("length");
    } else if (status == BAD_PAYLOAD) {
        error = PyUnicode_FromString("payload");
    } else {
        error = Py_None;
        Py_INCREF(error);
    }
    if (error == NULL) goto done;
    result = Py_BuildValue("(OOnO)", payloads, offsets, (Py_ssize_t)pos, error);
done:
    Py_XDECREF(payloads);
    Py_XDECREF(offsets);
    Py_XDECREF(error);
    free(starts);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *crc32c_py(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*:crc32c", &view)) return NULL;
    uint32_t c = crc32c((const unsigned char *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

static PyObject *crc32c_table_py(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*:_crc32c_table", &view)) return NULL;
    uint32_t c = crc32c_table((const unsigned char *)view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef methods[] = {
    {"split_records", split_records, METH_VARARGS,
     "split_records(buffer, start, verify_crc) -> (payloads, starts, end, error): the complete TFRecord "
     "records of buffer[start:] (see formats/_tfrecord_c.c)."},
    {"recycling", recycling_py, METH_VARARGS,
     "recycling(release=False) -> dict: the payload objects held for reuse (held, held_bytes) and the "
     "counts reused and made so far; release=True lets go of the held ones."},
    {"crc32c", crc32c_py, METH_VARARGS, "crc32c(data) -> int: the (unmasked) CRC32C of data."},
    {"_crc32c_table", crc32c_table_py, METH_VARARGS,
     "_crc32c_table(data) -> int: the same through the table fallback (for tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_tfrecord_c", "TFRecord framing and CRC32C checks in C.", -1, methods,
};

PyMODINIT_FUNC PyInit__tfrecord_c(void) {
    init_table();
    int hardware = 0;
#ifdef JF_HAVE_SSE42_PATH
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) {
        init_sse42();
        crc32c = crc32c_sse42;
        crc32c_copy = crc32c_copy_sse42;
        hardware = 1;
    }
#endif
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "HARDWARE_CRC", hardware) < 0 ||
        PyModule_AddIntConstant(m, "RING_ITEMS", RECYCLE ? RING_ITEMS : 0) < 0 ||
        PyModule_AddIntConstant(m, "RING_BYTES", RECYCLE ? RING_BYTES : 0) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
