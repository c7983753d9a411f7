/* The module: resource and scope, the request walk of decode() and check(), stats() and the method table. */
#include "otlp_native.h"

/* Spans decoded since import, by path (stats()): what the Python step still costs, measured. */
unsigned long long lsh_spans_native, lsh_spans_python, lsh_spans_native_priced;

/* ---------- resource, scope ---------- */

/* A service or scope name is copied into every span's row: cut past MAX_SHARED_NAME code points, as
 * otlp_decode.MAX_SHARED_NAME (the resource keeps the whole service.name once). */
static int cut_shared_name(PyObject **name) {
    if (*name == NULL || !PyUnicode_Check(*name) || PyUnicode_GET_LENGTH(*name) <= MAX_SHARED_NAME) return 0;
    PyObject *cut = PyUnicode_Substring(*name, 0, MAX_SHARED_NAME);
    if (cut == NULL) return -1;
    Py_SETREF(*name, cut);
    return 0;
}

static int validate_entity_ref(Decoder *d, Slice s, int depth) {
    if (depth > MAX_DEPTH) return fail(d, "nested too deep");
    Rd r = {s.p, s.p + s.n};
    while (r.p < r.end) {
        Field f;
        if (rd_field(d, &r, &f, depth) < 0) return -1;
        if (f.num >= 1 && f.num <= 4 && f.wt == 2 && want_string(d, &f) < 0) return -1;
    }
    return 0;
}

/* The resource's attributes as JSON, handed to the Decoded once (add_resource) for the key its spans carry, and
 * its service.name when a string (bytes as their base64 text, as the reference reads every attribute). */
static int read_resource(Decoder *d, Sink *k, Acc *res, Entries *scratch, int depth) {
    Slices kvs = {NULL, 0, 0};
    int rc = -1;
    AccIter it = {0};
    Slice piece;
    int more;
    while ((more = lsh_acc_next(d, res, &it, &piece)) > 0) {
        Rd r = {piece.p, piece.p + piece.n};
        while (r.p < r.end) {
            Field f;
            if (rd_field(d, &r, &f, depth) < 0) goto done;
            if (f.num == 1 && f.wt == 2 && slices_push(&kvs, f.s) < 0) goto done;
            if (f.num == 3 && f.wt == 2 && validate_entity_ref(d, f.s, depth + 1) < 0) goto done;
        }
    }
    if (more < 0) goto done;
    if (lsh_read_entries(d, &kvs, scratch, depth + 1) < 0) goto done;
    d->json.n = 0;
    if (lsh_entries_out(d, scratch, k->check ? NULL : &d->json, NULL) < 0) goto done;
    if (k->check) { /* the same values read; no key, no service name */
        rc = 0;
        goto done;
    }
    PyObject *json = lsh_ascii_str(d->json.p, d->json.n);
    if (json == NULL) goto done;
    Py_XSETREF(k->resource_key, PyObject_CallMethod(k->out, "add_resource", "O", json));
    Py_DECREF(json);
    if (k->resource_key == NULL) goto done;
    PyObject *service = Py_None;
    for (size_t i = 0; i < scratch->n; i++) {
        Entry *e = &scratch->v[i];
        if (e->show && e->key.n == 12 && memcmp(e->key.p, "service.name", 12) == 0) {
            Value *v = &scratch->v[e->last].value;
            if (v->kind == V_STRING || v->kind == V_BYTES) {
                service = NULL;
                if (lsh_value_out(d, v, NULL, &service) < 0) goto done;
                Py_XSETREF(k->service, service);
                if (cut_shared_name(&k->service) < 0) goto done;
            }
            break;
        }
    }
    if (service == Py_None) Py_XSETREF(k->service, Py_NewRef(Py_None));
    rc = 0;
done:
    slices_free(&kvs);
    return rc;
}

static int read_scope(Decoder *d, Sink *k, Acc *scope, Entries *scratch, int depth) {
    Slices kvs = {NULL, 0, 0};
    Slice name = {(const uint8_t *)"", 0};
    int rc = -1;
    AccIter it = {0};
    Slice piece;
    int more;
    while ((more = lsh_acc_next(d, scope, &it, &piece)) > 0) {
        Rd r = {piece.p, piece.p + piece.n};
        while (r.p < r.end) {
            Field f;
            if (rd_field(d, &r, &f, depth) < 0) goto done;
            if ((f.num == 1 || f.num == 2) && f.wt == 2) {
                if (want_string(d, &f) < 0) goto done;
                if (f.num == 1) name = f.s;
            } else if (f.num == 3 && f.wt == 2 && slices_push(&kvs, f.s) < 0) {
                goto done;
            }
        }
    }
    if (more < 0) goto done;
    if (lsh_read_entries(d, &kvs, scratch, depth + 1) < 0 || lsh_entries_out(d, scratch, NULL, NULL) < 0) goto done;
    if (k->check) {
        rc = 0;
        goto done;
    }
    Py_XSETREF(k->scope, name.n ? PyUnicode_DecodeUTF8((const char *)name.p, (Py_ssize_t)name.n, NULL)
                                : Py_NewRef(Py_None));
    rc = k->scope == NULL || cut_shared_name(&k->scope) < 0 ? -1 : 0;
done:
    slices_free(&kvs);
    return rc;
}

/* The scope (or resource) may come after its spans (or scopes) on the wire, and is read first: a first pass
 * validates the message's fields and finds it, a second reads the children in order. Nothing is kept per child,
 * so a body of many tiny spans costs no memory per span beyond its row. The second pass cannot fail: the
 * first read the same fields. */
static int read_scope_spans(Decoder *d, Sink *k, Slice s, Entries *scratch, int depth) {
    Rd r = {s.p, s.p + s.n};
    Acc scope = {0};
    while (r.p < r.end) {
        Field f;
        if (rd_field(d, &r, &f, depth) < 0) return -1;
        if (f.num == 1 && f.wt == 2) lsh_acc_add(&scope, f.s, s, 1, 0);
        if (f.num == 3 && f.wt == 2 && want_string(d, &f) < 0) return -1;
    }
    if (read_scope(d, k, &scope, scratch, depth + 1) < 0) return -1;
    r = (Rd){s.p, s.p + s.n};
    while (r.p < r.end) {
        Field f;
        if (rd_field(d, &r, &f, depth) < 0) return -1;
        if (f.num == 2 && f.wt == 2 && lsh_add_span(d, k, f.s, scratch, depth + 1) < 0) return -1;
    }
    return 0;
}

static int read_resource_spans(Decoder *d, Sink *k, Slice s, Entries *scratch) {
    int depth = 1;
    Rd r = {s.p, s.p + s.n};
    Acc resource = {0};
    while (r.p < r.end) {
        Field f;
        if (rd_field(d, &r, &f, depth) < 0) return -1;
        if (f.num == 1 && f.wt == 2) lsh_acc_add(&resource, f.s, s, 1, 0);
        if (f.num == 3 && f.wt == 2 && want_string(d, &f) < 0) return -1;
    }
    if (read_resource(d, k, &resource, scratch, depth + 1) < 0) return -1;
    r = (Rd){s.p, s.p + s.n};
    while (r.p < r.end) {
        Field f;
        if (rd_field(d, &r, &f, depth) < 0) return -1;
        if (f.num == 2 && f.wt == 2 && read_scope_spans(d, k, f.s, scratch, depth + 1) < 0) return -1;
    }
    return 0;
}

/* decode(body, decoded, errors, tail_scores) -> (rejected, rows, columns, tail_rows, score_rows, score_columns,
 * score_inserts): columns as col_release gives them, in the order of the Sink's; tail_rows the int64 rows whose
 * convention columns the Python step filled; score_inserts, per score row the Python step appended to the
 * Decoded's lists (tail_scores is one of them), the number of native score rows before it.
 *
 * check(body, decoded, errors, tail_scores, lists, max_errors) -> (rejected, rows, score_rows): the same walk,
 * the same refusals (BadPayload with the same message) and counts, building nothing per span. ``decoded`` is a
 * scratch Decoded for the Python step, whose ``nulled`` counts as the decode's does; ``lists`` are its column
 * lists, emptied after each span it takes; ``errors`` gets the first max_errors messages of rejected spans. */
static PyObject *run(PyObject *args, int check) {
    Py_buffer body;
    PyObject *tail_scores, *out, *errors, *clear = NULL;
    Py_ssize_t max_errors = 0;
    if (!lsh_cfg.ready) {
        PyErr_SetString(PyExc_RuntimeError, "configure() first");
        return NULL;
    }
    if (check ? !PyArg_ParseTuple(args, "y*OO!O!O!n", &body, &out, &PyList_Type, &errors, &PyList_Type,
                                  &tail_scores, &PyTuple_Type, &clear, &max_errors)
              : !PyArg_ParseTuple(args, "y*OO!O!", &body, &out, &PyList_Type, &errors, &PyList_Type, &tail_scores))
        return NULL;
    for (Py_ssize_t i = 0; clear != NULL && i < PyTuple_GET_SIZE(clear); i++) {
        if (!PyList_Check(PyTuple_GET_ITEM(clear, i))) {
            PyBuffer_Release(&body);
            PyErr_SetString(PyExc_TypeError, "check() empties lists");
            return NULL;
        }
    }
    Sink *k = PyMem_Calloc(1, sizeof(Sink));
    Decoder d;
    memset(&d, 0, sizeof d);
    d.slot = PyMem_Malloc((lsh_cfg.nkeys + 1) * sizeof(int));
    if (k == NULL || d.slot == NULL) {
        PyMem_Free(k);
        PyMem_Free(d.slot);
        PyBuffer_Release(&body);
        return PyErr_NoMemory();
    }
    PyObject *result = NULL, *columns = NULL, *score_columns = NULL;
    int rc = 0;
    k->ncols = lsh_cfg.ncols;
    if (k->ncols < COL_NULLS) {
        PyErr_SetString(PyExc_ValueError, "fewer column types than columns");
        rc = -1;
    }
    for (int i = 0; i < k->ncols && rc == 0 && !check; i++) rc = lsh_col_init(&k->cols[i], lsh_cfg.storage[i]);
    for (int i = 0; i < N_SCORE && rc == 0 && !check; i++)
        rc = lsh_col_init(&k->score_cols[i], lsh_cfg.score_storage[i]);
    k->check = check;
    /* The key set starts sized for a span per 128 bytes of body, at most 2^20 slots (16 MiB, a quarter of the
     * largest body): an exporter's spans are 200-400 bytes, so its set never grows, where growing from 64 slots
     * rehashed every key about once more. Smaller spans grow it as they come. */
    k->seen_first = 64;
    while (k->seen_first < ((size_t)body.len / 128) * 4 / 3 && k->seen_first < ((size_t)1 << 20)) k->seen_first *= 2;
    k->max_errors = max_errors;
    k->clear = clear;
    k->tail_scores = tail_scores;
    k->out = out;
    k->errors = errors;
    for (size_t i = 0; i < lsh_cfg.nkeys; i++) d.slot[i] = -1;
    Entries scratch = {NULL, 0, 0, 0};
    Rd r = {body.buf, (const uint8_t *)body.buf + body.len};
    while (rc == 0 && r.p < r.end) {
        Field f;
        rc = rd_field(&d, &r, &f, 0);
        if (rc == 0 && f.num == 1 && f.wt == 2) rc = read_resource_spans(&d, k, f.s, &scratch);
    }
    lsh_entries_free(&scratch);
    PyMem_Free(d.slot);
    PyMem_Free(d.json.p);
    Py_XDECREF(k->service);
    Py_XDECREF(k->resource_key);
    Py_XDECREF(k->scope);
    PyBuffer_Release(&body);
    if (rc < 0) {
        if (d.error != NULL && !PyErr_Occurred())
            PyErr_Format(lsh_cfg.bad_payload, "not an OTLP ExportTraceServiceRequest in protobuf: %s", d.error);
        goto done;
    }
    if (check) {
        result = Py_BuildValue("(lll)", k->rejected, k->rows, k->score_rows);
        goto done;
    }
    if ((columns = PyTuple_New(k->ncols)) == NULL || (score_columns = PyTuple_New(N_SCORE)) == NULL) goto done;
    Py_ssize_t rows = (Py_ssize_t)k->cols[0].len, score_rows = (Py_ssize_t)k->score_cols[0].len;
    for (int i = 0; i < k->ncols + N_SCORE; i++) {
        PyObject *col = lsh_col_release(i < k->ncols ? &k->cols[i] : &k->score_cols[i - k->ncols]);
        if (col == NULL) goto done;
        PyTuple_SET_ITEM(i < k->ncols ? columns : score_columns, i < k->ncols ? i : i - k->ncols, col);
    }
    PyObject *tail = lsh_raw_release(&k->tail_rows);
    PyObject *inserts = tail ? lsh_raw_release(&k->score_inserts) : NULL;
    if (inserts != NULL)
        result = Py_BuildValue("(lnONnON)", k->rejected, rows, columns, tail, score_rows, score_columns, inserts);
    else
        Py_XDECREF(tail);
done:
    Py_XDECREF(columns);
    Py_XDECREF(score_columns);
    for (int i = 0; i < k->ncols; i++) lsh_col_free(&k->cols[i]);
    for (int i = 0; i < N_SCORE; i++) lsh_col_free(&k->score_cols[i]);
    raw_free(&k->tail_rows);
    raw_free(&k->score_inserts);
    PyMem_Free(k->seen);
    PyMem_Free(k);
    return result;
}

static PyObject *decode(PyObject *self, PyObject *args) { return run(args, 0); }

static PyObject *check(PyObject *self, PyObject *args) { return run(args, 1); }

static PyObject *stats(PyObject *self, PyObject *unused) {
    return Py_BuildValue("{sKsKsK}", "native", lsh_spans_native, "python", lsh_spans_python, "native_priced",
                         lsh_spans_native_priced);
}

static PyMethodDef methods[] = {
    {"stats", stats, METH_NOARGS, "stats() -> spans decoded since import, by the path their conventions took"},
    {"configure", lsh_configure, METH_VARARGS,
     "configure(bad_payload, tail, price, kinds, statuses, name_operations, agent_operation, reported, "
     "price_table, keys, fallback_keys, message_keys, operation_key, probe_key, promote_spec, special, "
     "event_names, pass_labels, fail_labels, column_types, score_types)"},
    {"decode", decode, METH_VARARGS,
     "decode(body, decoded, errors, tail_scores) -> (rejected, rows, columns, tail_rows, score_rows, "
     "score_columns, score_inserts)"},
    {"check", check, METH_VARARGS,
     "check(body, decoded, errors, tail_scores, lists, max_errors) -> (rejected, rows, score_rows)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_otlp_native", NULL, -1, methods};

/* The key of the attribute tables' hash (attributes.c), secret to this process. */
static int seed_hash(void) {
    PyObject *os = PyImport_ImportModule("os");
    PyObject *key = os ? PyObject_CallMethod(os, "urandom", "i", 16) : NULL;
    Py_XDECREF(os);
    if (key == NULL) return -1;
    if (!PyBytes_Check(key) || PyBytes_GET_SIZE(key) != 16) {
        Py_DECREF(key);
        PyErr_SetString(PyExc_RuntimeError, "os.urandom(16) did not give 16 bytes");
        return -1;
    }
    lsh_seed_hash((const uint8_t *)PyBytes_AS_STRING(key));
    Py_DECREF(key);
    return 0;
}

PyMODINIT_FUNC PyInit__otlp_native(void) {
    if (PyType_Ready(&lsh_BufferType) < 0 || seed_hash() < 0) return NULL;
    return PyModule_Create(&module);
}
