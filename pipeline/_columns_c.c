/* The rows a generator yields, taken apart into columns in C: the optional fast path of
 * pipeline/iterators/generator_convert.py (``_dict_column_list``, ``_tuple_columns``; see its doc).
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
 * One pass over the rows with the GIL held and no Python code run (the keys are looked up by their cached
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

static PyMethodDef methods[] = {
    {"dict_columns", dict_columns, METH_VARARGS,
     "dict_columns(values, keys) -> one list per key, or None: see pipeline/_columns_c.c"},
    {"tuple_columns", tuple_columns, METH_VARARGS,
     "tuple_columns(values, k) -> one list per position, or None: see pipeline/_columns_c.c"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_columns_c", NULL, -1, methods};

PyMODINIT_FUNC PyInit__columns_c(void) { return PyModule_Create(&module); }
