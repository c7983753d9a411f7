/* OTLP/protobuf ExportTraceServiceRequest bytes -> the store's span and score columns, straight from the
 * wire, in Arrow's layout: each column is a validity bitmap, values (int64, int32, float64, bool bits, or a
 * string column's int32 offsets) and UTF-8 data, in buffers this module owns until Python wraps them with
 * pa.Array.from_buffers (otlp_native.py). No Python object is kept per cell.
 *
 * The reference is lousho/observe/decode/otlp_decode.py (decode_protobuf): this module must give the same
 * columns for every body, and refuse the same bodies. Parsing follows the protobuf (upb) rules the
 * reference parser applies: a non-repeated message field seen twice is merged (each occurrence parsed on its
 * own, into the same value, as it comes: never copied, so a truncated occurrence is refused even when the
 * next would complete it), a scalar seen twice keeps the last value, a known field with an unexpected wire
 * type is an unknown field, unknown fields (groups included) are skipped, field number 0 is refused in a
 * message but not inside a skipped group (upb only checks a group's wire types and its end tag), proto3
 * strings must be valid UTF-8, nesting deeper than 100 messages is refused. JSON cells are byte-identical to
 * json.dumps(separators=(",", ":")) with ensure_ascii, float repr, insertion order (a repeated key keeps
 * its first position and its last value, as a dict does), NaN and infinities as strings.
 *
 * The convention columns (normalise.promote, conventions.refine, cost, scores) are computed here from the
 * alias tables otlp_native.py passes at configure(), for the common case: plain alias lookups with values
 * of the column's type, the price table asked through conventions.table_price, the type of an exception
 * event and the score rows of evaluation events. Any other case (a key refine reads, the messages of a span
 * without a run id, a number sent as a string, an agent named only by its span name...) hands the span to
 * otlp_decode.add_conventions, the reference's own code, with its attributes and events as dicts: it appends
 * that span's convention columns and score rows to the Decoded's lists, and this module leaves NULLs at the
 * span's row and notes where its score rows go.
 *
 * The sources, by job: wire.c (the protobuf wire: merged fields, groups, UTF-8), attributes.c (AnyValue and
 * key/value lists, as JSON cells and dicts), json_text.c (JSON and base64 text of scalars), config.c
 * (configure(): the alias tables and column types), arrow.c (the Arrow columns and the buffers handed to
 * Python), spans.c (one span's row), conventions.c (promoted columns, operation and probe), scores.c (the score
 * rows of evaluation events) and module.c (resource and scope, decode() and check(), stats(), the module).
 * check() is decode()'s walk with Sink.check set: the same refusals and counts, no column written. This header
 * holds what they share: the types, the small helpers every loop calls (static inline, so they inline as they
 * did in one file) and the functions called across files, prefixed lsh_.
 */
#ifndef LOUSHO_OTLP_NATIVE_H
#define LOUSHO_OTLP_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

/* Only PyInit__otlp_native is exported: the functions shared between the sources stay inside the module. */
#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

#define MAX_DEPTH 100
#define MAX_SHARED_NAME 256 /* otlp_decode.MAX_SHARED_NAME */
/* otlp_decode.DUPLICATE_SPAN */
#define DUPLICATE_SPAN                                                                                   \
    "has the key of an earlier span of this request (its span_id and the low 64 bits of its trace_id); the first " \
    "is kept"

/* ---------- the wire: slices of the body, merged fields, growable arrays, the reader ---------- */

typedef struct {
    const uint8_t *p;
    size_t n;
} Slice;

/* A non-repeated message field seen once or more. protobuf merges the occurrences, which reads the same as
 * their fields one occurrence after the other; each occurrence is validated where it is found, and none is
 * copied (copying n merged pieces into ever longer blocks costs n^2). The first occurrence is kept; when there
 * are more, lsh_acc_next walks the message holding them again and yields those from the first on. */
typedef struct {
    Slice first;    /* the first occurrence (of a oneof member: since the member was last set) */
    Slice outer;    /* the message holding the occurrences */
    uint32_t num;   /* their field number in outer */
    uint32_t inner; /* 0, or: the occurrences are the fields ``inner`` of outer's fields ``num`` (an AnyValue
                       member merged across occurrences of KeyValue.value) */
    int seen, more;
} Acc;

typedef struct {
    Slice *v;
    size_t n, cap;
} Slices;

typedef struct {
    char *p;
    size_t n, cap;
} Buf;

typedef struct {
    Buf json;
    const char *error; /* set with the first malformation found */
    int *slot;         /* key id -> index of its entry in the current span's attributes, or -1 */
} Decoder;

typedef struct {
    const uint8_t *p, *end;
} Rd;

/* One field: its number, wire type and value (varint/fixed in u, bytes in s). */
typedef struct {
    uint32_t num;
    int wt;
    uint64_t u;
    Slice s;
} Field;

/* Where lsh_acc_next is in the occurrences of an Acc. Zeroed to start. */
typedef struct {
    Rd outer, mid;
    int started;
} AccIter;

/* ---------- AnyValue and key/value lists ---------- */

enum { V_NONE, V_STRING, V_BOOL, V_INT, V_DOUBLE, V_ARRAY, V_KVLIST, V_BYTES };

typedef struct {
    int kind;
    union { /* the member of ``kind``: a oneof holds one */
        int64_t i; /* bool, int */
        double f;
        Slice s;   /* string, bytes */
        Acc msg;   /* array, kvlist: its occurrences */
    };
} Value;

typedef struct {
    Slice key;
    Value value;
    int show;   /* first occurrence of its key */
    int touched_id; /* scratch: the key ids of a span's attributes, to reset the slot map */
    size_t last; /* index of the last occurrence of its key: the value a dict keeps */
} Entry;

typedef struct {
    Entry *v;
    size_t n, cap;
    int deduped;
} Entries;

/* ---------- module configuration (from otlp_native.py) ---------- */

/* How a promoted column coerces a value (normalise.promote). */
enum { P_TEXT, P_JSONISH, P_INT, P_FLOAT };
/* What a key means to this module. */
enum { K_FALLBACK = 1, K_MESSAGES = 2 };
#define MAX_ALIASES 8
#define MAX_PROMOTED 32
/* A column's storage (otlp_native.py turns each into a pyarrow array with pa.Array.from_buffers). */
enum { T_STR, T_I64, T_F64, T_BOOL, T_I32 };
#define MAX_COLS 80

typedef struct {
    int kind;
    int n;
    int ids[MAX_ALIASES];
} Promote;

/* Indices, among the promoted columns, of those the convention step reads. */
enum { S_AGENT, S_CONVERSATION, S_PROVIDER, S_REQUEST_MODEL, S_RESPONSE_MODEL, S_INPUT_TOKENS, S_OUTPUT_TOKENS,
       S_COST, S_ERROR_TYPE, S_RUN_ID, N_SPECIAL };
/* The score columns, in the order otlp_native.SCORE_COLUMNS passes them. */
enum { R_KEY_HI, R_KEY_LO, R_SEQ, R_TRACE_ID, R_SPAN_ID, R_RUN_ID, R_NAME, R_VALUE, R_LABEL, R_EXPLANATION,
       R_FAILED_CHECK, R_PASSED, R_ERROR_TYPE, R_TIME, R_ATTRIBUTES, N_SCORE };

typedef struct {
    PyObject *bad_payload; /* exception class */
    PyObject *tail;        /* otlp_decode.add_conventions */
    PyObject *price;       /* conventions.table_price */
    PyObject *kinds;       /* tuple of str */
    PyObject *statuses;    /* tuple of str */
    PyObject *prefixes;    /* tuple of str: operations a span name starts with */
    PyObject *agent_op;    /* "invoke_agent" */
    PyObject *reported, *price_table; /* cost_source values */
    Slice evaluation, exception, details; /* event names */
    PyObject *pass_labels, *fail_labels;  /* frozensets of str */
    int storage[MAX_COLS];                /* each column's T_*, in the Sink's order */
    int ncols;
    int score_storage[N_SCORE];           /* each score column's T_* */
    PyObject *event_names;                /* keeps the event name strings alive */
    Slice *keys;           /* every key the convention step reads, by id */
    uint8_t *flags;
    size_t *table;
    size_t nkeys, size;
    int op_key, probe_key;
    Promote promote[MAX_PROMOTED];
    int npromote;
    int special[N_SPECIAL];
    PyObject *owner;       /* keeps the key strings alive */
    int ready;
} Config;

/* ---------- Arrow columns: the store's columns in Arrow's layout, handed to Python as buffers ---------- */

/* Growable bytes on the raw allocator: the buffers outlive the decode, and pyarrow may drop its last
 * reference to them from a thread of its own. */
typedef struct {
    uint8_t *p;
    size_t n, cap;
} Raw;

typedef struct {
    int type;
    Raw valid;  /* validity bitmap */
    Raw values; /* int64 or float64 values, bool bits, or the int32 offsets of a string column */
    Raw data;   /* a string column's UTF-8 */
    size_t len, nulls;
} Col;

/* ---------- spans ---------- */

/* The columns this module fills for every span, in this order (otlp_native.BASE_COLUMNS). */
enum {
    C_KEY_HI, C_KEY_LO, C_TRACE_ID, C_SPAN_ID, C_PARENT, C_NAME, C_KIND, C_START, C_END, C_STATUS_CODE,
    C_STATUS_MESSAGE, C_SERVICE, C_SCOPE, C_ATTRIBUTES, C_RESOURCE /* its key */, C_EVENTS, C_LINKS, C_OPERATION, N_BASE
};

/* After the base columns (their storage from otlp_native.STORAGE, as every column's): the promoted columns
 * (promote spec order), probe, cost_source, then the columns that are NULL for a span the Python step does
 * not see (otlp_native.NULL_COLUMNS). */
#define COL_PROBE (N_BASE + lsh_cfg.npromote)
#define COL_COST_SOURCE (COL_PROBE + 1)
#define COL_NULLS (COL_PROBE + 2)

typedef struct {
    Col cols[MAX_COLS];
    int ncols;
    Raw tail_rows;          /* int64 rows whose convention columns the Python step filled */
    Col score_cols[N_SCORE];
    Raw score_inserts;      /* int64, per score row of the Python step: the native score rows before it */
    PyObject *tail_scores;  /* a column of the Decoded's score lists, which the Python step appends to */
    PyObject *out;          /* the Decoded, handed to the tail */
    PyObject *errors;       /* Decoded.errors */
    long rejected;
    int check;              /* check(): the same walk and counts, but no column, resource or score row built */
    Py_ssize_t max_errors;  /* check(): the messages of rejected spans kept (error_message shows the first few) */
    PyObject *clear;        /* check(): the lists of the Python step's scratch Decoded, emptied after each span */
    long rows, score_rows;  /* check(): accepted spans and their score rows */
    PyObject *service;      /* of the current resource */
    PyObject *resource_key; /* of the current resource: Decoded.add_resource's key for its JSON */
    PyObject *scope;
    uint64_t *seen;         /* the span keys (hi, lo pairs) of this request's accepted spans: an open-addressed set */
    size_t seen_n, seen_cap; /* keys held; slots (a power of two, or 0) */
    size_t seen_first;       /* the slots of the set's first allocation, from the body's size */
} Sink;

typedef struct SpanWire SpanWire;

struct SpanWire {
    Slice trace_id, span_id, parent, name;
    int32_t kind;
    uint64_t start, end;
    Slices attrs, events, links;
};

/* ---------- text ---------- */

static const char HEX[] = "0123456789abcdef";

#define LIT(s) ((Slice){(const uint8_t *)(s), sizeof(s) - 1})

/* ---------- functions called across the sources ---------- */

/* arrow.c */
int lsh_col_init(Col *c, int type);
void lsh_col_free(Col *c);
int lsh_col_mismatch(Col *c);
int lsh_col_obj(Col *c, PyObject *o);
PyObject *lsh_raw_release(Raw *b);
PyObject *lsh_col_release(Col *c);
extern PyTypeObject lsh_BufferType;
/* attributes.c */
void lsh_entries_free(Entries *e);
void lsh_seed_hash(const uint8_t key[16]);
uint64_t lsh_key_hash(Slice k);
int lsh_dedupe(Entries *a);
int lsh_value_out(Decoder *d, Value *v, Buf *b, PyObject **py);
int lsh_entries_out(Decoder *d, Entries *e, Buf *b, PyObject **py);
int lsh_read_entries(Decoder *d, Slices *kvs, Entries *out, int depth);
/* config.c */
int lsh_key_id(Slice key);
PyObject *lsh_configure(PyObject *self, PyObject *args);
extern Config lsh_cfg;
/* conventions.c */
PyObject *lsh_coerce(Decoder *d, int kind, Value *v, int *python);
int lsh_fast_conventions(Decoder *d, Entries *e, Slice name, PyObject **vals, PyObject **op, PyObject **probe);
/* json_text.c */
int lsh_json_string(Buf *b, Slice s);
int lsh_json_hex(Buf *b, Slice s);
int lsh_json_int(Buf *b, int64_t v);
int lsh_json_uint(Buf *b, uint64_t v);
int lsh_json_double(Buf *b, double v);
size_t lsh_b64_len(size_t n);
void lsh_b64_encode(char *out, Slice s);
PyObject *lsh_ascii_str(const char *p, size_t n);
/* module.c */
extern unsigned long long lsh_spans_native, lsh_spans_python, lsh_spans_native_priced;
/* scores.c */
Value *lsh_entry_value(Entries *e, Slice key);
int lsh_event_needs_python(Entries *e, Slice name, uint64_t time, int has_run_id);
int lsh_add_score(Decoder *d, Sink *k, Entries *e, const char *json, size_t json_n, int32_t seq, uint64_t time,
                  SpanWire *w, PyObject *run_id);
/* spans.c */
int lsh_add_span(Decoder *d, Sink *k, Slice s, Entries *scratch, int depth);
/* wire.c */
void lsh_acc_add(Acc *acc, Slice s, Slice outer, uint32_t num, uint32_t inner);
int lsh_acc_next(Decoder *d, const Acc *acc, AccIter *it, Slice *out);
int lsh_skip_group(Decoder *d, Rd *r, uint32_t num, int depth);
int lsh_utf8_valid(Slice s);

/* ---------- small helpers called in every loop ---------- */

static inline int key_eq(Slice a, Slice b) { return a.n == b.n && memcmp(a.p, b.p, a.n) == 0; }

static inline int slices_push(Slices *a, Slice s) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        Slice *v = PyMem_Realloc(a->v, cap * sizeof(Slice));
        if (v == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = s;
    return 0;
}

static inline void slices_free(Slices *a) {
    PyMem_Free(a->v);
    a->v = NULL;
    a->n = a->cap = 0;
}

/* The block of a buffer (Buf, Raw) grown to hold need bytes, its capacity doubling from first: the new block, or
 * NULL with MemoryError set. resize is the allocator's realloc, the one the buffer's free goes with. */
static inline void *grown(void *p, size_t *cap, size_t need, size_t first, void *(*resize)(void *, size_t)) {
    size_t c = *cap ? *cap : first;
    while (c < need) c *= 2;
    void *q = resize(p, c);
    if (q == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    *cap = c;
    return q;
}

static inline int buf_reserve(Buf *b, size_t extra) {
    if (b->n + extra <= b->cap) return 0;
    char *p = grown(b->p, &b->cap, b->n + extra, 4096, PyMem_Realloc);
    if (p == NULL) return -1;
    b->p = p;
    return 0;
}

static inline int buf_put(Buf *b, const char *s, size_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

#define BUF_LIT(b, s) buf_put((b), (s), sizeof(s) - 1)

static inline int fail(Decoder *d, const char *why) {
    if (d->error == NULL) d->error = why;
    return -1;
}

static inline int rd_varint(Rd *r, uint64_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (r->p >= r->end) return -1;
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

static inline uint64_t le64_n(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static inline uint64_t le64(const uint8_t *p) { return le64_n(p, 8); }

/* The value of a field whose tag (f->num, f->wt) was just read. */
static inline int rd_value(Decoder *d, Rd *r, Field *f, int depth) {
    switch (f->wt) {
    case 0:
        if (rd_varint(r, &f->u) < 0) return fail(d, "bad varint");
        return 0;
    case 1:
        if (r->end - r->p < 8) return fail(d, "truncated fixed64");
        f->u = le64(r->p);
        r->p += 8;
        return 0;
    case 5: {
        if (r->end - r->p < 4) return fail(d, "truncated fixed32");
        f->u = (uint32_t)le64_n(r->p, 4);
        r->p += 4;
        return 0;
    }
    case 2: {
        uint64_t len;
        if (rd_varint(r, &len) < 0) return fail(d, "bad length");
        if (len > (uint64_t)(r->end - r->p) || len > INT32_MAX) return fail(d, "length past the end");
        f->s.p = r->p;
        f->s.n = (size_t)len;
        r->p += len;
        return 0;
    }
    case 3:
        return lsh_skip_group(d, r, f->num, depth + 1);
    default:
        return fail(d, "bad wire type");
    }
}

static inline int rd_field(Decoder *d, Rd *r, Field *f, int depth) {
    uint64_t tag;
    if (rd_varint(r, &tag) < 0 || tag > UINT32_MAX) return fail(d, "bad tag");
    f->num = (uint32_t)(tag >> 3);
    f->wt = (int)(tag & 7);
    if (f->num == 0) return fail(d, "field number 0");
    return rd_value(d, r, f, depth);
}

static inline int want_string(Decoder *d, const Field *f) {
    if (!lsh_utf8_valid(f->s)) return fail(d, "string field is not valid UTF-8");
    return 0;
}

static inline int raw_reserve(Raw *b, size_t extra) {
    if (b->n + extra <= b->cap) return 0;
    uint8_t *p = grown(b->p, &b->cap, b->n + extra, 64, PyMem_RawRealloc);
    if (p == NULL) return -1;
    b->p = p;
    return 0;
}

static inline int raw_put(Raw *b, const void *s, size_t n) {
    if (raw_reserve(b, n) < 0) return -1;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

static inline void raw_free(Raw *b) {
    PyMem_RawFree(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* Bit ``i`` of a bitmap, appended in order (Arrow's bit order: least significant first). */
static inline int raw_bit(Raw *b, size_t i, int on) {
    if ((i & 7) == 0) {
        if (raw_reserve(b, 1) < 0) return -1;
        b->p[b->n++] = 0;
    }
    if (on) b->p[i >> 3] |= (uint8_t)(1u << (i & 7));
    return 0;
}

static inline int col_row(Col *c, int valid) {
    if (raw_bit(&c->valid, c->len, valid) < 0) return -1;
    c->nulls += !valid;
    c->len++;
    return 0;
}

/* Ends a string whose bytes were just appended to ``c->data``. */
static inline int col_str_end(Col *c) {
    if (c->data.n > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a string column past 2 GiB in one request");
        return -1;
    }
    int32_t end = (int32_t)c->data.n;
    return raw_put(&c->values, &end, 4) < 0 ? -1 : col_row(c, 1);
}

static inline int col_str(Col *c, const void *s, size_t n) {
    if (c->type != T_STR) return lsh_col_mismatch(c);
    return raw_put(&c->data, s, n) < 0 ? -1 : col_str_end(c);
}

static inline int col_hex(Col *c, Slice s) {
    if (c->type != T_STR) return lsh_col_mismatch(c);
    if (raw_reserve(&c->data, s.n * 2) < 0) return -1;
    uint8_t *p = c->data.p + c->data.n;
    for (size_t i = 0; i < s.n; i++) {
        p[2 * i] = (uint8_t)HEX[s.p[i] >> 4];
        p[2 * i + 1] = (uint8_t)HEX[s.p[i] & 15];
    }
    c->data.n += s.n * 2;
    return col_str_end(c);
}

static inline int col_null(Col *c) {
    static const uint8_t zero[8] = {0};
    switch (c->type) {
    case T_STR: {
        int32_t end = (int32_t)c->data.n;
        if (raw_put(&c->values, &end, 4) < 0) return -1;
        break;
    }
    case T_BOOL:
        if (raw_bit(&c->values, c->len, 0) < 0) return -1;
        break;
    case T_I32:
        if (raw_put(&c->values, zero, 4) < 0) return -1;
        break;
    default:
        if (raw_put(&c->values, zero, 8) < 0) return -1;
    }
    return col_row(c, 0);
}

static inline int col_u64(Col *c, uint64_t v) {
    if (c->type != T_I64) return lsh_col_mismatch(c);
    return raw_put(&c->values, &v, 8) < 0 ? -1 : col_row(c, 1);
}

static inline int col_i32(Col *c, int32_t v) {
    if (c->type != T_I32) return lsh_col_mismatch(c);
    return raw_put(&c->values, &v, 4) < 0 ? -1 : col_row(c, 1);
}

static inline int col_f64(Col *c, double v) {
    if (c->type != T_F64) return lsh_col_mismatch(c);
    return raw_put(&c->values, &v, 8) < 0 ? -1 : col_row(c, 1);
}

static inline uint64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return v;
}

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
