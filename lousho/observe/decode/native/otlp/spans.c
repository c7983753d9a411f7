/* One span: its fields read from the wire and written to its row of the columns, or handed to the
 * Python step. */
#include "otlp_native.h"

static int append_steal(PyObject *list, PyObject *item) {
    if (item == NULL) return -1;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

static PyObject *hex_str(Slice s) {
    PyObject *out = PyUnicode_New((Py_ssize_t)(s.n * 2), 127);
    if (out == NULL) return NULL;
    Py_UCS1 *p = PyUnicode_1BYTE_DATA(out);
    for (size_t i = 0; i < s.n; i++) {
        p[2 * i] = (Py_UCS1)HEX[s.p[i] >> 4];
        p[2 * i + 1] = (Py_UCS1)HEX[s.p[i] & 15];
    }
    return out;
}

static int all_zero(Slice s) {
    for (size_t i = 0; i < s.n; i++)
        if (s.p[i]) return 0;
    return 1;
}

/* key_hi, key_lo, trace_id, span_id as the reference's objects, for the Python step: the common span never
 * makes them. */
static int span_ids(SpanWire *w, PyObject **ids) {
    if (ids[0] != NULL) return 0;
    ids[0] = PyLong_FromUnsignedLongLong(be64(w->span_id.p));
    ids[1] = PyLong_FromUnsignedLongLong(be64(w->trace_id.p + 8));
    ids[2] = hex_str(w->trace_id);
    ids[3] = hex_str(w->span_id);
    return (ids[0] && ids[1] && ids[2] && ids[3]) ? 0 : -1;
}

static int read_status(Decoder *d, Slice s, int32_t *code, Slice *message, int depth) {
    Rd r = {s.p, s.p + s.n};
    while (r.p < r.end) {
        Field f;
        if (rd_field(d, &r, &f, depth) < 0) return -1;
        if (f.num == 2 && f.wt == 2) {
            if (want_string(d, &f) < 0) return -1;
            *message = f.s;
        } else if (f.num == 3 && f.wt == 0) {
            *code = (int32_t)f.u;
        }
    }
    return 0;
}

/* An Event or a Link: its fields, with the attribute encodings gathered. */
typedef struct {
    uint64_t time;
    Slice name, trace_id, span_id;
    Slices attrs;
} Sub;

static int read_sub(Decoder *d, Slice s, Sub *out, int is_link, int depth) {
    Rd r = {s.p, s.p + s.n};
    out->time = 0;
    out->name.n = out->trace_id.n = out->span_id.n = 0;
    out->name.p = out->trace_id.p = out->span_id.p = (const uint8_t *)"";
    out->attrs.n = 0;
    while (r.p < r.end) {
        Field f;
        if (rd_field(d, &r, &f, depth) < 0) return -1;
        if (!is_link) {
            if (f.num == 1 && f.wt == 1) out->time = f.u;
            else if (f.num == 2 && f.wt == 2) {
                if (want_string(d, &f) < 0) return -1;
                out->name = f.s;
            } else if (f.num == 3 && f.wt == 2) {
                if (slices_push(&out->attrs, f.s) < 0) return -1;
            }
        } else {
            if (f.num == 1 && f.wt == 2) out->trace_id = f.s;
            else if (f.num == 2 && f.wt == 2) out->span_id = f.s;
            else if (f.num == 3 && f.wt == 2) {
                if (want_string(d, &f) < 0) return -1;
            } else if (f.num == 4 && f.wt == 2) {
                if (slices_push(&out->attrs, f.s) < 0) return -1;
            }
        }
    }
    return 0;
}

/* The keys are the sender's, so their slots come from the per-process SipHash the attribute tables use
 * (lsh_key_hash): with a hash anyone can invert, ids chosen to share a slot made 160,000 spans take 10 s. */
static size_t key_slot(uint64_t hi, uint64_t lo, size_t cap) {
    uint8_t bytes[16];
    memcpy(bytes, &hi, 8);
    memcpy(bytes + 8, &lo, 8);
    Slice key = {bytes, 16};
    return (size_t)lsh_key_hash(key) & (cap - 1);
}

/* Adds the span key (hi, lo) to the request's set: 1 if it was there already, 0 if added, -1 out of memory. A
 * slot with hi 0 is empty: an accepted span's id is never all zero. Linear probing, at most 3/4 full. */
static int seen_before(Sink *k, uint64_t hi, uint64_t lo) {
    if (4 * (k->seen_n + 1) > 3 * k->seen_cap) {
        size_t cap = k->seen_cap ? 2 * k->seen_cap : k->seen_first;
        uint64_t *slots = PyMem_Calloc(cap, 2 * sizeof(uint64_t));
        if (slots == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (size_t i = 0; i < k->seen_cap; i++) {
            uint64_t h = k->seen[2 * i], l = k->seen[2 * i + 1];
            if (h == 0) continue;
            size_t j = key_slot(h, l, cap);
            while (slots[2 * j]) j = (j + 1) & (cap - 1);
            slots[2 * j] = h;
            slots[2 * j + 1] = l;
        }
        PyMem_Free(k->seen);
        k->seen = slots;
        k->seen_cap = cap;
    }
    size_t j = key_slot(hi, lo, k->seen_cap);
    for (; k->seen[2 * j]; j = (j + 1) & (k->seen_cap - 1))
        if (k->seen[2 * j] == hi && k->seen[2 * j + 1] == lo) return 1;
    k->seen[2 * j] = hi;
    k->seen[2 * j + 1] = lo;
    k->seen_n++;
    return 0;
}

/* Why the span is refused, or None. A span with the key of an earlier accepted span of the request (its span_id
 * and the low half of its trace_id: the store's key) is refused too: the store would keep only the first, so the
 * client is told rather than losing it silently (otlp_decode._span_problem). */
static PyObject *span_problem(Decoder *d, Sink *k, SpanWire *w) {
    const char *what = NULL;
    if (w->trace_id.n != 16 || all_zero(w->trace_id)) what = "trace_id must be 16 bytes, not all zero";
    else if (w->span_id.n != 8 || all_zero(w->span_id)) what = "span_id must be 8 bytes, not all zero";
    else if (w->parent.n && w->parent.n != 8) what = "parent_span_id must be empty or 8 bytes";
    else if (w->start >= (1ULL << 63) || w->end >= (1ULL << 63))
        what = "timestamps past the year 2262 do not fit a signed 64-bit ns";
    if (what == NULL) {
        int seen = seen_before(k, be64(w->span_id.p), be64(w->trace_id.p + 8));
        if (seen < 0) return NULL;
        if (seen) what = DUPLICATE_SPAN;
    }
    if (what == NULL) return Py_NewRef(Py_None);
    PyObject *name = PyUnicode_DecodeUTF8((const char *)w->name.p, (Py_ssize_t)w->name.n, NULL);
    if (name == NULL) return NULL;
    PyObject *msg = PyUnicode_FromFormat("span %R: %s", name, what);
    Py_DECREF(name);
    return msg;
}

int lsh_add_span(Decoder *d, Sink *k, Slice s, Entries *scratch, int depth) {
    SpanWire w;
    memset(&w, 0, sizeof w);
    w.trace_id.p = w.span_id.p = w.parent.p = w.name.p = (const uint8_t *)"";
    Rd r = {s.p, s.p + s.n};
    int rc = -1;
    Sub sub = {0};
    PyObject *attrs_py = NULL, *events_py = NULL, *name_py = NULL, *start_py = NULL, *end_py = NULL;
    PyObject *ids[4] = {NULL};
    PyObject *vals[MAX_PROMOTED] = {NULL};
    PyObject *operation = NULL, *probe = NULL;
    size_t touched = 0;
    Entries events_scratch = {NULL, 0, 0, 0};
    int32_t status_code = 0;
    Slice status_message = {(const uint8_t *)"", 0};
    while (r.p < r.end) {
        Field f;
        if (rd_field(d, &r, &f, depth) < 0) goto done;
        switch (f.num) {
        case 1: if (f.wt == 2) w.trace_id = f.s; break;
        case 2: if (f.wt == 2) w.span_id = f.s; break;
        case 3: if (f.wt == 2 && want_string(d, &f) < 0) goto done; break;
        case 4: if (f.wt == 2) w.parent = f.s; break;
        case 5:
            if (f.wt == 2) {
                if (want_string(d, &f) < 0) goto done;
                w.name = f.s;
            }
            break;
        case 6: if (f.wt == 0) w.kind = (int32_t)f.u; break;
        case 7: if (f.wt == 1) w.start = f.u; break;
        case 8: if (f.wt == 1) w.end = f.u; break;
        case 9: if (f.wt == 2 && slices_push(&w.attrs, f.s) < 0) goto done; break;
        case 11: if (f.wt == 2 && slices_push(&w.events, f.s) < 0) goto done; break;
        case 13: if (f.wt == 2 && slices_push(&w.links, f.s) < 0) goto done; break;
        case 15: /* each occurrence read over the last, as protobuf merges them */
            if (f.wt == 2 && read_status(d, f.s, &status_code, &status_message, depth + 1) < 0) goto done;
            break;
        }
    }

    PyObject *problem = span_problem(d, k, &w);
    if (problem == NULL) goto done;
    if (problem != Py_None) {
        /* Rejected, but the whole message is still validated, as the reference parser does. A check keeps only
         * the messages its error_message shows; k->rejected counts them all. */
        int bad = 0;
        if (k->check && PyList_GET_SIZE(k->errors) >= k->max_errors) Py_DECREF(problem);
        else bad = append_steal(k->errors, problem);
        k->rejected++;
        if (bad < 0 || lsh_read_entries(d, &w.attrs, scratch, depth + 1) < 0 ||
            lsh_entries_out(d, scratch, NULL, NULL) < 0)
            goto done;
        for (size_t i = 0; i < w.events.n + w.links.n; i++) {
            int is_link = i >= w.events.n;
            Slice e = is_link ? w.links.v[i - w.events.n] : w.events.v[i];
            if (read_sub(d, e, &sub, is_link, depth + 1) < 0 ||
                lsh_read_entries(d, &sub.attrs, scratch, depth + 2) < 0 || lsh_entries_out(d, scratch, NULL, NULL) < 0)
                goto done;
        }
        rc = 0;
        goto done;
    }
    Py_DECREF(problem);

    /* Attributes: JSON always; the convention columns here, or a dict for the Python step. */
    if (lsh_read_entries(d, &w.attrs, scratch, depth + 1) < 0 || lsh_dedupe(scratch) < 0) goto done;
    int needs_tail = 0, has_messages = 0;
    for (size_t i = 0; i < scratch->n; i++) {
        if (!scratch->v[i].show) continue;
        int id = lsh_key_id(scratch->v[i].key);
        if (id < 0) continue;
        d->slot[id] = (int)i;
        scratch->v[touched++].touched_id = id;
        if (lsh_cfg.flags[id] & K_MESSAGES) has_messages = 1;
        else if (lsh_cfg.flags[id] & K_FALLBACK) needs_tail = 1;
    }
    if (!needs_tail) {
        int fast = lsh_fast_conventions(d, scratch, w.name, vals, &operation, &probe);
        if (fast < 0) goto done_slots;
        needs_tail = fast;
    }
    /* Message keys and events: refine reads the messages only for a span without a run id. */
    int has_run_id = !needs_tail && vals[lsh_cfg.special[S_RUN_ID]] != Py_None;
    if (!needs_tail && has_messages && !has_run_id) needs_tail = 1;
    for (size_t i = 0; i < w.events.n && !needs_tail; i++) {
        if (read_sub(d, w.events.v[i], &sub, 0, depth + 1) < 0 || lsh_read_entries(d, &sub.attrs, &events_scratch,
                                                                               depth + 2) < 0 ||
            lsh_dedupe(&events_scratch) < 0)
            goto done_slots;
        needs_tail = lsh_event_needs_python(&events_scratch, sub.name, sub.time, has_run_id);
    }
    for (size_t i = 0; i < touched; i++) d->slot[scratch->v[i].touched_id] = -1;
    /* A check walks the same values (lsh_entries_out with no buffer still reads every one kept) and writes no
     * JSON: b is NULL, and so is every column write below. */
    Buf *b = k->check ? NULL : &d->json;
    if (b) b->n = 0;
    if (lsh_entries_out(d, scratch, b, needs_tail ? &attrs_py : NULL) < 0) goto done;

    Col *c = k->cols;
    PyObject *kind = (w.kind >= 0 && w.kind < PyTuple_GET_SIZE(lsh_cfg.kinds)) ? PyTuple_GET_ITEM(lsh_cfg.kinds, w.kind)
                                                                            : PyTuple_GET_ITEM(lsh_cfg.kinds, 0);
    PyObject *status = (status_code >= 0 && status_code < PyTuple_GET_SIZE(lsh_cfg.statuses))
                           ? PyTuple_GET_ITEM(lsh_cfg.statuses, status_code)
                           : PyTuple_GET_ITEM(lsh_cfg.statuses, 0);
    k->rows++;
    if (b && (col_u64(&c[C_KEY_HI], be64(w.span_id.p)) < 0 || col_u64(&c[C_KEY_LO], be64(w.trace_id.p + 8)) < 0 ||
        col_hex(&c[C_TRACE_ID], w.trace_id) < 0 || col_hex(&c[C_SPAN_ID], w.span_id) < 0 ||
        (w.parent.n ? col_hex(&c[C_PARENT], w.parent) : col_null(&c[C_PARENT])) < 0 ||
        col_str(&c[C_NAME], w.name.p, w.name.n) < 0 || lsh_col_obj(&c[C_KIND], kind) < 0 ||
        col_u64(&c[C_START], w.start) < 0 || col_u64(&c[C_END], w.end) < 0 ||
        lsh_col_obj(&c[C_STATUS_CODE], status) < 0 ||
        (status_message.n ? col_str(&c[C_STATUS_MESSAGE], status_message.p, status_message.n)
                          : col_null(&c[C_STATUS_MESSAGE])) < 0 ||
        lsh_col_obj(&c[C_SERVICE], k->service) < 0 || lsh_col_obj(&c[C_SCOPE], k->scope) < 0 ||
        col_str(&c[C_ATTRIBUTES], b->p, b->n) < 0 || lsh_col_obj(&c[C_RESOURCE], k->resource_key) < 0))
        goto done;

    /* Events and links: JSON, and for the tail the events as the reference's dicts. */
    if (w.events.n) {
        if (b) b->n = 0;
        if (b && BUF_LIT(b, "[") < 0) goto done;
        if (needs_tail && (events_py = PyList_New(0)) == NULL) goto done;
        for (size_t i = 0; i < w.events.n; i++) {
            PyObject *eattrs = NULL;
            if (read_sub(d, w.events.v[i], &sub, 0, depth + 1) < 0 ||
                lsh_read_entries(d, &sub.attrs, scratch, depth + 2) < 0)
                goto done;
            if (b && ((i && BUF_LIT(b, ",") < 0) || BUF_LIT(b, "{\"name\":") < 0 || lsh_json_string(b, sub.name) < 0 ||
                      BUF_LIT(b, ",\"time_ns\":") < 0 || lsh_json_uint(b, sub.time) < 0 ||
                      BUF_LIT(b, ",\"attributes\":") < 0))
                goto done;
            size_t attrs_at = b ? b->n : 0;
            if (lsh_entries_out(d, scratch, b, needs_tail ? &eattrs : NULL) < 0 || (b && BUF_LIT(b, "}") < 0))
                goto done;
            if (!needs_tail && k->check) {
                k->score_rows += key_eq(sub.name, lsh_cfg.evaluation);
                continue;
            }
            if (!needs_tail) {
                /* conventions.refine: the first exception event's type; otlp_decode: a score per evaluation. */
                PyObject **error_type = &vals[lsh_cfg.special[S_ERROR_TYPE]];
                if (*error_type == Py_None && key_eq(sub.name, lsh_cfg.exception)) {
                    Value *v = lsh_entry_value(scratch, LIT("exception.type"));
                    if (v && (v->kind == V_STRING || v->kind == V_BYTES) && v->s.n) {
                        PyObject *text = NULL;
                        if (lsh_value_out(d, v, NULL, &text) < 0) goto done;
                        Py_SETREF(*error_type, text);
                    }
                }
                if (key_eq(sub.name, lsh_cfg.evaluation) &&
                    lsh_add_score(d, k, scratch, b->p + attrs_at, b->n - 1 - attrs_at, (int32_t)i, sub.time, &w,
                              vals[lsh_cfg.special[S_RUN_ID]]) < 0)
                    goto done;
                continue;
            }
            PyObject *ename = PyUnicode_DecodeUTF8((const char *)sub.name.p, (Py_ssize_t)sub.name.n, NULL);
            PyObject *etime = PyLong_FromUnsignedLongLong(sub.time);
            PyObject *event = (ename && etime) ? Py_BuildValue("{sOsOsO}", "name", ename, "time_ns", etime,
                                                               "attributes", eattrs)
                                               : NULL;
            Py_XDECREF(ename);
            Py_XDECREF(etime);
            Py_DECREF(eattrs);
            if (append_steal(events_py, event) < 0) goto done;
        }
        if (b && (BUF_LIT(b, "]") < 0 || col_str(&c[C_EVENTS], b->p, b->n) < 0)) goto done;
    } else if (b && col_null(&c[C_EVENTS]) < 0) {
        goto done;
    }
    if (w.links.n) {
        if (b) b->n = 0;
        if (b && BUF_LIT(b, "[") < 0) goto done;
        for (size_t i = 0; i < w.links.n; i++) {
            if (read_sub(d, w.links.v[i], &sub, 1, depth + 1) < 0 ||
                lsh_read_entries(d, &sub.attrs, scratch, depth + 2) < 0)
                goto done;
            if (b && ((i && BUF_LIT(b, ",") < 0) || BUF_LIT(b, "{\"trace_id\":") < 0 ||
                      lsh_json_hex(b, sub.trace_id) < 0 || BUF_LIT(b, ",\"span_id\":") < 0 ||
                      lsh_json_hex(b, sub.span_id) < 0 || BUF_LIT(b, ",\"attributes\":") < 0))
                goto done;
            if (lsh_entries_out(d, scratch, b, NULL) < 0 || (b && BUF_LIT(b, "}") < 0)) goto done;
        }
        if (b && (BUF_LIT(b, "]") < 0 || col_str(&c[C_LINKS], b->p, b->n) < 0)) goto done;
    } else if (b && col_null(&c[C_LINKS]) < 0) {
        goto done;
    }

    if (needs_tail) {
        /* The Python step appends this span's convention columns to the Decoded's lists; here they are NULL
         * placeholders, which otlp_native.py replaces with those lists' values at the rows noted. */
        if (!k->check) {
            lsh_spans_python++;
            int64_t row = (int64_t)(c[C_KEY_HI].len - 1);
            if (raw_put(&k->tail_rows, &row, 8) < 0) goto done;
            for (int i = C_OPERATION; i < k->ncols; i++) /* the operation and every column after it */
                if (col_null(&c[i]) < 0) goto done;
        }
        if (span_ids(&w, ids) < 0) goto done;
        name_py = PyUnicode_DecodeUTF8((const char *)w.name.p, (Py_ssize_t)w.name.n, NULL);
        start_py = PyLong_FromUnsignedLongLong(w.start);
        end_py = PyLong_FromUnsignedLongLong(w.end);
        if (name_py == NULL || start_py == NULL || end_py == NULL) goto done;
        Py_ssize_t scores_before = PyList_GET_SIZE(k->tail_scores);
        PyObject *result = PyObject_CallFunctionObjArgs(lsh_cfg.tail, k->out, attrs_py, events_py ? events_py : Py_None,
                                                        name_py, start_py, ids[0], ids[1], ids[2], ids[3],
                                                        end_py, NULL);
        if (result == NULL) goto done;
        Py_DECREF(result);
        if (k->check) {
            /* Only the counts are kept (nulled is the scratch Decoded's own): its rows are let go at once. */
            k->score_rows += (long)(PyList_GET_SIZE(k->tail_scores) - scores_before);
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(k->clear); i++)
                if (PyList_SetSlice(PyTuple_GET_ITEM(k->clear, i), 0, PY_SSIZE_T_MAX, NULL) < 0) goto done;
            rc = 0;
            goto done;
        }
        /* Its score rows go after the native score rows so far, as the reference orders them. */
        int64_t at = (int64_t)k->score_cols[0].len;
        for (Py_ssize_t i = scores_before; i < PyList_GET_SIZE(k->tail_scores); i++)
            if (raw_put(&k->score_inserts, &at, 8) < 0) goto done;
    } else if (!k->check) {
        /* conventions.refine's cost: reported, else priced from the table when the call has tokens. */
        PyObject *source = Py_None;
        PyObject **cost = &vals[lsh_cfg.special[S_COST]];
        if (*cost != Py_None) {
            source = lsh_cfg.reported;
        } else if (vals[lsh_cfg.special[S_INPUT_TOKENS]] != Py_None ||
                   vals[lsh_cfg.special[S_OUTPUT_TOKENS]] != Py_None) {
            if ((start_py = PyLong_FromUnsignedLongLong(w.start)) == NULL) goto done;
            PyObject *priced = PyObject_CallFunctionObjArgs(
                lsh_cfg.price, vals[lsh_cfg.special[S_PROVIDER]], vals[lsh_cfg.special[S_RESPONSE_MODEL]],
                vals[lsh_cfg.special[S_REQUEST_MODEL]], vals[lsh_cfg.special[S_INPUT_TOKENS]],
                vals[lsh_cfg.special[S_OUTPUT_TOKENS]], Py_None, Py_None, Py_None, start_py, NULL);
            if (priced == NULL) goto done;
            Py_SETREF(*cost, priced);
            if (priced != Py_None) {
                source = lsh_cfg.price_table;
                lsh_spans_native_priced++;
            }
        }
        if (lsh_col_obj(&c[C_OPERATION], operation) < 0 || lsh_col_obj(&c[COL_PROBE], probe) < 0 ||
            lsh_col_obj(&c[COL_COST_SOURCE], source) < 0)
            goto done;
        for (int i = 0; i < lsh_cfg.npromote; i++)
            if (lsh_col_obj(&c[N_BASE + i], vals[i]) < 0) goto done;
        for (int i = COL_NULLS; i < k->ncols; i++)
            if (col_null(&c[i]) < 0) goto done;
        lsh_spans_native++;
    }
    rc = 0;
    goto done;
done_slots:
    for (size_t i = 0; i < touched; i++) d->slot[scratch->v[i].touched_id] = -1;
done:
    for (int i = 0; i < MAX_PROMOTED; i++) Py_XDECREF(vals[i]);
    for (int i = 0; i < 4; i++) Py_XDECREF(ids[i]);
    Py_XDECREF(operation);
    Py_XDECREF(probe);
    slices_free(&w.attrs);
    slices_free(&w.events);
    slices_free(&w.links);
    slices_free(&sub.attrs);
    lsh_entries_free(&events_scratch);
    Py_XDECREF(attrs_py);
    Py_XDECREF(events_py);
    Py_XDECREF(name_py);
    Py_XDECREF(start_py);
    Py_XDECREF(end_py);
    return rc;
}
