/* OTLP/protobuf ExportTraceServiceRequest bytes -> the store's span and score columns, straight from the
 * wire, in Arrow's layout: each column is a validity bitmap, values (int64, int32, float64, bool bits, or a
 * string column's int32 offsets) and UTF-8 data, in buffers this module owns until Python wraps them with
 * pa.Array.from_buffers (otlp_native.py). No Python object is kept per cell.
 *
 * The reference is lousho/observe/otlp_decode.py (decode_protobuf): this module must give the same
 * columns for every body, and refuse the same bodies. Parsing follows the protobuf (upb) rules the
 * reference parser applies: a non-repeated message field seen twice is merged (its encodings
 * concatenated), a scalar seen twice keeps the last value, a known field with an unexpected wire type is
 * an unknown field, unknown fields (groups included) are skipped, proto3 strings must be valid UTF-8,
 * nesting deeper than 100 messages is refused. JSON cells are byte-identical to
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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

#define MAX_DEPTH 100

typedef struct {
    const uint8_t *p;
    size_t n;
} Slice;

/* ---------- arena: buffers for merged (concatenated) message encodings, freed after a decode ---------- */

typedef struct Block {
    struct Block *next;
    uint8_t data[];
} Block;

typedef struct {
    Block *head;
} Arena;

static uint8_t *arena_alloc(Arena *a, size_t n) {
    Block *b = PyMem_Malloc(sizeof(Block) + n);
    if (b == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    b->next = a->head;
    a->head = b;
    return b->data;
}

static void arena_free(Arena *a) {
    while (a->head) {
        Block *next = a->head->next;
        PyMem_Free(a->head);
        a->head = next;
    }
}

/* A non-repeated message field: every occurrence is merged into one encoding. */
typedef struct {
    Slice s;
    int seen;
} Acc;

static int acc_add(Arena *a, Acc *acc, Slice s) {
    if (!acc->seen) {
        acc->s = s;
        acc->seen = 1;
        return 0;
    }
    uint8_t *buf = arena_alloc(a, acc->s.n + s.n);
    if (buf == NULL) return -1;
    memcpy(buf, acc->s.p, acc->s.n);
    memcpy(buf + acc->s.n, s.p, s.n);
    acc->s.p = buf;
    acc->s.n += s.n;
    return 0;
}

/* ---------- growable arrays ---------- */

typedef struct {
    Slice *v;
    size_t n, cap;
} Slices;

static int slices_push(Slices *a, Slice s) {
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

static void slices_free(Slices *a) {
    PyMem_Free(a->v);
    a->v = NULL;
    a->n = a->cap = 0;
}

typedef struct {
    char *p;
    size_t n, cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->n + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + extra) cap *= 2;
    char *p = PyMem_Realloc(b->p, cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const char *s, size_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

#define BUF_LIT(b, s) buf_put((b), (s), sizeof(s) - 1)

/* ---------- decoder state ---------- */

typedef struct {
    Arena arena;
    Buf json;
    const char *error; /* set with the first malformation found */
    int *slot;         /* key id -> index of its entry in the current span's attributes, or -1 */
} Decoder;

static int fail(Decoder *d, const char *why) {
    if (d->error == NULL) d->error = why;
    return -1;
}

/* ---------- wire reader ---------- */

typedef struct {
    const uint8_t *p, *end;
} Rd;

static int rd_varint(Rd *r, uint64_t *out) {
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

/* One field: its number, wire type and value (varint/fixed in u, bytes in s). */
typedef struct {
    uint32_t num;
    int wt;
    uint64_t u;
    Slice s;
} Field;

static int skip_group(Decoder *d, Rd *r, uint32_t num, int depth);

static uint64_t le64_n(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint64_t le64(const uint8_t *p) { return le64_n(p, 8); }

static int rd_field(Decoder *d, Rd *r, Field *f, int depth) {
    uint64_t tag;
    if (rd_varint(r, &tag) < 0 || tag > UINT32_MAX) return fail(d, "bad tag");
    f->num = (uint32_t)(tag >> 3);
    f->wt = (int)(tag & 7);
    if (f->num == 0) return fail(d, "field number 0");
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
        return skip_group(d, r, f->num, depth + 1);
    default:
        return fail(d, "bad wire type");
    }
}

static int skip_group(Decoder *d, Rd *r, uint32_t num, int depth) {
    if (depth > MAX_DEPTH) return fail(d, "nested too deep");
    for (;;) {
        if (r->p >= r->end) return fail(d, "unterminated group");
        /* An end-group tag is read here, not by rd_field, which refuses a stray one. */
        const uint8_t *save = r->p;
        uint64_t tag;
        if (rd_varint(r, &tag) < 0 || tag > UINT32_MAX) return fail(d, "bad tag");
        if ((tag & 7) == 4) {
            if ((tag >> 3) != num) return fail(d, "mismatched end group");
            return 0;
        }
        r->p = save;
        Field f;
        if (rd_field(d, r, &f, depth) < 0) return -1;
    }
}

/* ---------- UTF-8 (strict: no overlongs, surrogates or code points past U+10FFFF) ---------- */

static int utf8_valid(Slice s) {
    const uint8_t *p = s.p, *end = s.p + s.n;
    while (p < end) {
        uint8_t c = *p;
        if (c < 0x80) {
            p++;
            continue;
        }
        size_t left = (size_t)(end - p);
        if (c >= 0xc2 && c <= 0xdf) {
            if (left < 2 || (p[1] & 0xc0) != 0x80) return 0;
            p += 2;
        } else if (c >= 0xe0 && c <= 0xef) {
            if (left < 3 || (p[1] & 0xc0) != 0x80 || (p[2] & 0xc0) != 0x80) return 0;
            if (c == 0xe0 && p[1] < 0xa0) return 0;
            if (c == 0xed && p[1] > 0x9f) return 0;
            p += 3;
        } else if (c >= 0xf0 && c <= 0xf4) {
            if (left < 4 || (p[1] & 0xc0) != 0x80 || (p[2] & 0xc0) != 0x80 || (p[3] & 0xc0) != 0x80) return 0;
            if (c == 0xf0 && p[1] < 0x90) return 0;
            if (c == 0xf4 && p[1] > 0x8f) return 0;
            p += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

static int want_string(Decoder *d, const Field *f) {
    if (!utf8_valid(f->s)) return fail(d, "string field is not valid UTF-8");
    return 0;
}

/* ---------- JSON output (ASCII only: json.dumps' ensure_ascii) ---------- */

static const char HEX[] = "0123456789abcdef";

static int json_u16(Buf *b, unsigned v) {
    char e[6] = {'\\', 'u', HEX[(v >> 12) & 15], HEX[(v >> 8) & 15], HEX[(v >> 4) & 15], HEX[v & 15]};
    return buf_put(b, e, 6);
}

static int json_string(Buf *b, Slice s) {
    if (buf_reserve(b, s.n + 2) < 0) return -1;
    b->p[b->n++] = '"';
    const uint8_t *p = s.p, *end = s.p + s.n;
    while (p < end) {
        uint8_t c = *p;
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            const uint8_t *run = p;
            while (p < end && *p >= 0x20 && *p < 0x7f && *p != '"' && *p != '\\') p++;
            if (buf_put(b, (const char *)run, (size_t)(p - run)) < 0) return -1;
            continue;
        }
        uint32_t cp;
        if (c < 0x80) {
            cp = c;
            p++;
        } else if (c < 0xe0) {
            cp = ((uint32_t)(c & 0x1f) << 6) | (p[1] & 0x3f);
            p += 2;
        } else if (c < 0xf0) {
            cp = ((uint32_t)(c & 0x0f) << 12) | ((uint32_t)(p[1] & 0x3f) << 6) | (p[2] & 0x3f);
            p += 3;
        } else {
            cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(p[1] & 0x3f) << 12) | ((uint32_t)(p[2] & 0x3f) << 6) |
                 (p[3] & 0x3f);
            p += 4;
        }
        int rc;
        switch (cp) {
        case '"': rc = BUF_LIT(b, "\\\""); break;
        case '\\': rc = BUF_LIT(b, "\\\\"); break;
        case '\n': rc = BUF_LIT(b, "\\n"); break;
        case '\r': rc = BUF_LIT(b, "\\r"); break;
        case '\t': rc = BUF_LIT(b, "\\t"); break;
        case '\b': rc = BUF_LIT(b, "\\b"); break;
        case '\f': rc = BUF_LIT(b, "\\f"); break;
        default:
            if (cp >= 0x10000) {
                uint32_t v = cp - 0x10000;
                rc = json_u16(b, 0xd800 | ((v >> 10) & 0x3ff));
                if (rc == 0) rc = json_u16(b, 0xdc00 | (v & 0x3ff));
            } else {
                rc = json_u16(b, cp);
            }
        }
        if (rc < 0) return -1;
    }
    if (buf_reserve(b, 1) < 0) return -1;
    b->p[b->n++] = '"';
    return 0;
}

static int json_hex(Buf *b, Slice s) {
    if (buf_reserve(b, s.n * 2 + 2) < 0) return -1;
    b->p[b->n++] = '"';
    for (size_t i = 0; i < s.n; i++) {
        b->p[b->n++] = HEX[s.p[i] >> 4];
        b->p[b->n++] = HEX[s.p[i] & 15];
    }
    b->p[b->n++] = '"';
    return 0;
}

static int json_int(Buf *b, int64_t v) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%lld", (long long)v);
    return buf_put(b, tmp, (size_t)n);
}

static int json_uint(Buf *b, uint64_t v) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
    return buf_put(b, tmp, (size_t)n);
}

static int json_double(Buf *b, double v) {
    if (v != v) return BUF_LIT(b, "\"NaN\"");
    if (v == HUGE_VAL) return BUF_LIT(b, "\"Infinity\"");
    if (v == -HUGE_VAL) return BUF_LIT(b, "\"-Infinity\"");
    char *repr = PyOS_double_to_string(v, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (repr == NULL) return -1;
    int rc = buf_put(b, repr, strlen(repr));
    PyMem_Free(repr);
    return rc;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static size_t b64_len(size_t n) { return (n + 2) / 3 * 4; }

static void b64_encode(char *out, Slice s) {
    size_t i = 0, o = 0;
    for (; i + 3 <= s.n; i += 3) {
        uint32_t v = ((uint32_t)s.p[i] << 16) | ((uint32_t)s.p[i + 1] << 8) | s.p[i + 2];
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = B64[(v >> 6) & 63];
        out[o++] = B64[v & 63];
    }
    if (s.n - i == 1) {
        uint32_t v = (uint32_t)s.p[i] << 16;
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (s.n - i == 2) {
        uint32_t v = ((uint32_t)s.p[i] << 16) | ((uint32_t)s.p[i + 1] << 8);
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = B64[(v >> 6) & 63];
        out[o++] = '=';
    }
}

static PyObject *ascii_str(const char *p, size_t n) {
    PyObject *s = PyUnicode_New((Py_ssize_t)n, 127);
    if (s == NULL) return NULL;
    memcpy(PyUnicode_1BYTE_DATA(s), p, n);
    return s;
}

/* ---------- AnyValue and key/value lists ---------- */

enum { V_NONE, V_STRING, V_BOOL, V_INT, V_DOUBLE, V_ARRAY, V_KVLIST, V_BYTES };

typedef struct {
    int kind;
    int64_t i; /* bool, int */
    double f;
    Slice s;   /* string, bytes */
    Acc msg;   /* array, kvlist: merged encoding */
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

static void entries_free(Entries *e) {
    PyMem_Free(e->v);
    e->v = NULL;
    e->n = e->cap = 0;
}

static int read_value(Decoder *d, Slice s, Value *v, int depth);

static int read_kv(Decoder *d, Slice s, Entry *e, int depth) {
    if (depth > MAX_DEPTH) return fail(d, "nested too deep");
    Rd r = {s.p, s.p + s.n};
    Acc value = {{NULL, 0}, 0};
    e->key.p = (const uint8_t *)"";
    e->key.n = 0;
    while (r.p < r.end) {
        Field f;
        if (rd_field(d, &r, &f, depth) < 0) return -1;
        if (f.num == 1 && f.wt == 2) {
            if (want_string(d, &f) < 0) return -1;
            e->key = f.s;
        } else if (f.num == 2 && f.wt == 2) {
            if (acc_add(&d->arena, &value, f.s) < 0) return -1;
        }
    }
    memset(&e->value, 0, sizeof e->value);
    if (value.seen) return read_value(d, value.s, &e->value, depth + 1);
    return 0;
}

/* Validate everything below ``msg`` (an ArrayValue or KeyValueList): read_value only merges them. */
static int walk_values(Decoder *d, Slice msg, int depth, int is_kvlist);

static int read_value(Decoder *d, Slice s, Value *v, int depth) {
    if (depth > MAX_DEPTH) return fail(d, "nested too deep");
    Rd r = {s.p, s.p + s.n};
    memset(v, 0, sizeof *v);
    while (r.p < r.end) {
        Field f;
        if (rd_field(d, &r, &f, depth) < 0) return -1;
        int kind = -1;
        switch (f.num) {
        case 1: if (f.wt == 2) kind = V_STRING; break;
        case 2: if (f.wt == 0) kind = V_BOOL; break;
        case 3: if (f.wt == 0) kind = V_INT; break;
        case 4: if (f.wt == 1) kind = V_DOUBLE; break;
        case 5: if (f.wt == 2) kind = V_ARRAY; break;
        case 6: if (f.wt == 2) kind = V_KVLIST; break;
        case 7: if (f.wt == 2) kind = V_BYTES; break;
        case 8: if (f.wt == 0) kind = V_NONE; break; /* string_value_strindex: the reference reads None */
        }
        if (kind < 0) continue;
        if (kind == V_ARRAY || kind == V_KVLIST) {
            /* Each piece is parsed as it comes, as protobuf does, even if a later member replaces it. */
            if (walk_values(d, f.s, depth + 1, kind == V_KVLIST) < 0) return -1;
            if (v->kind != kind) memset(&v->msg, 0, sizeof v->msg);
            if (acc_add(&d->arena, &v->msg, f.s) < 0) return -1;
        } else {
            memset(&v->msg, 0, sizeof v->msg);
        }
        v->kind = kind;
        switch (kind) {
        case V_STRING:
            if (want_string(d, &f) < 0) return -1;
            v->s = f.s;
            break;
        case V_BYTES: v->s = f.s; break;
        case V_BOOL: v->i = f.u != 0; break;
        case V_INT: v->i = (int64_t)f.u; break;
        case V_DOUBLE: memcpy(&v->f, &f.u, 8); break;
        }
    }
    return 0;
}

static int walk_values(Decoder *d, Slice msg, int depth, int is_kvlist) {
    if (depth > MAX_DEPTH) return fail(d, "nested too deep");
    Rd r = {msg.p, msg.p + msg.n};
    while (r.p < r.end) {
        Field f;
        if (rd_field(d, &r, &f, depth) < 0) return -1;
        if (f.num != 1 || f.wt != 2) continue;
        if (is_kvlist) {
            Entry e;
            if (read_kv(d, f.s, &e, depth + 1) < 0) return -1;
        } else {
            Value v;
            if (read_value(d, f.s, &v, depth + 1) < 0) return -1;
        }
    }
    return 0;
}

static int entries_push(Entries *a, Entry *e) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        Entry *v = PyMem_Realloc(a->v, cap * sizeof(Entry));
        if (v == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = *e;
    return 0;
}

static uint64_t key_hash(Slice k) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < k.n; i++) h = (h ^ k.p[i]) * 1099511628211ULL;
    return h;
}

static int key_eq(Slice a, Slice b) { return a.n == b.n && memcmp(a.p, b.p, a.n) == 0; }

/* Mark, as a dict built in order would keep them, which entries show and which value each shows. */
static int dedupe(Entries *a) {
    size_t n = a->n;
    a->deduped = 1;
    for (size_t i = 0; i < n; i++) {
        a->v[i].show = 1;
        a->v[i].last = i;
    }
    if (n < 2) return 0;
    if (n <= 16) {
        for (size_t j = 1; j < n; j++) {
            for (size_t i = 0; i < j; i++) {
                if (a->v[i].show && key_eq(a->v[i].key, a->v[j].key)) {
                    a->v[i].last = j;
                    a->v[j].show = 0;
                    break;
                }
            }
        }
        return 0;
    }
    size_t size = 32;
    while (size < n * 2) size *= 2;
    size_t *table = PyMem_Malloc(size * sizeof(size_t));
    if (table == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < size; i++) table[i] = SIZE_MAX;
    for (size_t j = 0; j < n; j++) {
        size_t slot = (size_t)key_hash(a->v[j].key) & (size - 1);
        while (table[slot] != SIZE_MAX && !key_eq(a->v[table[slot]].key, a->v[j].key)) slot = (slot + 1) & (size - 1);
        if (table[slot] == SIZE_MAX) {
            table[slot] = j;
        } else {
            a->v[table[slot]].last = j;
            a->v[j].show = 0;
        }
    }
    PyMem_Free(table);
    return 0;
}

/* ---------- a value as JSON and as a Python object ---------- */

static int kvlist_out(Decoder *d, Slice msg, Buf *b, PyObject **py);
static int value_out(Decoder *d, Value *v, Buf *b, PyObject **py);

static int array_out(Decoder *d, Slice msg, Buf *b, PyObject **py) {
    Rd r = {msg.p, msg.p + msg.n};
    PyObject *list = NULL;
    if (py) {
        list = PyList_New(0);
        if (list == NULL) return -1;
    }
    if (b && BUF_LIT(b, "[") < 0) goto error;
    int first = 1;
    while (r.p < r.end) {
        Field f;
        if (rd_field(d, &r, &f, 0) < 0) goto error;
        if (f.num != 1 || f.wt != 2) continue;
        Value v;
        if (read_value(d, f.s, &v, 0) < 0) goto error;
        if (b && !first && BUF_LIT(b, ",") < 0) goto error;
        first = 0;
        PyObject *item = NULL;
        if (value_out(d, &v, b, py ? &item : NULL) < 0) goto error;
        if (py) {
            int rc = PyList_Append(list, item);
            Py_DECREF(item);
            if (rc < 0) goto error;
        }
    }
    if (b && BUF_LIT(b, "]") < 0) goto error;
    if (py) *py = list;
    return 0;
error:
    Py_XDECREF(list);
    return -1;
}

static int value_out(Decoder *d, Value *v, Buf *b, PyObject **py) {
    switch (v->kind) {
    case V_STRING:
        if (b && json_string(b, v->s) < 0) return -1;
        if (py && (*py = PyUnicode_DecodeUTF8((const char *)v->s.p, (Py_ssize_t)v->s.n, NULL)) == NULL) return -1;
        return 0;
    case V_BOOL:
        if (b && (v->i ? BUF_LIT(b, "true") : BUF_LIT(b, "false")) < 0) return -1;
        if (py) *py = PyBool_FromLong((long)v->i);
        return 0;
    case V_INT:
        if (b && json_int(b, v->i) < 0) return -1;
        if (py && (*py = PyLong_FromLongLong(v->i)) == NULL) return -1;
        return 0;
    case V_DOUBLE:
        if (b && json_double(b, v->f) < 0) return -1;
        if (py && (*py = PyFloat_FromDouble(v->f)) == NULL) return -1;
        return 0;
    case V_BYTES: {
        size_t n = b64_len(v->s.n);
        if (b) {
            if (buf_reserve(b, n + 2) < 0) return -1;
            b->p[b->n++] = '"';
            b64_encode(b->p + b->n, v->s);
            b->n += n;
            b->p[b->n++] = '"';
        }
        if (py) {
            PyObject *s = PyUnicode_New((Py_ssize_t)n, 127);
            if (s == NULL) return -1;
            b64_encode((char *)PyUnicode_1BYTE_DATA(s), v->s);
            *py = s;
        }
        return 0;
    }
    case V_ARRAY:
        return array_out(d, v->msg.s, b, py);
    case V_KVLIST:
        return kvlist_out(d, v->msg.s, b, py);
    default:
        if (b && BUF_LIT(b, "null") < 0) return -1;
        if (py) *py = Py_NewRef(Py_None);
        return 0;
    }
}

/* Entries of key/value messages, deduplicated, as a JSON object and/or a dict. */
static int entries_out(Decoder *d, Entries *e, Buf *b, PyObject **py) {
    if (!e->deduped && dedupe(e) < 0) return -1;
    PyObject *dict = NULL;
    if (py) {
        dict = PyDict_New();
        if (dict == NULL) return -1;
    }
    if (b && BUF_LIT(b, "{") < 0) goto error;
    int first = 1;
    for (size_t i = 0; i < e->n; i++) {
        if (!e->v[i].show) continue;
        Value *v = &e->v[e->v[i].last].value;
        if (b) {
            if (!first && BUF_LIT(b, ",") < 0) goto error;
            if (json_string(b, e->v[i].key) < 0 || BUF_LIT(b, ":") < 0) goto error;
        }
        first = 0;
        PyObject *item = NULL;
        if (value_out(d, v, b, py ? &item : NULL) < 0) goto error;
        if (py) {
            PyObject *key = PyUnicode_DecodeUTF8((const char *)e->v[i].key.p, (Py_ssize_t)e->v[i].key.n, NULL);
            if (key == NULL) {
                Py_DECREF(item);
                goto error;
            }
            int rc = PyDict_SetItem(dict, key, item);
            Py_DECREF(key);
            Py_DECREF(item);
            if (rc < 0) goto error;
        }
    }
    if (b && BUF_LIT(b, "}") < 0) goto error;
    if (py) *py = dict;
    return 0;
error:
    Py_XDECREF(dict);
    return -1;
}

static int kvlist_out(Decoder *d, Slice msg, Buf *b, PyObject **py) {
    Rd r = {msg.p, msg.p + msg.n};
    Entries e = {NULL, 0, 0, 0};
    while (r.p < r.end) {
        Field f;
        if (rd_field(d, &r, &f, 0) < 0) goto error;
        if (f.num != 1 || f.wt != 2) continue;
        Entry entry;
        if (read_kv(d, f.s, &entry, 0) < 0 || entries_push(&e, &entry) < 0) goto error;
    }
    int rc = entries_out(d, &e, b, py);
    entries_free(&e);
    return rc;
error:
    entries_free(&e);
    return -1;
}

/* Read the KeyValue encodings of one attribute list (already validated as they are read). */
static int read_entries(Decoder *d, Slices *kvs, Entries *out, int depth) {
    out->n = 0;
    out->deduped = 0;
    for (size_t i = 0; i < kvs->n; i++) {
        Entry e;
        if (read_kv(d, kvs->v[i], &e, depth) < 0 || entries_push(out, &e) < 0) return -1;
    }
    return 0;
}

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

static Config cfg;

/* Spans decoded since import, by path (stats()): what the Python step still costs, measured. */
static unsigned long long spans_native, spans_python, spans_native_priced;

static int key_id(Slice key) {
    if (cfg.nkeys == 0) return -1;
    size_t slot = (size_t)key_hash(key) & (cfg.size - 1);
    while (cfg.table[slot] != SIZE_MAX) {
        if (key_eq(cfg.keys[cfg.table[slot]], key)) return (int)cfg.table[slot];
        slot = (slot + 1) & (cfg.size - 1);
    }
    return -1;
}

static int id_of(PyObject *key) {
    Py_ssize_t len;
    const char *s = PyUnicode_AsUTF8AndSize(key, &len);
    if (s == NULL) return -2;
    Slice k = {(const uint8_t *)s, (size_t)len};
    int id = key_id(k);
    if (id < 0) PyErr_Format(PyExc_ValueError, "key %R is not among the keys", key);
    return id;
}

/* configure(bad_payload, tail, price, kinds, statuses, name_operations, agent_operation, reported, price_table,
 *           keys, fallback_keys, message_keys, operation_key, probe_key, promote_spec, special,
 *           (evaluation, exception, details event names), pass_labels, fail_labels, column_types, score_types) */
static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *bad, *tail, *price, *kinds, *statuses, *prefixes, *agent_op, *reported, *price_table, *keys, *fallback,
        *messages, *op_key, *probe_key, *spec, *special, *events, *pass_labels, *fail_labels,
        *column_types, *score_types;
    if (!PyArg_ParseTuple(args, "OOOO!O!O!UUUO!O!O!UUO!O!O!O!O!O!O!", &bad, &tail, &price, &PyTuple_Type, &kinds,
                          &PyTuple_Type, &statuses, &PyTuple_Type, &prefixes, &agent_op, &reported, &price_table,
                          &PyTuple_Type, &keys, &PyTuple_Type, &fallback, &PyTuple_Type, &messages, &op_key,
                          &probe_key, &PyTuple_Type, &spec, &PyTuple_Type, &special, &PyTuple_Type, &events,
                          &PyFrozenSet_Type, &pass_labels, &PyFrozenSet_Type, &fail_labels, &PyTuple_Type,
                          &column_types, &PyTuple_Type, &score_types))
        return NULL;
    if (PyTuple_GET_SIZE(column_types) > MAX_COLS || PyTuple_GET_SIZE(score_types) != N_SCORE) {
        PyErr_SetString(PyExc_ValueError, "wrong number of column types");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < N_SCORE; i++) {
        long type = PyLong_AsLong(PyTuple_GET_ITEM(score_types, i));
        if (type < 0 || type > T_I32) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a column's type is 0 to 4");
            return NULL;
        }
        cfg.score_storage[i] = (int)type;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(column_types); i++) {
        long type = PyLong_AsLong(PyTuple_GET_ITEM(column_types, i));
        if (type < 0 || type > T_I32) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a column's type is 0 to 4");
            return NULL;
        }
        cfg.storage[i] = (int)type;
    }
    cfg.ncols = (int)PyTuple_GET_SIZE(column_types);
    if (PyTuple_GET_SIZE(events) != 3) {
        PyErr_SetString(PyExc_ValueError, "three event names");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(keys);
    if (PyTuple_GET_SIZE(spec) > MAX_PROMOTED || PyTuple_GET_SIZE(special) != N_SPECIAL) {
        PyErr_SetString(PyExc_ValueError, "promote_spec or special has the wrong size");
        return NULL;
    }
    size_t size = 64;
    while (size < (size_t)n * 2) size *= 2;
    PyMem_Free(cfg.keys);
    PyMem_Free(cfg.table);
    PyMem_Free(cfg.flags);
    cfg.ready = 0;
    cfg.nkeys = 0;
    cfg.keys = PyMem_Malloc(((size_t)n + 1) * sizeof(Slice));
    cfg.table = PyMem_Malloc(size * sizeof(size_t));
    cfg.flags = PyMem_Calloc((size_t)n + 1, 1);
    if (cfg.keys == NULL || cfg.table == NULL || cfg.flags == NULL) return PyErr_NoMemory();
    cfg.size = size;
    for (size_t i = 0; i < size; i++) cfg.table[i] = SIZE_MAX;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len;
        const char *s = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(keys, i), &len);
        if (s == NULL) return NULL;
        cfg.keys[i].p = (const uint8_t *)s;
        cfg.keys[i].n = (size_t)len;
        size_t slot = (size_t)key_hash(cfg.keys[i]) & (size - 1);
        while (cfg.table[slot] != SIZE_MAX) slot = (slot + 1) & (size - 1);
        cfg.table[slot] = (size_t)i;
    }
    cfg.nkeys = (size_t)n;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fallback); i++) {
        int id = id_of(PyTuple_GET_ITEM(fallback, i));
        if (id < 0) return NULL;
        cfg.flags[id] |= K_FALLBACK;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(messages); i++) {
        int id = id_of(PyTuple_GET_ITEM(messages, i));
        if (id < 0) return NULL;
        cfg.flags[id] |= K_MESSAGES;
    }
    if ((cfg.op_key = id_of(op_key)) < 0 || (cfg.probe_key = id_of(probe_key)) < 0) return NULL;
    Slice *names[3] = {&cfg.evaluation, &cfg.exception, &cfg.details};
    for (int i = 0; i < 3; i++) {
        Py_ssize_t len;
        const char *name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(events, i), &len);
        if (name == NULL) return NULL;
        names[i]->p = (const uint8_t *)name;
        names[i]->n = (size_t)len;
    }
    cfg.npromote = (int)PyTuple_GET_SIZE(spec);
    for (int c = 0; c < cfg.npromote; c++) {
        PyObject *entry = PyTuple_GET_ITEM(spec, c);
        PyObject *aliases;
        if (!PyArg_ParseTuple(entry, "iO!", &cfg.promote[c].kind, &PyTuple_Type, &aliases)) return NULL;
        if (PyTuple_GET_SIZE(aliases) > MAX_ALIASES) {
            PyErr_SetString(PyExc_ValueError, "too many aliases");
            return NULL;
        }
        cfg.promote[c].n = (int)PyTuple_GET_SIZE(aliases);
        for (int a = 0; a < cfg.promote[c].n; a++)
            if ((cfg.promote[c].ids[a] = id_of(PyTuple_GET_ITEM(aliases, a))) < 0) return NULL;
    }
    for (int i = 0; i < N_SPECIAL; i++) {
        cfg.special[i] = (int)PyLong_AsLong(PyTuple_GET_ITEM(special, i));
        if (cfg.special[i] < 0 || cfg.special[i] >= cfg.npromote) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "special index out of range");
            return NULL;
        }
    }
    Py_XSETREF(cfg.owner, Py_NewRef(keys));
    Py_XSETREF(cfg.bad_payload, Py_NewRef(bad));
    Py_XSETREF(cfg.tail, Py_NewRef(tail));
    Py_XSETREF(cfg.price, Py_NewRef(price));
    Py_XSETREF(cfg.kinds, Py_NewRef(kinds));
    Py_XSETREF(cfg.statuses, Py_NewRef(statuses));
    Py_XSETREF(cfg.prefixes, Py_NewRef(prefixes));
    Py_XSETREF(cfg.agent_op, Py_NewRef(agent_op));
    Py_XSETREF(cfg.reported, Py_NewRef(reported));
    Py_XSETREF(cfg.price_table, Py_NewRef(price_table));
    Py_XSETREF(cfg.event_names, Py_NewRef(events));
    Py_XSETREF(cfg.pass_labels, Py_NewRef(pass_labels));
    Py_XSETREF(cfg.fail_labels, Py_NewRef(fail_labels));
    cfg.ready = 1;
    Py_RETURN_NONE;
}

/* ---------- Arrow columns: the store's columns in Arrow's layout, handed to Python as buffers ---------- */


/* Growable bytes on the raw allocator: the buffers outlive the decode, and pyarrow may drop its last
 * reference to them from a thread of its own. */
typedef struct {
    uint8_t *p;
    size_t n, cap;
} Raw;

static int raw_reserve(Raw *b, size_t extra) {
    if (b->n + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + extra) cap *= 2;
    uint8_t *p = PyMem_RawRealloc(b->p, cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static int raw_put(Raw *b, const void *s, size_t n) {
    if (raw_reserve(b, n) < 0) return -1;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

static void raw_free(Raw *b) {
    PyMem_RawFree(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* Bit ``i`` of a bitmap, appended in order (Arrow's bit order: least significant first). */
static int raw_bit(Raw *b, size_t i, int on) {
    if ((i & 7) == 0) {
        if (raw_reserve(b, 1) < 0) return -1;
        b->p[b->n++] = 0;
    }
    if (on) b->p[i >> 3] |= (uint8_t)(1u << (i & 7));
    return 0;
}

typedef struct {
    int type;
    Raw valid;  /* validity bitmap */
    Raw values; /* int64 or float64 values, bool bits, or the int32 offsets of a string column */
    Raw data;   /* a string column's UTF-8 */
    size_t len, nulls;
} Col;

static int col_init(Col *c, int type) {
    memset(c, 0, sizeof *c);
    c->type = type;
    if (type != T_STR) return 0;
    int32_t zero = 0;
    return raw_put(&c->values, &zero, 4);
}

static void col_free(Col *c) {
    raw_free(&c->valid);
    raw_free(&c->values);
    raw_free(&c->data);
}

static int col_row(Col *c, int valid) {
    if (raw_bit(&c->valid, c->len, valid) < 0) return -1;
    c->nulls += !valid;
    c->len++;
    return 0;
}

static int col_mismatch(Col *c) {
    PyErr_Format(PyExc_TypeError, "a value of the wrong type for a column of type %d", c->type);
    return -1;
}

/* Ends a string whose bytes were just appended to ``c->data``. */
static int col_str_end(Col *c) {
    if (c->data.n > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a string column past 2 GiB in one request");
        return -1;
    }
    int32_t end = (int32_t)c->data.n;
    return raw_put(&c->values, &end, 4) < 0 ? -1 : col_row(c, 1);
}

static int col_str(Col *c, const void *s, size_t n) {
    if (c->type != T_STR) return col_mismatch(c);
    return raw_put(&c->data, s, n) < 0 ? -1 : col_str_end(c);
}

static int col_hex(Col *c, Slice s) {
    if (c->type != T_STR) return col_mismatch(c);
    if (raw_reserve(&c->data, s.n * 2) < 0) return -1;
    uint8_t *p = c->data.p + c->data.n;
    for (size_t i = 0; i < s.n; i++) {
        p[2 * i] = (uint8_t)HEX[s.p[i] >> 4];
        p[2 * i + 1] = (uint8_t)HEX[s.p[i] & 15];
    }
    c->data.n += s.n * 2;
    return col_str_end(c);
}

static int col_null(Col *c) {
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

static int col_u64(Col *c, uint64_t v) {
    if (c->type != T_I64) return col_mismatch(c);
    return raw_put(&c->values, &v, 8) < 0 ? -1 : col_row(c, 1);
}

static int col_i32(Col *c, int32_t v) {
    if (c->type != T_I32) return col_mismatch(c);
    return raw_put(&c->values, &v, 4) < 0 ? -1 : col_row(c, 1);
}

static int col_f64(Col *c, double v) {
    if (c->type != T_F64) return col_mismatch(c);
    return raw_put(&c->values, &v, 8) < 0 ? -1 : col_row(c, 1);
}

/* A value the convention step computed as a Python object (None is NULL), as its column holds it. */
static int col_obj(Col *c, PyObject *o) {
    if (o == Py_None) return col_null(c);
    switch (c->type) {
    case T_STR: {
        if (!PyUnicode_Check(o)) return col_mismatch(c);
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(o, &n);
        return s == NULL ? -1 : col_str(c, s, (size_t)n);
    }
    case T_I64: {
        if (!PyLong_Check(o) || PyBool_Check(o)) return col_mismatch(c);
        long long v = PyLong_AsLongLong(o);
        if (v == -1 && PyErr_Occurred()) return -1;
        return col_u64(c, (uint64_t)v);
    }
    case T_F64:
        if (!PyFloat_Check(o)) return col_mismatch(c);
        return col_f64(c, PyFloat_AS_DOUBLE(o));
    default:
        if (!PyBool_Check(o) || c->type != T_BOOL) return col_mismatch(c);
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

static PyTypeObject BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "lousho.observe._otlp_native.Buffer",
    .tp_basicsize = sizeof(Buffer),
    .tp_dealloc = buffer_dealloc,
    .tp_as_buffer = &buffer_procs,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Bytes of one Arrow buffer, read-only, freed with the last reference.",
};

/* The bytes of ``b`` as a Buffer; ``b`` is emptied (the Buffer owns them now). */
static PyObject *raw_release(Raw *b) {
    /* Zeroed to a multiple of 64 bytes past the end, as Arrow pads its own buffers: a reader that takes a
     * bitmap or values a word at a time stays inside the allocation (pyarrow refuses a NULL pointer, even for
     * 0 bytes, so there is always one). */
    size_t padded = (b->n + 64) & ~(size_t)63;
    if (raw_reserve(b, padded - b->n) < 0) return NULL;
    memset(b->p + b->n, 0, padded - b->n);
    Buffer *out = PyObject_New(Buffer, &BufferType);
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
static PyObject *col_release(Col *c) {
    PyObject *valid = NULL, *values = NULL, *data = NULL;
    if (c->nulls) {
        valid = raw_release(&c->valid);
    } else {
        raw_free(&c->valid);
        valid = Py_NewRef(Py_None);
    }
    values = raw_release(&c->values);
    data = c->type == T_STR ? raw_release(&c->data) : Py_NewRef(Py_None);
    PyObject *out = (valid && values && data) ? Py_BuildValue("(nOOO)", (Py_ssize_t)c->nulls, valid, values, data)
                                              : NULL;
    Py_XDECREF(valid);
    Py_XDECREF(values);
    Py_XDECREF(data);
    return out;
}

/* ---------- spans ---------- */

/* The columns this module fills for every span, in this order (otlp_native.BASE_COLUMNS). */
enum {
    C_KEY_HI, C_KEY_LO, C_TRACE_ID, C_SPAN_ID, C_PARENT, C_NAME, C_KIND, C_START, C_END, C_STATUS_CODE,
    C_STATUS_MESSAGE, C_SERVICE, C_SCOPE, C_ATTRIBUTES, C_RESOURCE, C_EVENTS, C_LINKS, C_OPERATION, N_BASE
};

/* After the base columns (their storage from otlp_native.STORAGE, as every column's): the promoted columns (promote spec order), probe, cost_source, then the columns
 * that are NULL for a span the Python step does not see (otlp_native.NULL_COLUMNS). */
#define COL_PROBE (N_BASE + cfg.npromote)
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
    PyObject *service;      /* of the current resource */
    PyObject *resource_json;
    PyObject *scope;
} Sink;

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

static uint64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return v;
}

typedef struct SpanWire SpanWire;

static int all_zero(Slice s) {
    for (size_t i = 0; i < s.n; i++)
        if (s.p[i]) return 0;
    return 1;
}

struct SpanWire {
    Slice trace_id, span_id, parent, name;
    int32_t kind;
    uint64_t start, end;
    Slices attrs, events, links;
    Acc status;
};

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

static PyObject *span_problem(Decoder *d, SpanWire *w) {
    const char *what = NULL;
    if (w->trace_id.n != 16 || all_zero(w->trace_id)) what = "trace_id must be 16 bytes, not all zero";
    else if (w->span_id.n != 8 || all_zero(w->span_id)) what = "span_id must be 8 bytes, not all zero";
    else if (w->parent.n && w->parent.n != 8) what = "parent_span_id must be empty or 8 bytes";
    else if (w->start >= (1ULL << 63) || w->end >= (1ULL << 63))
        what = "timestamps past the year 2262 do not fit a signed 64-bit ns";
    if (what == NULL) return Py_NewRef(Py_None);
    PyObject *name = PyUnicode_DecodeUTF8((const char *)w->name.p, (Py_ssize_t)w->name.n, NULL);
    if (name == NULL) return NULL;
    PyObject *msg = PyUnicode_FromFormat("span %R: %s", name, what);
    Py_DECREF(name);
    return msg;
}

/* The operation a span's name gives (normalise.operation without attributes), borrowed; NULL for none. */
static PyObject *name_operation(Slice name) {
    size_t head = 0;
    while (head < name.n && name.p[head] != ' ') head++;
    Py_ssize_t n = PyTuple_GET_SIZE(cfg.prefixes);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *prefix = PyTuple_GET_ITEM(cfg.prefixes, i);
        if ((size_t)PyUnicode_GET_LENGTH(prefix) == head &&
            memcmp(PyUnicode_1BYTE_DATA(prefix), name.p, head) == 0)
            return prefix;
    }
    return NULL;
}

/* normalise.promote's coercion of one present value: a new reference, or NULL with *python set when only
 * the Python step can say (a number in a string, str() of a list). */
static PyObject *coerce(Decoder *d, int kind, Value *v, int *python) {
    PyObject *obj, *out;
    switch (v->kind) {
    case V_STRING:
    case V_BYTES:
        if (kind == P_INT || kind == P_FLOAT) break;
        obj = NULL;
        return value_out(d, v, NULL, &obj) < 0 ? NULL : obj;
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
static int fast_conventions(Decoder *d, Entries *e, Slice name, PyObject **vals, PyObject **op, PyObject **probe) {
    for (int c = 0; c < cfg.npromote; c++) {
        Promote *p = &cfg.promote[c];
        for (int a = 0; a < p->n && vals[c] == NULL; a++) {
            Value *v = slot_value(d, e, p->ids[a]);
            if (v == NULL || v->kind == V_NONE) continue;
            int python = 0;
            vals[c] = coerce(d, p->kind, v, &python);
            if (python) return 1;
            if (vals[c] == NULL) return -1;
        }
        if (vals[c] == NULL) vals[c] = Py_NewRef(Py_None);
    }
    Value *v = slot_value(d, e, cfg.op_key);
    if (v != NULL && (v->kind == V_STRING || v->kind == V_BYTES) && v->s.n > 0) {
        if (value_out(d, v, NULL, op) < 0) return -1;
    } else {
        PyObject *named = name_operation(name);
        *op = Py_NewRef(named ? named : Py_None);
    }
    v = slot_value(d, e, cfg.probe_key);
    if (v == NULL || v->kind == V_NONE || v->kind == V_ARRAY || v->kind == V_KVLIST) *probe = Py_NewRef(Py_None);
    else if (v->kind == V_BOOL || v->kind == V_INT) *probe = PyBool_FromLong(v->i != 0);
    else if (v->kind == V_DOUBLE) *probe = PyBool_FromLong(v->f != 0.0);
    else return 1; /* a string: as_bool's words */
    /* conventions.refine: an agent span named for its agent, a session id sent JSON-quoted. */
    if (vals[cfg.special[S_AGENT]] == Py_None && *op != Py_None) {
        int cmp = PyObject_RichCompareBool(*op, cfg.agent_op, Py_EQ);
        if (cmp != 0) return cmp < 0 ? -1 : 1;
    }
    PyObject *session = vals[cfg.special[S_CONVERSATION]];
    if (session != Py_None && PyUnicode_GET_LENGTH(session) > 0 && PyUnicode_READ_CHAR(session, 0) == '"') return 1;
    return 0;
}

/* The value a dict of these entries keeps for ``key``; NULL when absent. */
static Value *entry_value(Entries *e, Slice key) {
    for (size_t i = 0; i < e->n; i++)
        if (e->v[i].show && key_eq(e->v[i].key, key)) return &e->v[e->v[i].last].value;
    return NULL;
}

#define LIT(s) ((Slice){(const uint8_t *)(s), sizeof(s) - 1})

static int is_ascii(Slice s) {
    for (size_t i = 0; i < s.n; i++)
        if (s.p[i] >= 0x80) return 0;
    return 1;
}

/* Whether the Python step is needed for an event (1), or this module can do its part (0). */
static int event_needs_python(Entries *e, Slice name, uint64_t time, int has_run_id) {
    if (key_eq(name, cfg.details)) return !has_run_id; /* its messages are the span's input and output text */
    if (!key_eq(name, cfg.evaluation)) return 0;
    if (time > (uint64_t)INT64_MAX) return 1; /* a score's time past BIGINT takes the span's end, counted */
    Value *score = entry_value(e, LIT("gen_ai.evaluation.score.value"));
    /* Only an integer or a finite double is a score; anything else is nulled and counted by _add_score. */
    if (score && score->kind != V_NONE && !(score->kind == V_INT || (score->kind == V_DOUBLE && isfinite(score->f))))
        return 1;
    Value *label = entry_value(e, LIT("gen_ai.evaluation.score.label"));
    if (label && (label->kind == V_STRING || label->kind == V_BYTES) && !is_ascii(label->s)) return 1; /* str.lower */
    Slice texts[4] = {LIT("lousho.check.failed"), LIT("gen_ai.evaluation.name"), LIT("gen_ai.evaluation.explanation"),
                      LIT("error.type")};
    for (int i = 0; i < 4; i++) {
        Value *v = entry_value(e, texts[i]);
        if (v && (v->kind == V_ARRAY || v->kind == V_KVLIST)) return 1; /* str() of a list or dict */
    }
    return 0;
}

/* str(value) of a present, non-list value, or None when absent or None (otlp_decode._add_score). */
static PyObject *text_or_none(Decoder *d, Value *v, int empty_is_none) {
    if (v == NULL || v->kind == V_NONE) return Py_NewRef(Py_None);
    if (empty_is_none && (v->kind == V_STRING || v->kind == V_BYTES) && v->s.n == 0) return Py_NewRef(Py_None);
    int python = 0;
    return coerce(d, P_TEXT, v, &python);
}

/* One score row of an evaluation event, whose attributes are ``e`` and their JSON ``json``. The cells the
 * reference computes in Python (str(), str.lower and the label sets) are computed as Python objects here too,
 * and written to the columns at once: none is kept. */
static int add_score(Decoder *d, Sink *k, Entries *e, const char *json, size_t json_n, int32_t seq, uint64_t time,
                     SpanWire *w, PyObject *run_id) {
    PyObject *label = NULL, *failed = NULL, *name = NULL, *explanation = NULL, *error_type = NULL;
    Col *c = k->score_cols;
    int rc = -1;
    Value *label_v = entry_value(e, LIT("gen_ai.evaluation.score.label"));
    label = (label_v && (label_v->kind == V_STRING || label_v->kind == V_BYTES)) ? text_or_none(d, label_v, 0)
                                                                                 : Py_NewRef(Py_None);
    failed = text_or_none(d, entry_value(e, LIT("lousho.check.failed")), 1);
    name = text_or_none(d, entry_value(e, LIT("gen_ai.evaluation.name")), 0);
    explanation = text_or_none(d, entry_value(e, LIT("gen_ai.evaluation.explanation")), 0);
    error_type = text_or_none(d, entry_value(e, LIT("error.type")), 0);
    if (label == NULL || failed == NULL || name == NULL || explanation == NULL || error_type == NULL) goto done;
    PyObject *passed = Py_None;
    if (label != Py_None) {
        PyObject *low = PyObject_CallMethod(label, "lower", NULL);
        if (low == NULL) goto done;
        int yes = PySet_Contains(cfg.pass_labels, low), no = yes ? 0 : PySet_Contains(cfg.fail_labels, low);
        Py_DECREF(low);
        if (yes < 0 || no < 0) goto done;
        passed = yes ? Py_True : no ? Py_False : Py_None;
    }
    if (failed != Py_None) passed = Py_False;
    Value *value = entry_value(e, LIT("gen_ai.evaluation.score.value"));
    int valued = value && (value->kind == V_INT || value->kind == V_DOUBLE);
    double score = !valued ? 0.0 : value->kind == V_INT ? (double)value->i : value->f;
    if (col_u64(&c[R_KEY_HI], be64(w->span_id.p)) < 0 || col_u64(&c[R_KEY_LO], be64(w->trace_id.p + 8)) < 0 ||
        col_i32(&c[R_SEQ], seq) < 0 || col_hex(&c[R_TRACE_ID], w->trace_id) < 0 ||
        col_hex(&c[R_SPAN_ID], w->span_id) < 0 || col_obj(&c[R_RUN_ID], run_id) < 0 ||
        col_obj(&c[R_NAME], name) < 0 || (valued ? col_f64(&c[R_VALUE], score) : col_null(&c[R_VALUE])) < 0 ||
        col_obj(&c[R_LABEL], label) < 0 || col_obj(&c[R_EXPLANATION], explanation) < 0 ||
        col_obj(&c[R_FAILED_CHECK], failed) < 0 || col_obj(&c[R_PASSED], passed) < 0 ||
        col_obj(&c[R_ERROR_TYPE], error_type) < 0 || col_u64(&c[R_TIME], time) < 0 ||
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

static int add_span(Decoder *d, Sink *k, Slice s, Entries *scratch, int depth) {
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
        case 15: if (f.wt == 2 && acc_add(&d->arena, &w.status, f.s) < 0) goto done; break;
        }
    }
    int32_t status_code = 0;
    Slice status_message = {(const uint8_t *)"", 0};
    if (w.status.seen && read_status(d, w.status.s, &status_code, &status_message, depth + 1) < 0) goto done;

    PyObject *problem = span_problem(d, &w);
    if (problem == NULL) goto done;
    if (problem != Py_None) {
        /* Rejected, but the whole message is still validated, as the reference parser does. */
        int bad = append_steal(k->errors, problem);
        k->rejected++;
        if (bad < 0 || read_entries(d, &w.attrs, scratch, depth + 1) < 0 || entries_out(d, scratch, NULL, NULL) < 0)
            goto done;
        for (size_t i = 0; i < w.events.n + w.links.n; i++) {
            int is_link = i >= w.events.n;
            Slice e = is_link ? w.links.v[i - w.events.n] : w.events.v[i];
            if (read_sub(d, e, &sub, is_link, depth + 1) < 0 || read_entries(d, &sub.attrs, scratch, depth + 2) < 0 ||
                entries_out(d, scratch, NULL, NULL) < 0)
                goto done;
        }
        rc = 0;
        goto done;
    }
    Py_DECREF(problem);

    /* Attributes: JSON always; the convention columns here, or a dict for the Python step. */
    if (read_entries(d, &w.attrs, scratch, depth + 1) < 0 || dedupe(scratch) < 0) goto done;
    int needs_tail = 0, has_messages = 0;
    for (size_t i = 0; i < scratch->n; i++) {
        if (!scratch->v[i].show) continue;
        int id = key_id(scratch->v[i].key);
        if (id < 0) continue;
        d->slot[id] = (int)i;
        scratch->v[touched++].touched_id = id;
        if (cfg.flags[id] & K_MESSAGES) has_messages = 1;
        else if (cfg.flags[id] & K_FALLBACK) needs_tail = 1;
    }
    if (!needs_tail) {
        int fast = fast_conventions(d, scratch, w.name, vals, &operation, &probe);
        if (fast < 0) goto done_slots;
        needs_tail = fast;
    }
    /* Message keys and events: refine reads the messages only for a span without a run id. */
    int has_run_id = !needs_tail && vals[cfg.special[S_RUN_ID]] != Py_None;
    if (!needs_tail && has_messages && !has_run_id) needs_tail = 1;
    for (size_t i = 0; i < w.events.n && !needs_tail; i++) {
        if (read_sub(d, w.events.v[i], &sub, 0, depth + 1) < 0 || read_entries(d, &sub.attrs, &events_scratch,
                                                                               depth + 2) < 0 ||
            dedupe(&events_scratch) < 0)
            goto done_slots;
        needs_tail = event_needs_python(&events_scratch, sub.name, sub.time, has_run_id);
    }
    for (size_t i = 0; i < touched; i++) d->slot[scratch->v[i].touched_id] = -1;
    Buf *b = &d->json;
    b->n = 0;
    if (entries_out(d, scratch, b, needs_tail ? &attrs_py : NULL) < 0) goto done;

    Col *c = k->cols;
    PyObject *kind = (w.kind >= 0 && w.kind < PyTuple_GET_SIZE(cfg.kinds)) ? PyTuple_GET_ITEM(cfg.kinds, w.kind)
                                                                            : PyTuple_GET_ITEM(cfg.kinds, 0);
    PyObject *status = (status_code >= 0 && status_code < PyTuple_GET_SIZE(cfg.statuses))
                           ? PyTuple_GET_ITEM(cfg.statuses, status_code)
                           : PyTuple_GET_ITEM(cfg.statuses, 0);
    if (col_u64(&c[C_KEY_HI], be64(w.span_id.p)) < 0 || col_u64(&c[C_KEY_LO], be64(w.trace_id.p + 8)) < 0 ||
        col_hex(&c[C_TRACE_ID], w.trace_id) < 0 || col_hex(&c[C_SPAN_ID], w.span_id) < 0 ||
        (w.parent.n ? col_hex(&c[C_PARENT], w.parent) : col_null(&c[C_PARENT])) < 0 ||
        col_str(&c[C_NAME], w.name.p, w.name.n) < 0 || col_obj(&c[C_KIND], kind) < 0 ||
        col_u64(&c[C_START], w.start) < 0 || col_u64(&c[C_END], w.end) < 0 ||
        col_obj(&c[C_STATUS_CODE], status) < 0 ||
        (status_message.n ? col_str(&c[C_STATUS_MESSAGE], status_message.p, status_message.n)
                          : col_null(&c[C_STATUS_MESSAGE])) < 0 ||
        col_obj(&c[C_SERVICE], k->service) < 0 || col_obj(&c[C_SCOPE], k->scope) < 0 ||
        col_str(&c[C_ATTRIBUTES], b->p, b->n) < 0 || col_obj(&c[C_RESOURCE], k->resource_json) < 0)
        goto done;

    /* Events and links: JSON, and for the tail the events as the reference's dicts. */
    if (w.events.n) {
        b->n = 0;
        if (BUF_LIT(b, "[") < 0) goto done;
        if (needs_tail && (events_py = PyList_New(0)) == NULL) goto done;
        for (size_t i = 0; i < w.events.n; i++) {
            PyObject *eattrs = NULL;
            if (read_sub(d, w.events.v[i], &sub, 0, depth + 1) < 0 || read_entries(d, &sub.attrs, scratch, depth + 2) < 0)
                goto done;
            if ((i && BUF_LIT(b, ",") < 0) || BUF_LIT(b, "{\"name\":") < 0 || json_string(b, sub.name) < 0 ||
                BUF_LIT(b, ",\"time_ns\":") < 0 || json_uint(b, sub.time) < 0 || BUF_LIT(b, ",\"attributes\":") < 0)
                goto done;
            size_t attrs_at = b->n;
            if (entries_out(d, scratch, b, needs_tail ? &eattrs : NULL) < 0 || BUF_LIT(b, "}") < 0) goto done;
            if (!needs_tail) {
                /* conventions.refine: the first exception event's type; otlp_decode: a score per evaluation. */
                PyObject **error_type = &vals[cfg.special[S_ERROR_TYPE]];
                if (*error_type == Py_None && key_eq(sub.name, cfg.exception)) {
                    Value *v = entry_value(scratch, LIT("exception.type"));
                    if (v && (v->kind == V_STRING || v->kind == V_BYTES) && v->s.n) {
                        PyObject *text = NULL;
                        if (value_out(d, v, NULL, &text) < 0) goto done;
                        Py_SETREF(*error_type, text);
                    }
                }
                if (key_eq(sub.name, cfg.evaluation) &&
                    add_score(d, k, scratch, b->p + attrs_at, b->n - 1 - attrs_at, (int32_t)i, sub.time, &w,
                              vals[cfg.special[S_RUN_ID]]) < 0)
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
        if (BUF_LIT(b, "]") < 0 || col_str(&c[C_EVENTS], b->p, b->n) < 0) goto done;
    } else if (col_null(&c[C_EVENTS]) < 0) {
        goto done;
    }
    if (w.links.n) {
        b->n = 0;
        if (BUF_LIT(b, "[") < 0) goto done;
        for (size_t i = 0; i < w.links.n; i++) {
            if (read_sub(d, w.links.v[i], &sub, 1, depth + 1) < 0 || read_entries(d, &sub.attrs, scratch, depth + 2) < 0)
                goto done;
            if ((i && BUF_LIT(b, ",") < 0) || BUF_LIT(b, "{\"trace_id\":") < 0 || json_hex(b, sub.trace_id) < 0 ||
                BUF_LIT(b, ",\"span_id\":") < 0 || json_hex(b, sub.span_id) < 0 ||
                BUF_LIT(b, ",\"attributes\":") < 0 || entries_out(d, scratch, b, NULL) < 0 || BUF_LIT(b, "}") < 0)
                goto done;
        }
        if (BUF_LIT(b, "]") < 0 || col_str(&c[C_LINKS], b->p, b->n) < 0) goto done;
    } else if (col_null(&c[C_LINKS]) < 0) {
        goto done;
    }

    if (needs_tail) {
        /* The Python step appends this span's convention columns to the Decoded's lists; here they are NULL
         * placeholders, which otlp_native.py replaces with those lists' values at the rows noted. */
        spans_python++;
        int64_t row = (int64_t)(c[C_KEY_HI].len - 1);
        if (raw_put(&k->tail_rows, &row, 8) < 0) goto done;
        for (int i = C_OPERATION; i < k->ncols; i++) /* the operation and every column after it */
            if (col_null(&c[i]) < 0) goto done;
        if (span_ids(&w, ids) < 0) goto done;
        name_py = PyUnicode_DecodeUTF8((const char *)w.name.p, (Py_ssize_t)w.name.n, NULL);
        start_py = PyLong_FromUnsignedLongLong(w.start);
        end_py = PyLong_FromUnsignedLongLong(w.end);
        if (name_py == NULL || start_py == NULL || end_py == NULL) goto done;
        Py_ssize_t scores_before = PyList_GET_SIZE(k->tail_scores);
        PyObject *result = PyObject_CallFunctionObjArgs(cfg.tail, k->out, attrs_py, events_py ? events_py : Py_None,
                                                        name_py, start_py, ids[0], ids[1], ids[2], ids[3],
                                                        end_py, NULL);
        if (result == NULL) goto done;
        Py_DECREF(result);
        /* Its score rows go after the native score rows so far, as the reference orders them. */
        int64_t at = (int64_t)k->score_cols[0].len;
        for (Py_ssize_t i = scores_before; i < PyList_GET_SIZE(k->tail_scores); i++)
            if (raw_put(&k->score_inserts, &at, 8) < 0) goto done;
    } else {
        /* conventions.refine's cost: reported, else priced from the table when the call has tokens. */
        PyObject *source = Py_None;
        PyObject **cost = &vals[cfg.special[S_COST]];
        if (*cost != Py_None) {
            source = cfg.reported;
        } else if (vals[cfg.special[S_INPUT_TOKENS]] != Py_None || vals[cfg.special[S_OUTPUT_TOKENS]] != Py_None) {
            if ((start_py = PyLong_FromUnsignedLongLong(w.start)) == NULL) goto done;
            PyObject *priced = PyObject_CallFunctionObjArgs(
                cfg.price, vals[cfg.special[S_PROVIDER]], vals[cfg.special[S_RESPONSE_MODEL]],
                vals[cfg.special[S_REQUEST_MODEL]], vals[cfg.special[S_INPUT_TOKENS]],
                vals[cfg.special[S_OUTPUT_TOKENS]], Py_None, Py_None, Py_None, start_py, NULL);
            if (priced == NULL) goto done;
            Py_SETREF(*cost, priced);
            if (priced != Py_None) {
                source = cfg.price_table;
                spans_native_priced++;
            }
        }
        if (col_obj(&c[C_OPERATION], operation) < 0 || col_obj(&c[COL_PROBE], probe) < 0 ||
            col_obj(&c[COL_COST_SOURCE], source) < 0)
            goto done;
        for (int i = 0; i < cfg.npromote; i++)
            if (col_obj(&c[N_BASE + i], vals[i]) < 0) goto done;
        for (int i = COL_NULLS; i < k->ncols; i++)
            if (col_null(&c[i]) < 0) goto done;
        spans_native++;
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
    entries_free(&events_scratch);
    Py_XDECREF(attrs_py);
    Py_XDECREF(events_py);
    Py_XDECREF(name_py);
    Py_XDECREF(start_py);
    Py_XDECREF(end_py);
    return rc;
}

/* ---------- resource, scope ---------- */

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

/* The resource's attributes as JSON (shared by its spans) and its service.name when a string (bytes as their
 * base64 text, as the reference reads every attribute). */
static int read_resource(Decoder *d, Sink *k, Acc *res, Entries *scratch, int depth) {
    Slices kvs = {NULL, 0, 0};
    int rc = -1;
    if (res->seen) {
        Rd r = {res->s.p, res->s.p + res->s.n};
        while (r.p < r.end) {
            Field f;
            if (rd_field(d, &r, &f, depth) < 0) goto done;
            if (f.num == 1 && f.wt == 2 && slices_push(&kvs, f.s) < 0) goto done;
            if (f.num == 3 && f.wt == 2 && validate_entity_ref(d, f.s, depth + 1) < 0) goto done;
        }
    }
    if (read_entries(d, &kvs, scratch, depth + 1) < 0) goto done;
    d->json.n = 0;
    if (entries_out(d, scratch, &d->json, NULL) < 0) goto done;
    Py_XSETREF(k->resource_json, ascii_str(d->json.p, d->json.n));
    if (k->resource_json == NULL) goto done;
    PyObject *service = Py_None;
    for (size_t i = 0; i < scratch->n; i++) {
        Entry *e = &scratch->v[i];
        if (e->show && e->key.n == 12 && memcmp(e->key.p, "service.name", 12) == 0) {
            Value *v = &scratch->v[e->last].value;
            if (v->kind == V_STRING || v->kind == V_BYTES) {
                service = NULL;
                if (value_out(d, v, NULL, &service) < 0) goto done;
                Py_XSETREF(k->service, service);
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
    if (scope->seen) {
        Rd r = {scope->s.p, scope->s.p + scope->s.n};
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
    if (read_entries(d, &kvs, scratch, depth + 1) < 0 || entries_out(d, scratch, NULL, NULL) < 0) goto done;
    Py_XSETREF(k->scope, name.n ? PyUnicode_DecodeUTF8((const char *)name.p, (Py_ssize_t)name.n, NULL)
                                : Py_NewRef(Py_None));
    rc = k->scope == NULL ? -1 : 0;
done:
    slices_free(&kvs);
    return rc;
}

static int read_scope_spans(Decoder *d, Sink *k, Slice s, Entries *scratch, int depth) {
    Rd r = {s.p, s.p + s.n};
    Acc scope = {{NULL, 0}, 0};
    Slices spans = {NULL, 0, 0};
    int rc = -1;
    while (r.p < r.end) {
        Field f;
        if (rd_field(d, &r, &f, depth) < 0) goto done;
        if (f.num == 1 && f.wt == 2 && acc_add(&d->arena, &scope, f.s) < 0) goto done;
        if (f.num == 2 && f.wt == 2 && slices_push(&spans, f.s) < 0) goto done;
        if (f.num == 3 && f.wt == 2 && want_string(d, &f) < 0) goto done;
    }
    if (read_scope(d, k, &scope, scratch, depth + 1) < 0) goto done;
    for (size_t i = 0; i < spans.n; i++)
        if (add_span(d, k, spans.v[i], scratch, depth + 1) < 0) goto done;
    rc = 0;
done:
    slices_free(&spans);
    return rc;
}

static int read_resource_spans(Decoder *d, Sink *k, Slice s, Entries *scratch) {
    int depth = 1;
    Rd r = {s.p, s.p + s.n};
    Acc resource = {{NULL, 0}, 0};
    Slices scopes = {NULL, 0, 0};
    int rc = -1;
    while (r.p < r.end) {
        Field f;
        if (rd_field(d, &r, &f, depth) < 0) goto done;
        if (f.num == 1 && f.wt == 2 && acc_add(&d->arena, &resource, f.s) < 0) goto done;
        if (f.num == 2 && f.wt == 2 && slices_push(&scopes, f.s) < 0) goto done;
        if (f.num == 3 && f.wt == 2 && want_string(d, &f) < 0) goto done;
    }
    if (read_resource(d, k, &resource, scratch, depth + 1) < 0) goto done;
    for (size_t i = 0; i < scopes.n; i++)
        if (read_scope_spans(d, k, scopes.v[i], scratch, depth + 1) < 0) goto done;
    rc = 0;
done:
    slices_free(&scopes);
    return rc;
}

/* decode(body, decoded, errors, tail_scores) -> (rejected, rows, columns, tail_rows, score_rows, score_columns,
 * score_inserts): columns as col_release gives them, in the order of the Sink's; tail_rows the int64 rows whose
 * convention columns the Python step filled; score_inserts, per score row the Python step appended to the
 * Decoded's lists (tail_scores is one of them), the number of native score rows before it. */
static PyObject *decode(PyObject *self, PyObject *args) {
    Py_buffer body;
    PyObject *tail_scores, *out, *errors;
    if (!cfg.ready) {
        PyErr_SetString(PyExc_RuntimeError, "configure() first");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*OO!O!", &body, &out, &PyList_Type, &errors, &PyList_Type, &tail_scores))
        return NULL;
    Sink *k = PyMem_Calloc(1, sizeof(Sink));
    Decoder d;
    memset(&d, 0, sizeof d);
    d.slot = PyMem_Malloc((cfg.nkeys + 1) * sizeof(int));
    if (k == NULL || d.slot == NULL) {
        PyMem_Free(k);
        PyMem_Free(d.slot);
        PyBuffer_Release(&body);
        return PyErr_NoMemory();
    }
    PyObject *result = NULL, *columns = NULL, *score_columns = NULL;
    int rc = 0;
    k->ncols = cfg.ncols;
    if (k->ncols < COL_NULLS) {
        PyErr_SetString(PyExc_ValueError, "fewer column types than columns");
        rc = -1;
    }
    for (int i = 0; i < k->ncols && rc == 0; i++) rc = col_init(&k->cols[i], cfg.storage[i]);
    for (int i = 0; i < N_SCORE && rc == 0; i++) rc = col_init(&k->score_cols[i], cfg.score_storage[i]);
    k->tail_scores = tail_scores;
    k->out = out;
    k->errors = errors;
    for (size_t i = 0; i < cfg.nkeys; i++) d.slot[i] = -1;
    Entries scratch = {NULL, 0, 0, 0};
    Rd r = {body.buf, (const uint8_t *)body.buf + body.len};
    while (rc == 0 && r.p < r.end) {
        Field f;
        rc = rd_field(&d, &r, &f, 0);
        if (rc == 0 && f.num == 1 && f.wt == 2) rc = read_resource_spans(&d, k, f.s, &scratch);
    }
    entries_free(&scratch);
    arena_free(&d.arena);
    PyMem_Free(d.slot);
    PyMem_Free(d.json.p);
    Py_XDECREF(k->service);
    Py_XDECREF(k->resource_json);
    Py_XDECREF(k->scope);
    PyBuffer_Release(&body);
    if (rc < 0) {
        if (d.error != NULL && !PyErr_Occurred())
            PyErr_Format(cfg.bad_payload, "not an OTLP ExportTraceServiceRequest in protobuf: %s", d.error);
        goto done;
    }
    if ((columns = PyTuple_New(k->ncols)) == NULL || (score_columns = PyTuple_New(N_SCORE)) == NULL) goto done;
    Py_ssize_t rows = (Py_ssize_t)k->cols[0].len, score_rows = (Py_ssize_t)k->score_cols[0].len;
    for (int i = 0; i < k->ncols + N_SCORE; i++) {
        PyObject *col = col_release(i < k->ncols ? &k->cols[i] : &k->score_cols[i - k->ncols]);
        if (col == NULL) goto done;
        PyTuple_SET_ITEM(i < k->ncols ? columns : score_columns, i < k->ncols ? i : i - k->ncols, col);
    }
    PyObject *tail = raw_release(&k->tail_rows);
    PyObject *inserts = tail ? raw_release(&k->score_inserts) : NULL;
    if (inserts != NULL)
        result = Py_BuildValue("(lnONnON)", k->rejected, rows, columns, tail, score_rows, score_columns, inserts);
    else
        Py_XDECREF(tail);
done:
    Py_XDECREF(columns);
    Py_XDECREF(score_columns);
    for (int i = 0; i < k->ncols; i++) col_free(&k->cols[i]);
    for (int i = 0; i < N_SCORE; i++) col_free(&k->score_cols[i]);
    raw_free(&k->tail_rows);
    raw_free(&k->score_inserts);
    PyMem_Free(k);
    return result;
}

static PyObject *stats(PyObject *self, PyObject *unused) {
    return Py_BuildValue("{sKsKsK}", "native", spans_native, "python", spans_python, "native_priced",
                         spans_native_priced);
}

static PyMethodDef methods[] = {
    {"stats", stats, METH_NOARGS, "stats() -> spans decoded since import, by the path their conventions took"},
    {"configure", configure, METH_VARARGS,
     "configure(bad_payload, tail, price, kinds, statuses, name_operations, agent_operation, reported, "
     "price_table, keys, fallback_keys, message_keys, operation_key, probe_key, promote_spec, special, "
     "event_names, pass_labels, fail_labels, column_types, score_types)"},
    {"decode", decode, METH_VARARGS,
     "decode(body, decoded, errors, tail_scores) -> (rejected, rows, columns, tail_rows, score_rows, "
     "score_columns, score_inserts)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_otlp_native", NULL, -1, methods};

PyMODINIT_FUNC PyInit__otlp_native(void) {
    if (PyType_Ready(&BufferType) < 0) return NULL;
    return PyModule_Create(&module);
}
