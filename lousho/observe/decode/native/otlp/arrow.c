/* Arrow columns: the cells the inline helpers of otlp_native.h do not write, and the buffers handed to
 * Python without a copy. */
#include "otlp_native.h"

int lsh_col_init(Col *c, int type) {
    memset(c, 0, sizeof *c);
    c->type = type;
    if (type != T_STR) return 0;
    int32_t zero = 0;
    return raw_put(&c->values, &zero, 4);
}

void lsh_col_free(Col *c) {
    raw_free(&c->valid);
    raw_free(&c->values);
    raw_free(&c->data);
}

int lsh_col_mismatch(Col *c) {
    PyErr_Format(PyExc_TypeError, "a value of the wrong type for a column of type %d", c->type);
    return -1;
}

/* A value the convention step computed as a Python object (None is NULL), as its column holds it. */
int lsh_col_obj(Col *c, PyObject *o) {
    if (o == Py_None) return col_null(c);
    switch (c->type) {
    case T_STR: {
        if (!PyUnicode_Check(o)) return lsh_col_mismatch(c);
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(o, &n);
        return s == NULL ? -1 : col_str(c, s, (size_t)n);
    }
    case T_I64: {
        if (!PyLong_Check(o) || PyBool_Check(o)) return lsh_col_mismatch(c);
        long long v = PyLong_AsLongLong(o);
        if (v == -1 && PyErr_Occurred()) return -1;
        return col_u64(c, (uint64_t)v);
    }
    case T_F64:
        if (!PyFloat_Check(o)) return lsh_col_mismatch(c);
        return col_f64(c, PyFloat_AS_DOUBLE(o));
    default:
        if (!PyBool_Check(o) || c->type != T_BOOL) return lsh_col_mismatch(c);
        return raw_bit(&c->values, c->len, o == Py_True) < 0 ? -1 : col_row(c, 1);
    }
}

/* A buffer this module filled, handed to Python without a copy (pa.py_buffer reads it in place). */
typedef struct {
    PyObject_HEAD
    uint8_t *p;
    Py_ssize_t n;
} Buffer;

static int buffer_get(PyObject *self, Py_buffer *view, int flags) {
    Buffer *b = (Buffer *)self;
    return PyBuffer_FillInfo(view, self, b->p, b->n, 1, flags);
}

static void buffer_dealloc(PyObject *self) {
    PyMem_RawFree(((Buffer *)self)->p);
    Py_TYPE(self)->tp_free(self);
}

static PyBufferProcs buffer_procs = {buffer_get, NULL};

PyTypeObject lsh_BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "lousho.observe.decode._otlp_native.Buffer",
    .tp_basicsize = sizeof(Buffer),
    .tp_dealloc = buffer_dealloc,
    .tp_as_buffer = &buffer_procs,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Bytes of one Arrow buffer, read-only, freed with the last reference.",
};

/* The bytes of ``b`` as a Buffer; ``b`` is emptied (the Buffer owns them now). */
PyObject *lsh_raw_release(Raw *b) {
    /* Zeroed to a multiple of 64 bytes past the end, as Arrow pads its own buffers: a reader that takes a
     * bitmap or values a word at a time stays inside the allocation (pyarrow refuses a NULL pointer, even for
     * 0 bytes, so there is always one). */
    size_t padded = (b->n + 64) & ~(size_t)63;
    if (raw_reserve(b, padded - b->n) < 0) return NULL;
    memset(b->p + b->n, 0, padded - b->n);
    Buffer *out = PyObject_New(Buffer, &lsh_BufferType);
    if (out == NULL) return NULL;
    if (padded < b->cap) { /* give back the slack of the last doubling */
        uint8_t *p = PyMem_RawRealloc(b->p, padded);
        if (p != NULL) b->p = p;
    }
    out->p = b->p;
    out->n = (Py_ssize_t)b->n;
    b->p = NULL;
    b->n = b->cap = 0;
    return (PyObject *)out;
}

/* (null_count, validity or None, values, data or None) */
PyObject *lsh_col_release(Col *c) {
    PyObject *valid = NULL, *values = NULL, *data = NULL;
    if (c->nulls) {
        valid = lsh_raw_release(&c->valid);
    } else {
        raw_free(&c->valid);
        valid = Py_NewRef(Py_None);
    }
    values = lsh_raw_release(&c->values);
    data = c->type == T_STR ? lsh_raw_release(&c->data) : Py_NewRef(Py_None);
    PyObject *out = (valid && values && data) ? Py_BuildValue("(nOOO)", (Py_ssize_t)c->nulls, valid, values, data)
                                              : NULL;
    Py_XDECREF(valid);
    Py_XDECREF(values);
    Py_XDECREF(data);
    return out;
}
