/* The module: transcode(), configure() with json_format's names and the reference's nesting limit, stats(). */
#include "otlp_json.h"

PyObject *lsh_known_names[K_COUNT];
int lsh_max_level;
static unsigned long long n_transcoded, n_fallback;

static PyObject *transcode(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (lsh_known_names[0] == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure() first");
        return NULL;
    }
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Reader r = {(const unsigned char *)view.buf, (const unsigned char *)view.buf + view.len, 0, {NULL, 0, 0}};
    Out o = {NULL, 0, 0};
    int rc = lsh_reserve(&o, (size_t)view.len / 2 + 64);
    if (!rc)
        rc = lsh_request(&r, &o);
    PyBuffer_Release(&view);
    PyObject *result = NULL;
    if (rc == NOMEM) {
        result = NULL;
    } else if (rc == FALLBACK) {
        n_fallback++;
        result = Py_NewRef(Py_None);
    } else {
        n_transcoded++;
        result = PyBytes_FromStringAndSize((const char *)o.buf, (Py_ssize_t)o.len);
    }
    PyMem_Free(o.buf);
    PyMem_Free(r.scratch.buf);
    return result;
}

static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *names;
    int max_level;
    if (!PyArg_ParseTuple(args, "O!i", &PyTuple_Type, &names, &max_level))
        return NULL;
    if (max_level < 1 || max_level > 1000) {
        PyErr_SetString(PyExc_ValueError, "the nesting limit is 1 to 1000");
        return NULL;
    }
    if (PyTuple_GET_SIZE(names) != K_COUNT) {
        PyErr_SetString(PyExc_ValueError, "one set of field names per message");
        return NULL;
    }
    for (int i = 0; i < K_COUNT; i++) {
        PyObject *set = PyTuple_GET_ITEM(names, i);
        if (!PyFrozenSet_Check(set)) {
            PyErr_SetString(PyExc_TypeError, "field names are a frozenset");
            return NULL;
        }
        Py_XSETREF(lsh_known_names[i], Py_NewRef(set));
    }
    lsh_max_level = max_level;
    Py_RETURN_NONE;
}

static PyObject *stats(PyObject *self, PyObject *unused) {
    return Py_BuildValue("((sK)(sK))", "transcoded", n_transcoded, "reference", n_fallback);
}

static PyMethodDef methods[] = {
    {"transcode", transcode, METH_O, "OTLP/JSON trace request -> OTLP/protobuf bytes, or None for the reference"},
    {"configure", configure, METH_VARARGS,
     "the field names json_format knows, per message; the deepest nesting the reference takes"},
    {"stats", stats, METH_NOARGS, "bodies transcoded and bodies handed to the reference since import"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_otlp_json", NULL, -1, methods};

PyMODINIT_FUNC PyInit__otlp_json(void) {
    lsh_init_digits();
    return PyModule_Create(&module);
}
