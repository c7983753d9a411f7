/* The convention columns of a span the Python step does not need to see: promoted values, operation, probe. */
#include "otlp_native.h"

/* The operation a span's name gives (normalise.operation without attributes), borrowed; NULL for none. */
static PyObject *name_operation(Slice name) {
    size_t head = 0;
    while (head < name.n && name.p[head] != ' ') head++;
    Py_ssize_t n = PyTuple_GET_SIZE(lsh_cfg.prefixes);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *prefix = PyTuple_GET_ITEM(lsh_cfg.prefixes, i);
        if ((size_t)PyUnicode_GET_LENGTH(prefix) == head &&
            memcmp(PyUnicode_1BYTE_DATA(prefix), name.p, head) == 0)
            return prefix;
    }
    return NULL;
}

/* normalise.promote's coercion of one present value: a new reference, or NULL with *python set when only
 * the Python step can say (a number in a string, str() of a list). */
PyObject *lsh_coerce(Decoder *d, int kind, Value *v, int *python) {
    PyObject *obj, *out;
    switch (v->kind) {
    case V_STRING:
    case V_BYTES:
        if (kind == P_INT || kind == P_FLOAT) break;
        obj = NULL;
        return lsh_value_out(d, v, NULL, &obj) < 0 ? NULL : obj;
    case V_BOOL:
        if (kind == P_TEXT) return PyUnicode_FromString(v->i ? "True" : "False");
        break; /* a number column nulls and counts it (normalise.promote_checked) */
    case V_INT:
        if (kind == P_JSONISH) break;
        if (kind == P_FLOAT) return PyFloat_FromDouble((double)v->i);
        obj = PyLong_FromLongLong(v->i);
        if (kind == P_INT || obj == NULL) return obj;
        out = PyObject_Str(obj);
        Py_DECREF(obj);
        return out;
    case V_DOUBLE:
        if (kind == P_JSONISH) break;
        /* Only values the column holds; the rest are nulled and counted by normalise.promote_checked. */
        if (kind == P_INT) {
            if (isfinite(v->f) && floor(v->f) == v->f && v->f >= -9223372036854775808.0 &&
                v->f < 9223372036854775808.0)
                return PyLong_FromDouble(v->f);
            break;
        }
        if (kind == P_FLOAT && !isfinite(v->f)) break;
        obj = PyFloat_FromDouble(v->f);
        if (kind == P_FLOAT || obj == NULL) return obj;
        out = PyObject_Str(obj);
        Py_DECREF(obj);
        return out;
    default: /* array, kvlist: text and JSON columns render them in Python; number columns null and count them */
        break;
    }
    *python = 1;
    return NULL;
}

static Value *slot_value(Decoder *d, Entries *e, int id) {
    int i = d->slot[id];
    return i < 0 ? NULL : &e->v[e->v[i].last].value;
}

/* The convention columns of a span with none of the cases that need Python (otlp_decode.add_conventions
 * gives the same for it): vals[] per promoted column, the operation and probe. Returns 1 when the span needs
 * the Python step after all, 0 when done, -1 on error. */
int lsh_fast_conventions(Decoder *d, Entries *e, Slice name, PyObject **vals, PyObject **op, PyObject **probe) {
    for (int c = 0; c < lsh_cfg.npromote; c++) {
        Promote *p = &lsh_cfg.promote[c];
        for (int a = 0; a < p->n && vals[c] == NULL; a++) {
            Value *v = slot_value(d, e, p->ids[a]);
            if (v == NULL || v->kind == V_NONE) continue;
            int python = 0;
            vals[c] = lsh_coerce(d, p->kind, v, &python);
            if (python) return 1;
            if (vals[c] == NULL) return -1;
        }
        if (vals[c] == NULL) vals[c] = Py_NewRef(Py_None);
    }
    Value *v = slot_value(d, e, lsh_cfg.op_key);
    if (v != NULL && (v->kind == V_STRING || v->kind == V_BYTES) && v->s.n > 0) {
        if (lsh_value_out(d, v, NULL, op) < 0) return -1;
    } else {
        PyObject *named = name_operation(name);
        *op = Py_NewRef(named ? named : Py_None);
    }
    v = slot_value(d, e, lsh_cfg.probe_key);
    if (v == NULL || v->kind == V_NONE || v->kind == V_ARRAY || v->kind == V_KVLIST) *probe = Py_NewRef(Py_None);
    else if (v->kind == V_BOOL || v->kind == V_INT) *probe = PyBool_FromLong(v->i != 0);
    else if (v->kind == V_DOUBLE) *probe = PyBool_FromLong(v->f != 0.0);
    else return 1; /* a string: as_bool's words */
    /* conventions.refine: an agent span named for its agent, a session id sent JSON-quoted. */
    if (vals[lsh_cfg.special[S_AGENT]] == Py_None && *op != Py_None) {
        int cmp = PyObject_RichCompareBool(*op, lsh_cfg.agent_op, Py_EQ);
        if (cmp != 0) return cmp < 0 ? -1 : 1;
    }
    PyObject *session = vals[lsh_cfg.special[S_CONVERSATION]];
    if (session != Py_None && PyUnicode_GET_LENGTH(session) > 0 && PyUnicode_READ_CHAR(session, 0) == '"') return 1;
    return 0;
}
