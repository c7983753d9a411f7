/* Evaluation events: whether the Python step is needed for one, and the score rows this module writes. */
#include "otlp_native.h"

/* The value a dict of these entries keeps for ``key``; NULL when absent. */
Value *lsh_entry_value(Entries *e, Slice key) {
    for (size_t i = 0; i < e->n; i++)
        if (e->v[i].show && key_eq(e->v[i].key, key)) return &e->v[e->v[i].last].value;
    return NULL;
}

static int is_ascii(Slice s) {
    for (size_t i = 0; i < s.n; i++)
        if (s.p[i] >= 0x80) return 0;
    return 1;
}

/* Whether the Python step is needed for an event (1), or this module can do its part (0). */
int lsh_event_needs_python(Entries *e, Slice name, uint64_t time, int has_run_id) {
    if (key_eq(name, lsh_cfg.details)) return !has_run_id; /* its messages are the span's input and output text */
    if (!key_eq(name, lsh_cfg.evaluation)) return 0;
    if (time > (uint64_t)INT64_MAX) return 1; /* a score's time past BIGINT takes the span's end, counted */
    Value *score = lsh_entry_value(e, LIT("gen_ai.evaluation.score.value"));
    /* Only an integer or a finite double is a score; anything else is nulled and counted by _add_score. */
    if (score && score->kind != V_NONE && !(score->kind == V_INT || (score->kind == V_DOUBLE && isfinite(score->f))))
        return 1;
    Value *label = lsh_entry_value(e, LIT("gen_ai.evaluation.score.label"));
    if (label && (label->kind == V_STRING || label->kind == V_BYTES) && !is_ascii(label->s)) return 1; /* str.lower */
    Slice texts[4] = {LIT("lousho.check.failed"), LIT("gen_ai.evaluation.name"), LIT("gen_ai.evaluation.explanation"),
                      LIT("error.type")};
    for (int i = 0; i < 4; i++) {
        Value *v = lsh_entry_value(e, texts[i]);
        if (v && (v->kind == V_ARRAY || v->kind == V_KVLIST)) return 1; /* str() of a list or dict */
    }
    return 0;
}

/* str(value) of a present, non-list value, or None when absent or None (otlp_decode._add_score). */
static PyObject *text_or_none(Decoder *d, Value *v, int empty_is_none) {
    if (v == NULL || v->kind == V_NONE) return Py_NewRef(Py_None);
    if (empty_is_none && (v->kind == V_STRING || v->kind == V_BYTES) && v->s.n == 0) return Py_NewRef(Py_None);
    int python = 0;
    return lsh_coerce(d, P_TEXT, v, &python);
}

/* One score row of an evaluation event, whose attributes are ``e`` and their JSON ``json``. The cells the
 * reference computes in Python (str(), str.lower and the label sets) are computed as Python objects here too,
 * and written to the columns at once: none is kept. */
int lsh_add_score(Decoder *d, Sink *k, Entries *e, const char *json, size_t json_n, int32_t seq, uint64_t time,
                     SpanWire *w, PyObject *run_id) {
    PyObject *label = NULL, *failed = NULL, *name = NULL, *explanation = NULL, *error_type = NULL;
    Col *c = k->score_cols;
    int rc = -1;
    Value *label_v = lsh_entry_value(e, LIT("gen_ai.evaluation.score.label"));
    label = (label_v && (label_v->kind == V_STRING || label_v->kind == V_BYTES)) ? text_or_none(d, label_v, 0)
                                                                                 : Py_NewRef(Py_None);
    failed = text_or_none(d, lsh_entry_value(e, LIT("lousho.check.failed")), 1);
    name = text_or_none(d, lsh_entry_value(e, LIT("gen_ai.evaluation.name")), 0);
    explanation = text_or_none(d, lsh_entry_value(e, LIT("gen_ai.evaluation.explanation")), 0);
    error_type = text_or_none(d, lsh_entry_value(e, LIT("error.type")), 0);
    if (label == NULL || failed == NULL || name == NULL || explanation == NULL || error_type == NULL) goto done;
    PyObject *passed = Py_None;
    if (label != Py_None) {
        PyObject *low = PyObject_CallMethod(label, "lower", NULL);
        if (low == NULL) goto done;
        int yes = PySet_Contains(lsh_cfg.pass_labels, low), no = yes ? 0 : PySet_Contains(lsh_cfg.fail_labels, low);
        Py_DECREF(low);
        if (yes < 0 || no < 0) goto done;
        passed = yes ? Py_True : no ? Py_False : Py_None;
    }
    if (failed != Py_None) passed = Py_False;
    Value *value = lsh_entry_value(e, LIT("gen_ai.evaluation.score.value"));
    int valued = value && (value->kind == V_INT || value->kind == V_DOUBLE);
    double score = !valued ? 0.0 : value->kind == V_INT ? (double)value->i : value->f;
    if (col_u64(&c[R_KEY_HI], be64(w->span_id.p)) < 0 || col_u64(&c[R_KEY_LO], be64(w->trace_id.p + 8)) < 0 ||
        col_i32(&c[R_SEQ], seq) < 0 || col_hex(&c[R_TRACE_ID], w->trace_id) < 0 ||
        col_hex(&c[R_SPAN_ID], w->span_id) < 0 || lsh_col_obj(&c[R_RUN_ID], run_id) < 0 ||
        lsh_col_obj(&c[R_NAME], name) < 0 || (valued ? col_f64(&c[R_VALUE], score) : col_null(&c[R_VALUE])) < 0 ||
        lsh_col_obj(&c[R_LABEL], label) < 0 || lsh_col_obj(&c[R_EXPLANATION], explanation) < 0 ||
        lsh_col_obj(&c[R_FAILED_CHECK], failed) < 0 || lsh_col_obj(&c[R_PASSED], passed) < 0 ||
        lsh_col_obj(&c[R_ERROR_TYPE], error_type) < 0 || col_u64(&c[R_TIME], time) < 0 ||
        col_str(&c[R_ATTRIBUTES], json, json_n) < 0)
        goto done;
    rc = 0;
done:
    Py_XDECREF(label);
    Py_XDECREF(failed);
    Py_XDECREF(name);
    Py_XDECREF(explanation);
    Py_XDECREF(error_type);
    return rc;
}
