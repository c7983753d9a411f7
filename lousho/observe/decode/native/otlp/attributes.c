/* AnyValue and key/value lists: read and validated from the wire, deduplicated as a dict keeps them,
 * written as a JSON cell and/or built as Python objects. */
#include "otlp_native.h"

void lsh_entries_free(Entries *e) {
    PyMem_Free(e->v);
    e->v = NULL;
    e->n = e->cap = 0;
}

/* Reads one encoding of an AnyValue into v, over what earlier encodings set (callers zero v first): a member of
 * the oneof replaces another, an array or kvlist merges with the one before it. The encoding is ``s``, one
 * occurrence of KeyValue.value in the KeyValue ``kv``, or when kv is NULL an array's element: where an array's
 * or kvlist's later occurrences are looked for. */
static int read_value(Decoder *d, Slice s, Value *v, int depth, const Slice *kv);

static int read_kv(Decoder *d, Slice s, Entry *e, int depth) {
    if (depth > MAX_DEPTH) return fail(d, "nested too deep");
    Rd r = {s.p, s.p + s.n};
    e->key.p = (const uint8_t *)"";
    e->key.n = 0;
    memset(&e->value, 0, sizeof e->value);
    while (r.p < r.end) {
        Field f;
        if (rd_field(d, &r, &f, depth) < 0) return -1;
        if (f.num == 1 && f.wt == 2) {
            if (want_string(d, &f) < 0) return -1;
            e->key = f.s;
        } else if (f.num == 2 && f.wt == 2) {
            /* Each occurrence of the value parsed on its own, into the same Value, as protobuf merges them. */
            if (read_value(d, f.s, &e->value, depth + 1, &s) < 0) return -1;
        }
    }
    return 0;
}

/* Validate everything below ``msg`` (an ArrayValue or KeyValueList): read_value only merges them. */
static int walk_values(Decoder *d, Slice msg, int depth, int is_kvlist);

static int read_value(Decoder *d, Slice s, Value *v, int depth, const Slice *kv) {
    if (depth > MAX_DEPTH) return fail(d, "nested too deep");
    Rd r = {s.p, s.p + s.n};
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
            if (kv) lsh_acc_add(&v->msg, f.s, *kv, 2, f.num);
            else lsh_acc_add(&v->msg, f.s, s, f.num, 0);
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

/* An element of an ArrayValue, read on its own. */
static int read_element(Decoder *d, Slice s, Value *v, int depth) {
    memset(v, 0, sizeof *v);
    return read_value(d, s, v, depth, NULL);
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
            if (read_element(d, f.s, &v, depth + 1) < 0) return -1;
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

/* Keys are the sender's: with a hash anyone can compute, keys made to share a slot turn the table into a list
 * and a request of 60,000 of them into 1.8e9 comparisons with the GIL held. So the hash is SipHash-1-3 (as
 * Python's str hash) keyed per process from os.urandom at import: which keys collide is not known outside. */
static uint64_t hash_key[2];

void lsh_seed_hash(const uint8_t key[16]) {
    memcpy(hash_key, key, 16);
}

#define ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                                  \
    do {                                                                                                          \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);                                                 \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                                                    \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                                                    \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);                                                 \
    } while (0)

uint64_t lsh_key_hash(Slice k) {
    uint64_t v0 = 0x736f6d6570736575ULL ^ hash_key[0], v1 = 0x646f72616e646f6dULL ^ hash_key[1];
    uint64_t v2 = 0x6c7967656e657261ULL ^ hash_key[0], v3 = 0x7465646279746573ULL ^ hash_key[1];
    const uint8_t *p = k.p;
    size_t n = k.n;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t m = le64(p);
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t last = ((uint64_t)k.n << 56) | le64_n(p, (int)n);
    v3 ^= last;
    SIPROUND;
    v0 ^= last;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* Mark, as a dict built in order would keep them, which entries show and which value each shows. */
int lsh_dedupe(Entries *a) {
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
        size_t slot = (size_t)lsh_key_hash(a->v[j].key) & (size - 1);
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

static int kvlist_out(Decoder *d, const Acc *msg, Buf *b, PyObject **py);
int lsh_value_out(Decoder *d, Value *v, Buf *b, PyObject **py);

/* Where next_element is in the occurrences of an ArrayValue or KeyValueList. Zeroed to start. */
typedef struct {
    AccIter it;
    Rd r;
} ElementIter;

/* The next element (field 1, length-delimited) of an ArrayValue or KeyValueList, across the occurrences of
 * ``msg``: 1 with *out set, 0 at the end, -1 on error. */
static int next_element(Decoder *d, const Acc *msg, ElementIter *e, Slice *out) {
    for (;;) {
        while (e->r.p < e->r.end) {
            Field f;
            if (rd_field(d, &e->r, &f, 0) < 0) return -1;
            if (f.num == 1 && f.wt == 2) {
                *out = f.s;
                return 1;
            }
        }
        Slice piece;
        int more = lsh_acc_next(d, msg, &e->it, &piece);
        if (more <= 0) return more;
        e->r = (Rd){piece.p, piece.p + piece.n};
    }
}

static int array_out(Decoder *d, const Acc *msg, Buf *b, PyObject **py) {
    ElementIter it = {0};
    Slice element;
    int more;
    PyObject *list = NULL;
    if (py) {
        list = PyList_New(0);
        if (list == NULL) return -1;
    }
    if (b && BUF_LIT(b, "[") < 0) goto error;
    int first = 1;
    while ((more = next_element(d, msg, &it, &element)) > 0) {
        Value v;
        if (read_element(d, element, &v, 0) < 0) goto error;
        if (b && !first && BUF_LIT(b, ",") < 0) goto error;
        first = 0;
        PyObject *item = NULL;
        if (lsh_value_out(d, &v, b, py ? &item : NULL) < 0) goto error;
        if (py) {
            int rc = PyList_Append(list, item);
            Py_DECREF(item);
            if (rc < 0) goto error;
        }
    }
    if (more < 0) goto error;
    if (b && BUF_LIT(b, "]") < 0) goto error;
    if (py) *py = list;
    return 0;
error:
    Py_XDECREF(list);
    return -1;
}

int lsh_value_out(Decoder *d, Value *v, Buf *b, PyObject **py) {
    switch (v->kind) {
    case V_STRING:
        if (b && lsh_json_string(b, v->s) < 0) return -1;
        if (py && (*py = PyUnicode_DecodeUTF8((const char *)v->s.p, (Py_ssize_t)v->s.n, NULL)) == NULL) return -1;
        return 0;
    case V_BOOL:
        if (b && (v->i ? BUF_LIT(b, "true") : BUF_LIT(b, "false")) < 0) return -1;
        if (py) *py = PyBool_FromLong((long)v->i);
        return 0;
    case V_INT:
        if (b && lsh_json_int(b, v->i) < 0) return -1;
        if (py && (*py = PyLong_FromLongLong(v->i)) == NULL) return -1;
        return 0;
    case V_DOUBLE:
        if (b && lsh_json_double(b, v->f) < 0) return -1;
        if (py && (*py = PyFloat_FromDouble(v->f)) == NULL) return -1;
        return 0;
    case V_BYTES: {
        size_t n = lsh_b64_len(v->s.n);
        if (b) {
            if (buf_reserve(b, n + 2) < 0) return -1;
            b->p[b->n++] = '"';
            lsh_b64_encode(b->p + b->n, v->s);
            b->n += n;
            b->p[b->n++] = '"';
        }
        if (py) {
            PyObject *s = PyUnicode_New((Py_ssize_t)n, 127);
            if (s == NULL) return -1;
            lsh_b64_encode((char *)PyUnicode_1BYTE_DATA(s), v->s);
            *py = s;
        }
        return 0;
    }
    case V_ARRAY:
        return array_out(d, &v->msg, b, py);
    case V_KVLIST:
        return kvlist_out(d, &v->msg, b, py);
    default:
        if (b && BUF_LIT(b, "null") < 0) return -1;
        if (py) *py = Py_NewRef(Py_None);
        return 0;
    }
}

/* Entries of key/value messages, deduplicated, as a JSON object and/or a dict. */
int lsh_entries_out(Decoder *d, Entries *e, Buf *b, PyObject **py) {
    if (!e->deduped && lsh_dedupe(e) < 0) return -1;
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
            if (lsh_json_string(b, e->v[i].key) < 0 || BUF_LIT(b, ":") < 0) goto error;
        }
        first = 0;
        PyObject *item = NULL;
        if (lsh_value_out(d, v, b, py ? &item : NULL) < 0) goto error;
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

static int kvlist_out(Decoder *d, const Acc *msg, Buf *b, PyObject **py) {
    ElementIter it = {0};
    Slice element;
    int more;
    Entries e = {NULL, 0, 0, 0};
    while ((more = next_element(d, msg, &it, &element)) > 0) {
        Entry entry;
        if (read_kv(d, element, &entry, 0) < 0 || entries_push(&e, &entry) < 0) goto error;
    }
    if (more < 0) goto error;
    int rc = lsh_entries_out(d, &e, b, py);
    lsh_entries_free(&e);
    return rc;
error:
    lsh_entries_free(&e);
    return -1;
}

/* Read the KeyValue encodings of one attribute list (already validated as they are read). */
int lsh_read_entries(Decoder *d, Slices *kvs, Entries *out, int depth) {
    out->n = 0;
    out->deduped = 0;
    for (size_t i = 0; i < kvs->n; i++) {
        Entry e;
        if (read_kv(d, kvs->v[i], &e, depth) < 0 || entries_push(out, &e) < 0) return -1;
    }
    return 0;
}
