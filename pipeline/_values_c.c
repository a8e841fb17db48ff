/* Values crossing from a user's generator into the pipeline, in C: the optional fast paths of
 * pipeline/iterators/generator_convert.py (see its doc; the Python way there does the same, slower).
 *
 * snapshot(value) -> the value as it is now
 *
 *   A generator may yield an object and change it before its next value (a buffer it reuses: ``d["x"] =
 *   i; yield d``, ``buf[:] = frame; yield buf``). tf.data converts each value as it is yielded; jaxfeed reads
 *   values a block at a time, so each is snapshotted as it comes, before the generator resumes: mutable
 *   containers (dict, list) and arrays (numpy ndarray, bytearray) that anything besides the value itself may
 *   still hold are copied; immutable values, and objects only the value holds (a fresh ``{"x": i}``, a new
 *   array owning its memory), are kept as they are. "Only the value holds it" is read from the reference
 *   count: the caller (``map(snapshot, ...)``) holds the one reference to a value no one else has, and a
 *   container holds the one reference to an item no one else has (a container anything else holds makes
 *   its items shared too: they may be changed through it). Tuples are rebuilt only when an item was copied;
 *   objects of other types are kept. Structures nested deeper than MAX_DEPTH are kept as they are (a cycle
 *   cannot be converted anyway; the converter raises for it).
 *
 * taken(result, element), call_taken(fn, element) -> a map function's result as it is now
 *
 *   The same for what a map (or scan) function returns, its input element known: see "map results" below.
 *
 * dict_columns(values, keys) -> columns or None
 *
 *   values: a list of rows; keys: a tuple of the signature's keys.
 *   columns: a list with one list per key, the rows' values for that key in row order, when every row is a
 *            plain dict (not a subclass) of exactly these keys and each key's values are all of one type
 *            (``type(v) is type(first)``, as ``generator_convert._all_of_type`` checks);
 *   None:    a block the column way does not take (a row that is not a plain dict, a key missing or extra,
 *            a column of mixed types): the caller then goes value by value, which decides what is accepted.
 *   An error a key's lookup raises (a row key whose __eq__ raises) propagates, as the Python way's does.
 *
 * tuple_columns(values, k) -> columns or None
 *
 *   The same for rows that are tuples of ``k`` items, all of the first row's type (a tuple or a tuple
 *   subclass such as a namedtuple: which row types the signature accepts is the caller's check):
 *   one list per position, each position's values of one type; else None.
 *
 * join_released(values) -> bytearray
 *
 *   ``bytearray().join(values)`` (every value a C-contiguous buffer: an array a batch stacks) with the GIL
 *   released while the bytes are copied, when there are at least JOIN_RELEASE_BYTES of them. A batch of 128
 *   float images is 6 MiB: copied with the GIL held, it stopped the other worker thread of a parallel map at
 *   its next numpy call for the whole copy (P4 as ported: ~6% of its rate on two threads). The values stay
 *   exported (unresizable) during the copy, and the new bytearray is not seen by anyone else before it
 *   returns. A value that is not a C-contiguous buffer raises what its buffer export raises (numpy: ValueError;
 *   ``join_arrays`` then assigns row by row); one that is no buffer at all raises TypeError.
 *
 * The column passes: one pass over the rows with the GIL held and no Python code run (the keys are looked up by their cached
 * hashes): it replaces, per row, the Python way's dict check, length check, one itemgetter call per key and
 * one type check per key (a C-level ``map`` each, ~15-25 ns a value) with one dictionary lookup per key. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* The columns being filled: ``k`` lists of ``n`` items (NULL until set: list_dealloc skips those, so a
 * block given up half-way is simply dropped) and each column's value type, set by its first row. */
typedef struct {
    PyObject *lists;
    PyTypeObject **type;
} Columns;

static int columns_new(Columns *c, Py_ssize_t k, Py_ssize_t n) {
    c->type = NULL;
    c->lists = PyList_New(k);
    if (c->lists == NULL)
        return -1;
    for (Py_ssize_t j = 0; j < k; j++) {
        PyObject *column = PyList_New(n);
        if (column == NULL)
            goto fail;
        PyList_SET_ITEM(c->lists, j, column);
    }
    c->type = PyMem_Malloc(sizeof(PyTypeObject *) * (size_t)k);
    if (c->type == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    return 0;
fail:
    Py_CLEAR(c->lists);
    return -1;
}

/* Row i's value of column j (borrowed); 0 when its type is not the column's (the block is not taken). */
static inline int columns_put(Columns *c, Py_ssize_t i, Py_ssize_t j, PyObject *v) {
    if (i == 0)
        c->type[j] = Py_TYPE(v);
    else if (Py_TYPE(v) != c->type[j])
        return 0;
    Py_INCREF(v);
    PyList_SET_ITEM(PyList_GET_ITEM(c->lists, j), i, v);
    return 1;
}

/* The finished columns (``taken``), else None (``!taken``, no error set) or NULL (an error set). */
static PyObject *columns_end(Columns *c, int taken) {
    PyMem_Free(c->type);
    if (taken)
        return c->lists;
    Py_DECREF(c->lists);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *dict_columns(PyObject *self, PyObject *args) {
    PyObject *values, *keys;
    Columns c;
    if (!PyArg_ParseTuple(args, "O!O!:dict_columns", &PyList_Type, &values, &PyTuple_Type, &keys))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(values), k = PyTuple_GET_SIZE(keys);
    if (n == 0 || k == 0)
        Py_RETURN_NONE;
    if (columns_new(&c, k, n) < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PyList_GET_ITEM(values, i);
        if (!PyDict_CheckExact(row) || PyDict_GET_SIZE(row) != k)
            return columns_end(&c, 0);
        for (Py_ssize_t j = 0; j < k; j++) {
            /* NULL: a key missing (so, the size being equal, another one extra), or an error its lookup
             * raised (left set: it propagates) */
            PyObject *v = PyDict_GetItemWithError(row, PyTuple_GET_ITEM(keys, j));  /* borrowed */
            if (v == NULL || !columns_put(&c, i, j, v))
                return columns_end(&c, 0);
        }
    }
    return columns_end(&c, 1);
}

static PyObject *tuple_columns(PyObject *self, PyObject *args) {
    PyObject *values;
    Py_ssize_t k;
    Columns c;
    if (!PyArg_ParseTuple(args, "O!n:tuple_columns", &PyList_Type, &values, &k))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(values);
    if (n == 0 || k <= 0)
        Py_RETURN_NONE;
    PyTypeObject *row_type = Py_TYPE(PyList_GET_ITEM(values, 0));
    if (!PyType_IsSubtype(row_type, &PyTuple_Type))
        Py_RETURN_NONE;
    if (columns_new(&c, k, n) < 0)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PyList_GET_ITEM(values, i);
        if (Py_TYPE(row) != row_type || PyTuple_GET_SIZE(row) != k)
            return columns_end(&c, 0);
        for (Py_ssize_t j = 0; j < k; j++)
            if (!columns_put(&c, i, j, PyTuple_GET_ITEM(row, j)))
                return columns_end(&c, 0);
    }
    return columns_end(&c, 1);
}

/* ------------------------------------------------------------------------------------------ snapshot */
#define MAX_DEPTH 32

static PyTypeObject *ndarray_type = NULL;  /* numpy.ndarray and numpy.generic (numpy scalars: immutable), */
static PyTypeObject *generic_type = NULL;  /* looked up at first use */

static int look_up_numpy(void) {
    if (ndarray_type != NULL && generic_type != NULL)
        return 0;
    PyObject *numpy = PyImport_ImportModule("numpy");
    if (numpy == NULL)
        return -1;
    if (ndarray_type == NULL)
        ndarray_type = (PyTypeObject *)PyObject_GetAttrString(numpy, "ndarray");
    if (generic_type == NULL)
        generic_type = (PyTypeObject *)PyObject_GetAttrString(numpy, "generic");
    Py_DECREF(numpy);
    return ndarray_type != NULL && generic_type != NULL ? 0 : -1;
}


typedef struct Inputs Inputs;
static PyObject *snap(PyObject *v, int alone, int depth, const Inputs *in);

/* A copy of an array (its ``copy("K")``: the same type, dtype, shape and memory layout, memory of its own),
 * read-only when the array is: the copy stands for the value the function gave, as it gave it. */
static PyObject *copy_array(PyObject *v) {
    PyObject *copy = PyObject_CallMethod(v, "copy", "s", "K");
    if (copy == NULL) return NULL;
    PyObject *flags = PyObject_GetAttrString(v, "flags");
    PyObject *writeable = flags != NULL ? PyObject_GetAttrString(flags, "writeable") : NULL;
    Py_XDECREF(flags);
    int keep = writeable != NULL ? PyObject_IsTrue(writeable) : -1;
    Py_XDECREF(writeable);
    if (keep == 0) {
        PyObject *done = PyObject_CallMethod(copy, "setflags", "O", Py_False);
        if (done == NULL) keep = -1;
        Py_XDECREF(done);
    }
    if (keep < 0) {
        Py_DECREF(copy);
        return NULL;
    }
    return copy;
}

/* Whether an array ``alone`` in its value may be kept: it owns its memory, or views immutable bytes. */
static int array_is_its_own(PyObject *v) {
    PyObject *base = PyObject_GetAttrString(v, "base");
    if (base == NULL)
        return -1;
    int own = base == Py_None || PyBytes_CheckExact(base);
    Py_DECREF(base);
    return own;
}

static PyObject *snap_dict(PyObject *v, int alone, int depth, const Inputs *in) {
    PyObject *copy = NULL, *key, *item;
    Py_ssize_t pos = 0;
    while (PyDict_Next(v, &pos, &key, &item)) {
        PyObject *s = snap(item, alone && Py_REFCNT(item) == 1, depth + 1, in);
        if (s == NULL)
            goto fail;
        if (s != item) {
            if (copy == NULL && (copy = PyDict_Copy(v)) == NULL) {
                Py_DECREF(s);
                goto fail;
            }
            int err = PyDict_SetItem(copy, key, s);  /* (an existing key: the order is kept) */
            Py_DECREF(s);
            if (err < 0)
                goto fail;
        } else {
            Py_DECREF(s);
        }
    }
    if (copy != NULL)
        return copy;
    if (alone)
        return Py_NewRef(v);
    return PyDict_Copy(v);
fail:
    Py_XDECREF(copy);
    return NULL;
}

static PyObject *snap_list(PyObject *v, int alone, int depth, const Inputs *in) {
    Py_ssize_t n = PyList_GET_SIZE(v);
    PyObject *copy = PyList_New(n);
    if (copy == NULL)
        return NULL;
    int changed = !alone;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(v, i);
        PyObject *s = snap(item, alone && Py_REFCNT(item) == 1, depth + 1, in);
        if (s == NULL) {
            Py_DECREF(copy);
            return NULL;
        }
        changed |= s != item;
        PyList_SET_ITEM(copy, i, s);
    }
    if (changed || PyList_GET_SIZE(v) != n)
        return copy;
    Py_DECREF(copy);
    return Py_NewRef(v);
}

static PyObject *snap_tuple(PyObject *v, int alone, int depth, const Inputs *in) {
    Py_ssize_t n = PyTuple_GET_SIZE(v);
    PyObject *items = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(v, i);
        PyObject *s = snap(item, alone && Py_REFCNT(item) == 1, depth + 1, in);
        if (s == NULL)
            goto fail;
        if (s != item && items == NULL) {
            if ((items = PyTuple_New(n)) == NULL) {
                Py_DECREF(s);
                goto fail;
            }
            for (Py_ssize_t j = 0; j < i; j++)
                PyTuple_SET_ITEM(items, j, Py_NewRef(PyTuple_GET_ITEM(v, j)));
        }
        if (items != NULL)
            PyTuple_SET_ITEM(items, i, s);
        else
            Py_DECREF(s);
    }
    if (items == NULL)
        return Py_NewRef(v);
    if (PyTuple_CheckExact(v))
        return items;
    /* a tuple subclass (a namedtuple): rebuilt by its ``_make`` where it has one, else kept as it is */
    PyObject *make = PyObject_GetAttrString((PyObject *)Py_TYPE(v), "_make");
    if (make == NULL) {
        PyErr_Clear();
        Py_DECREF(items);
        return Py_NewRef(v);
    }
    PyObject *out = PyObject_CallOneArg(make, items);
    Py_DECREF(make);
    Py_DECREF(items);
    return out;
fail:
    Py_XDECREF(items);
    return NULL;
}

/* A new reference to ``v`` as it is now (``v`` itself, or a copy); ``alone``: nothing but its holder in the
 * value holds it. */
static int kept_for_map(PyObject *v, int alone, const Inputs *in);
static int is_input_container(PyObject *v, const Inputs *in);

static PyObject *snap(PyObject *v, int alone, int depth, const Inputs *in) {
    PyTypeObject *t = Py_TYPE(v);
    if (t == &PyLong_Type || t == &PyFloat_Type || t == &PyUnicode_Type || t == &PyBytes_Type ||
        t == &PyBool_Type || v == Py_None || depth > MAX_DEPTH)
        return Py_NewRef(v);
    if (in != NULL && (t == &PyDict_Type || t == &PyList_Type) && is_input_container(v, in))
        alone = 1;  /* a map function's input changed in place and returned: held by the pipeline alone */
    if (t == &PyDict_Type)
        return snap_dict(v, alone, depth, in);
    if (PyTuple_Check(v))
        return snap_tuple(v, alone, depth, in);
    if (t == &PyList_Type)
        return snap_list(v, alone, depth, in);
    if (t == &PyByteArray_Type)
        return alone ? Py_NewRef(v) : PyByteArray_FromObject(v);
    if (ndarray_type != NULL && PyObject_TypeCheck(v, ndarray_type)) {
        if (alone) {
            int own = array_is_its_own(v);
            if (own < 0)
                return NULL;
            if (own)
                return Py_NewRef(v);
        }
        if (in != NULL) {
            int kept = kept_for_map(v, alone, in);
            if (kept < 0)
                return NULL;
            if (kept)
                return Py_NewRef(v);
        }
        return copy_array(v);
    }
    return Py_NewRef(v);  /* numpy scalars and other immutable values; objects of other types as they are */
}

static PyObject *snapshot(PyObject *self, PyObject *v) {
    if (look_up_numpy() < 0)
        return NULL;
    /* the caller (``map``) holds the one reference to a value no one else holds */
    return snap(v, Py_REFCNT(v) == 1, 0, NULL);
}

/* ------------------------------------------------------------------------------------ map results */
/* call_taken(fn, element) -> fn(element) as it is now
 * taken(result, element) -> result as it is now
 *
 *   A map function may return a buffer it reuses (``out[:] = x * 2; return out``): tf.data converts each
 *   result to a tensor as it is made; jaxfeed keeps a block's results in a list until they are batched, so
 *   each result is snapshotted as it is made, before the next call. The rules are ``snapshot``'s, with the
 *   function's input known: memory of the input element (a view of it, the input itself returned) is the
 *   pipeline's, which nothing changes, so it is kept; an input dict or list changed in place and returned is
 *   the pipeline's too. Besides, a view is kept when every array it views through is held by the next one
 *   alone and the last owns its memory (``x.astype(f)[:, ::-1]``: a fresh array seen through a flip).
 *   Anything else an array's memory may be reached through -- a buffer the function keeps -- is copied.
 */
#define MAX_INPUTS 32
struct Inputs {
    PyObject *owners[MAX_INPUTS];  /* the memory owners of the element's arrays (borrowed: the element holds them) */
    int n_owners;
    PyObject *containers[MAX_INPUTS];  /* the element's dicts and lists (borrowed) */
    int n_containers;
};

static int is_input_container(PyObject *v, const Inputs *in) {
    for (int i = 0; i < in->n_containers; i++)
        if (in->containers[i] == v)
            return 1;
    return 0;
}

static int is_input_owner(PyObject *v, const Inputs *in) {
    for (int i = 0; i < in->n_owners; i++)
        if (in->owners[i] == v)
            return 1;
    return 0;
}

/* The object owning an array's memory: the end of its ``base`` chain (an array owning its data, or the
 * buffer object -- bytes, mmap... -- under the last view). A new reference; ``alone`` (may be NULL) is
 * cleared when an array on the way is held by anything besides the view above it. */
static PyObject *memory_owner(PyObject *v, int *alone) {
    PyObject *cur = Py_NewRef(v);
    for (int depth = 0; depth < 64; depth++) {
        PyObject *base = PyObject_GetAttrString(cur, "base");
        if (base == NULL) {
            Py_DECREF(cur);
            return NULL;
        }
        if (base == Py_None) {
            Py_DECREF(base);
            return cur;
        }
        Py_DECREF(cur);
        if (!PyObject_TypeCheck(base, ndarray_type))
            return base;
        if (alone != NULL && Py_REFCNT(base) != 2)  /* the view above holds it, and so do we, now */
            *alone = 0;
        cur = base;
    }
    return cur;
}

static int collect_inputs(PyObject *v, Inputs *in, int depth) {
    if (depth > MAX_DEPTH)
        return 0;
    PyTypeObject *t = Py_TYPE(v);
    if (t == &PyDict_Type || t == &PyList_Type) {
        if (in->n_containers < MAX_INPUTS)
            in->containers[in->n_containers++] = v;
        if (t == &PyDict_Type) {
            PyObject *key, *item;
            Py_ssize_t pos = 0;
            while (PyDict_Next(v, &pos, &key, &item))
                if (collect_inputs(item, in, depth + 1) < 0)
                    return -1;
        } else {
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v); i++)
                if (collect_inputs(PyList_GET_ITEM(v, i), in, depth + 1) < 0)
                    return -1;
        }
        return 0;
    }
    if (PyTuple_Check(v)) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(v); i++)
            if (collect_inputs(PyTuple_GET_ITEM(v, i), in, depth + 1) < 0)
                return -1;
        return 0;
    }
    if (PyObject_TypeCheck(v, ndarray_type) && in->n_owners < MAX_INPUTS) {
        PyObject *owner = memory_owner(v, NULL);
        if (owner == NULL)
            return -1;
        in->owners[in->n_owners++] = owner;  /* kept alive by the element */
        Py_DECREF(owner);
    }
    return 0;
}

/* Whether the array ``v`` (not both alone and owning its memory) may be kept as a map's result (above). */
static int kept_for_map(PyObject *v, int alone, const Inputs *in) {
    int chain_alone = alone;
    PyObject *owner = memory_owner(v, &chain_alone);
    if (owner == NULL)
        return -1;
    int kept = is_input_owner(owner, in) ||
               (chain_alone && (PyBytes_CheckExact(owner) || PyObject_TypeCheck(owner, ndarray_type)));
    Py_DECREF(owner);
    return kept;
}

static PyObject *taken_as(PyObject *result, PyObject *element) {
    Inputs in;
    in.n_owners = in.n_containers = 0;
    if (collect_inputs(element, &in, 0) < 0)
        return NULL;
    /* the caller holds the one reference to a result no one else holds */
    return snap(result, Py_REFCNT(result) == 1, 0, &in);
}

static PyObject *taken(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "taken(result, element)");
        return NULL;
    }
    if (look_up_numpy() < 0)
        return NULL;
    return taken_as(args[0], args[1]);
}

static PyObject *call_taken(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "call_taken(fn, element)");
        return NULL;
    }
    if (look_up_numpy() < 0)
        return NULL;
    PyObject *result = PyObject_CallOneArg(args[0], args[1]);
    if (result == NULL)
        return NULL;
    PyObject *out = taken_as(result, args[1]);
    Py_DECREF(result);
    return out;
}

/* ------------------------------------------------------------------------------------------ pull */
/* A value that cannot change after it is yielded: Python's numbers, strings, bytes, None, numpy scalars. */
static inline int immutable_scalar(PyObject *v) {
    PyTypeObject *t = Py_TYPE(v);
    return t == &PyLong_Type || t == &PyFloat_Type || t == &PyUnicode_Type || t == &PyBytes_Type ||
           t == &PyBool_Type || v == Py_None || PyObject_TypeCheck(v, generic_type);
}

/* The row dict's own key objects for the signature's ``keys`` (new references in ``lookup``, the
 * signature's own where none matches): a str key found by the object a dict holds is found by its pointer,
 * where an equal but other str object costs a hash probe and a memcmp. A generator's rows usually share
 * their key objects (pyarrow's ``to_pylist`` makes them once per table), the signature's are other objects:
 * the pull of P6's rows took 72 ns a row, 56 with the rows' own keys. Only exact str keys are matched (their
 * comparison runs no Python code); a lookup by an equal key finds the same value, so nothing else changes. */
static void adopt_keys(PyObject *row, PyObject *keys, PyObject **lookup, Py_ssize_t k) {
    Py_ssize_t pos = 0;
    PyObject *dk, *dv;
    while (PyDict_Next(row, &pos, &dk, &dv)) {
        if (!PyUnicode_CheckExact(dk))
            continue;
        Py_hash_t h = PyObject_Hash(dk); /* cached for a str in a dict */
        for (Py_ssize_t j = 0; j < k; j++) {
            PyObject *key = PyTuple_GET_ITEM(keys, j);
            if (lookup[j] != key || key == dk || !PyUnicode_CheckExact(key) || PyObject_Hash(key) != h)
                continue;
            if (PyUnicode_Compare(dk, key) == 0) {
                Py_SETREF(lookup[j], Py_NewRef(dk));
                break;
            }
        }
    }
    PyErr_Clear(); /* (exact str compare and hash raise nothing; nothing must leak from here either way) */
}

/* pull_dict_columns(iterator, n, keys) -> (columns, count, one_type, stop, extra)
 *
 * Up to ``n`` values of ``iterator``, each taken apart as it comes (before the iterator resumes, so a
 * generator reusing its dict changes nothing already taken): a plain dict of exactly ``keys`` whose values
 * are immutable scalars goes into ``columns`` (one list per key, ``count`` rows; ``one_type``: each column's
 * values of one type). The pull stops at ``n`` rows (stop 0), at the end (1), at a value that is not such a
 * row (2: ``extra`` is its snapshot, the iterator not resumed after it) or at an error the iterator raised
 * (3: ``extra`` is the exception, cleared). */
static PyObject *pull_dict_columns(PyObject *self, PyObject *args) {
    PyObject *it, *keys;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "OnO!:pull_dict_columns", &it, &n, &PyTuple_Type, &keys))
        return NULL;
    if (!PyIter_Check(it)) {
        PyErr_SetString(PyExc_TypeError, "pull_dict_columns: not an iterator");
        return NULL;
    }
    if (look_up_numpy() < 0)
        return NULL;
    if (n < 0)
        n = 0;
    Py_ssize_t k = PyTuple_GET_SIZE(keys), count = 0;
    Columns c;
    if (columns_new(&c, k, n) < 0)  /* n slots each; cut to ``count`` at the end */
        return NULL;
    PyObject **row_values = PyMem_Malloc(sizeof(PyObject *) * (size_t)(k ? k : 1));
    if (row_values == NULL) {
        PyErr_NoMemory();
        return columns_end(&c, 0);
    }
    PyObject **lookup = PyMem_Malloc(sizeof(PyObject *) * (size_t)(k ? k : 1)); /* see adopt_keys */
    if (lookup == NULL) {
        PyMem_Free(row_values);
        PyErr_NoMemory();
        return columns_end(&c, 0);
    }
    for (Py_ssize_t j = 0; j < k; j++)
        lookup[j] = Py_NewRef(PyTuple_GET_ITEM(keys, j));
    PyObject *extra = NULL;
    int one_type = 1, stop = 0;
    while (count < n) {
        PyObject *row = PyIter_Next(it);
        if (row == NULL) {
            if (PyErr_Occurred()) {
                PyObject *type, *value, *tb;
                PyErr_Fetch(&type, &value, &tb);
                PyErr_NormalizeException(&type, &value, &tb);
                if (tb != NULL && value != NULL)
                    PyException_SetTraceback(value, tb);
                Py_XDECREF(type);
                Py_XDECREF(tb);
                extra = value != NULL ? value : Py_NewRef(Py_None);
                stop = 3;
            } else {
                stop = 1;
            }
            break;
        }
        int fits = PyDict_CheckExact(row) && PyDict_GET_SIZE(row) == k;
        if (fits && count == 0)
            adopt_keys(row, keys, lookup, k);
        for (Py_ssize_t j = 0; fits && j < k; j++) {
            PyObject *v = PyDict_GetItemWithError(row, lookup[j]);  /* borrowed */
            if (v == NULL && PyErr_Occurred()) {
                Py_DECREF(row);
                goto fail;
            }
            fits = v != NULL && immutable_scalar(v);
            row_values[j] = v;
        }
        if (!fits) {  /* the value way takes it, as it is now */
            extra = snap(row, Py_REFCNT(row) == 1, 0, NULL);
            Py_DECREF(row);
            if (extra == NULL)
                goto fail;
            stop = 2;
            break;
        }
        for (Py_ssize_t j = 0; j < k; j++) {
            PyObject *v = row_values[j];
            if (count == 0)
                c.type[j] = Py_TYPE(v);
            else if (Py_TYPE(v) != c.type[j])
                one_type = 0;
            Py_INCREF(v);
            PyList_SET_ITEM(PyList_GET_ITEM(c.lists, j), count, v);
        }
        Py_DECREF(row);  /* (its values are held by the columns now) */
        count++;
    }
    PyMem_Free(row_values);
    for (Py_ssize_t j = 0; j < k; j++)
        Py_DECREF(lookup[j]);
    PyMem_Free(lookup);
    for (Py_ssize_t j = 0; j < k; j++)  /* the slots not filled are NULL: cut them off */
        Py_SET_SIZE(PyList_GET_ITEM(c.lists, j), count);
    PyObject *columns = columns_end(&c, 1);
    return Py_BuildValue("(NnOiN)", columns, count, one_type ? Py_True : Py_False, stop,
                         extra != NULL ? extra : Py_NewRef(Py_None));
fail:
    PyMem_Free(row_values);
    for (Py_ssize_t j = 0; j < k; j++)
        Py_DECREF(lookup[j]);
    PyMem_Free(lookup);
    Py_XDECREF(extra);
    return columns_end(&c, 0);
}

#define JOIN_RELEASE_BYTES (64 << 10) /* below this, a GIL hand-off costs more than the copy */

/* The C-contiguous buffers of the values in ``seq`` (``*got`` of them exported, to release even on failure)
 * and their total length; -1 with an exception set on failure. */
static int export_all(PyObject *seq, Py_buffer **views_out, Py_ssize_t *got, Py_ssize_t *total) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Py_buffer *views = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(Py_buffer));
    *views_out = views;
    *got = *total = 0;
    if (views == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (; *got < n; (*got)++) {
        if (PyObject_GetBuffer(items[*got], &views[*got], PyBUF_SIMPLE) < 0) return -1;
        if (views[*got].len > PY_SSIZE_T_MAX - *total) {
            (*got)++;
            PyErr_NoMemory();
            return -1;
        }
        *total += views[*got].len;
    }
    return 0;
}

/* Copy the ``n`` exported buffers one after another into ``dst`` (``total`` bytes), without the GIL when
 * there are at least JOIN_RELEASE_BYTES of them. */
static void copy_all(char *dst, Py_buffer *views, Py_ssize_t n, Py_ssize_t total) {
    if (total >= JOIN_RELEASE_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++) {
            memcpy(dst, views[i].buf, (size_t)views[i].len);
            dst += views[i].len;
        }
        Py_END_ALLOW_THREADS
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            memcpy(dst, views[i].buf, (size_t)views[i].len);
            dst += views[i].len;
        }
    }
}

static void release_all(Py_buffer *views, Py_ssize_t got) {
    if (views != NULL)
        for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    PyMem_Free(views);
}

static PyObject *join_released(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "join_released: values must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t got, total;
    Py_buffer *views;
    PyObject *out = NULL;
    if (export_all(seq, &views, &got, &total) == 0) {
        out = PyByteArray_FromStringAndSize(NULL, total);
        if (out != NULL && total > 0)
            copy_all(PyByteArray_AS_STRING(out), views, got, total);
    }
    release_all(views, got);
    Py_DECREF(seq);
    if (PyErr_Occurred()) Py_CLEAR(out);
    return out;
}

/* join_into(values, out) -> None: ``join_released`` into the writable C-contiguous buffer ``out`` (a map
 * worker stacks a block straight into shared memory: ``iterators/batch.py``, ``join_arrays``), whose length
 * must be the values' total: ValueError otherwise. ~10x faster than ``np.stack(values, out=out)`` for 1,024
 * rows of 32 int32 (24 us against 313), which made P5's workers ~12% slower. */
static PyObject *join_into(PyObject *self, PyObject *args) {
    PyObject *values, *target;
    if (!PyArg_ParseTuple(args, "OO:join_into", &values, &target)) return NULL;
    Py_buffer out;
    if (PyObject_GetBuffer(target, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return NULL;
    PyObject *seq = PySequence_Fast(values, "join_into: values must be a sequence");
    if (seq == NULL) {
        PyBuffer_Release(&out);
        return NULL;
    }
    Py_ssize_t got, total;
    Py_buffer *views;
    if (export_all(seq, &views, &got, &total) == 0) {
        if (total != out.len)
            PyErr_Format(PyExc_ValueError, "join_into: the values have %zd bytes, the target %zd", total, out.len);
        else
            copy_all((char *)out.buf, views, got, total);
    }
    release_all(views, got);
    Py_DECREF(seq);
    PyBuffer_Release(&out);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"join_into", join_into, METH_VARARGS,
     "join_into(values, out) -> None: join_released into the writable buffer out: see pipeline/_values_c.c"},
    {"join_released", join_released, METH_O,
     "join_released(values) -> bytearray().join(values), the copy without the GIL: see pipeline/_values_c.c"},
    {"pull_dict_columns", pull_dict_columns, METH_VARARGS,
     "pull_dict_columns(iterator, n, keys) -> (columns, count, one_type, stop, extra): see pipeline/_values_c.c"},
    {"snapshot", snapshot, METH_O, "snapshot(value) -> the value as it is now: see pipeline/_values_c.c"},
    {"taken", (PyCFunction)(void (*)(void))taken, METH_FASTCALL,
     "taken(result, element) -> a map function's result as it is now: see pipeline/_values_c.c"},
    {"call_taken", (PyCFunction)(void (*)(void))call_taken, METH_FASTCALL,
     "call_taken(fn, element) -> taken(fn(element), element): see pipeline/_values_c.c"},
    {"dict_columns", dict_columns, METH_VARARGS,
     "dict_columns(values, keys) -> one list per key, or None: see pipeline/_values_c.c"},
    {"tuple_columns", tuple_columns, METH_VARARGS,
     "tuple_columns(values, k) -> one list per position, or None: see pipeline/_values_c.c"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_values_c", NULL, -1, methods};

PyMODINIT_FUNC PyInit__values_c(void) { return PyModule_Create(&module); }
