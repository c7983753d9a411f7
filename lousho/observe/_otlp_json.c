/* OTLP/JSON trace requests transcoded to OTLP/protobuf wire bytes, for the native protobuf decoder.
 *
 * The reference is otlp_decode.decode_json: json.loads, then google.protobuf.json_format.ParseDict per
 * resource, scope and span (ids in hex). This module handles the subset of bodies whose meaning it can
 * state exactly and returns None for every other body, which the caller then gives to the reference:
 * anything the reference refuses or rejects a span of for a JSON reason (bad JSON, bad UTF-8, lone
 * surrogates, a null, a wrong type, a duplicate key, a value out of its field's range, a number the
 * reference reads through a Python conversion this module does not copy). A span whose ids are valid hex
 * of the wrong length, or whose times pass 2^63, is encoded as it is: the protobuf decoder rejects it
 * with the reference's own message, as ParseDict would have let it through to the same check.
 *
 * transcode(body) -> bytes | None; stats() -> (bodies transcoded, bodies handed back).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#define FALLBACK (-1)
#define NOMEM (-2)
/* ParseDict refuses messages nested 100 deep; values nested this deep are handed back instead. */
#define MAX_VALUE_DEPTH 24
#define MAX_SKIP_DEPTH 200

typedef struct {
    unsigned char *buf;
    size_t len, cap;
} Out;

typedef struct {
    const unsigned char *p, *end;
    Out scratch; /* a string with escapes or non-ASCII, decoded */
} Reader;

/* The names json_format knows per message (json and proto names); a known name this module does not
 * handle sends the body back. */
enum {
    K_RESOURCE, K_SCOPE, K_SPAN, K_EVENT, K_LINK, K_STATUS, K_KEYVALUE, K_ANYVALUE, K_ARRAY, K_KVLIST, K_ENTITYREF,
    K_COUNT
};
static PyObject *known_names[K_COUNT];
static unsigned long long n_transcoded, n_fallback;

/* --- output --- */

static int reserve(Out *o, size_t extra) {
    if (o->len + extra <= o->cap)
        return 0;
    size_t cap = o->cap ? o->cap : 256;
    while (cap < o->len + extra)
        cap *= 2;
    unsigned char *buf = PyMem_Realloc(o->buf, cap);
    if (buf == NULL) {
        PyErr_NoMemory();
        return NOMEM;
    }
    o->buf = buf;
    o->cap = cap;
    return 0;
}

static int varint_size(uint64_t v) {
    int n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static void put_varint_unchecked(Out *o, uint64_t v) {
    while (v >= 0x80) {
        o->buf[o->len++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    o->buf[o->len++] = (unsigned char)v;
}

static int put_varint_field(Out *o, int field, uint64_t v) {
    if (reserve(o, 16))
        return NOMEM;
    put_varint_unchecked(o, (uint64_t)field << 3);
    put_varint_unchecked(o, v);
    return 0;
}

static int put_fixed64_field(Out *o, int field, uint64_t v) {
    if (reserve(o, 16))
        return NOMEM;
    put_varint_unchecked(o, (uint64_t)field << 3 | 1);
    for (int i = 0; i < 8; i++)
        o->buf[o->len++] = (unsigned char)(v >> (8 * i));
    return 0;
}

static int put_bytes_field(Out *o, int field, const void *data, size_t n) {
    if (reserve(o, n + 16))
        return NOMEM;
    put_varint_unchecked(o, (uint64_t)field << 3 | 2);
    put_varint_unchecked(o, n);
    if (n)
        memcpy(o->buf + o->len, data, n);
    o->len += n;
    return 0;
}

/* A length-delimited field whose length is known once its content is written: one byte is kept for the
 * length, and the content moved on the rare message of 128 bytes or more. */
static int begin_message(Out *o, int field, size_t *mark) {
    if (reserve(o, 16))
        return NOMEM;
    put_varint_unchecked(o, (uint64_t)field << 3 | 2);
    *mark = o->len++;
    return 0;
}

static int end_message(Out *o, size_t mark) {
    size_t n = o->len - mark - 1;
    int size = varint_size(n);
    if (size > 1) {
        if (reserve(o, (size_t)size))
            return NOMEM;
        memmove(o->buf + mark + size, o->buf + mark + 1, n);
    }
    size_t end = o->len + (size_t)size - 1;
    o->len = mark;
    put_varint_unchecked(o, n);
    o->len = end;
    return 0;
}

/* --- JSON reading: strict RFC 8259, as json.loads reads it; anything else is handed back --- */

static void skip_ws(Reader *r) {
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\n' || *r->p == '\r' || *r->p == '\t'))
        r->p++;
}

static int consume(Reader *r, unsigned char c) {
    skip_ws(r);
    if (r->p < r->end && *r->p == c) {
        r->p++;
        return 1;
    }
    return 0;
}

static int peek(Reader *r) {
    skip_ws(r);
    return r->p < r->end ? *r->p : -1;
}

/* One UTF-8 sequence starting at p (a byte >= 0x80): its length, or 0 if invalid (overlong, surrogate,
 * past U+10FFFF, truncated). json.loads decodes with surrogatepass, but ParseDict refuses a surrogate. */
static int utf8_length(const unsigned char *p, const unsigned char *end) {
    unsigned char c = p[0];
    int n;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if (end - p < n)
        return 0;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (int i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return n;
}

static int hex4(const unsigned char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= c - '0';
        else if (c >= 'a' && c <= 'f')
            v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            v |= c - 'A' + 10;
        else
            return 0;
    }
    *out = v;
    return 1;
}

static int put_utf8(Out *o, unsigned cp) {
    if (reserve(o, 4))
        return NOMEM;
    unsigned char *b = o->buf + o->len;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        o->len += 1;
    } else if (cp < 0x800) {
        b[0] = (unsigned char)(0xC0 | cp >> 6);
        b[1] = (unsigned char)(0x80 | (cp & 0x3F));
        o->len += 2;
    } else if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | cp >> 12);
        b[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F));
        o->len += 3;
    } else {
        b[0] = (unsigned char)(0xF0 | cp >> 18);
        b[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        b[3] = (unsigned char)(0x80 | (cp & 0x3F));
        o->len += 4;
    }
    return 0;
}

/* A JSON string as UTF-8: a slice of the body when it has no escapes, else decoded into r->scratch (valid
 * until the next string is read). */
static int read_string(Reader *r, const char **s, size_t *n) {
    if (!consume(r, '"'))
        return FALLBACK;
    const unsigned char *start = r->p, *p = r->p;
    while (p < r->end) {
        unsigned char c = *p;
        if (c == '"') {
            *s = (const char *)start;
            *n = (size_t)(p - start);
            r->p = p + 1;
            return 0;
        }
        if (c == '\\')
            break;
        if (c < 0x20)
            return FALLBACK;
        if (c < 0x80)
            p++;
        else {
            int k = utf8_length(p, r->end);
            if (!k)
                return FALLBACK;
            p += k;
        }
    }
    if (p >= r->end)
        return FALLBACK;
    Out *o = &r->scratch;
    o->len = 0;
    if (reserve(o, (size_t)(p - start)))
        return NOMEM;
    if (p > start)
        memcpy(o->buf, start, (size_t)(p - start));
    o->len = (size_t)(p - start);
    while (p < r->end) {
        unsigned char c = *p;
        if (c == '"') {
            *s = (const char *)o->buf;
            *n = o->len;
            r->p = p + 1;
            return 0;
        }
        if (c < 0x20)
            return FALLBACK;
        if (c == '\\') {
            if (r->end - p < 2)
                return FALLBACK;
            unsigned char e = p[1];
            unsigned char plain = 0;
            switch (e) {
            case '"': plain = '"'; break;
            case '\\': plain = '\\'; break;
            case '/': plain = '/'; break;
            case 'b': plain = '\b'; break;
            case 'f': plain = '\f'; break;
            case 'n': plain = '\n'; break;
            case 'r': plain = '\r'; break;
            case 't': plain = '\t'; break;
            case 'u': break;
            default: return FALLBACK;
            }
            if (plain) {
                if (reserve(o, 1))
                    return NOMEM;
                o->buf[o->len++] = plain;
                p += 2;
                continue;
            }
            unsigned cp, low;
            if (r->end - p < 6 || !hex4(p + 2, &cp))
                return FALLBACK;
            p += 6;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return FALLBACK; /* a lone low surrogate: ParseDict refuses it */
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (r->end - p < 6 || p[0] != '\\' || p[1] != 'u' || !hex4(p + 2, &low) || low < 0xDC00 ||
                    low > 0xDFFF)
                    return FALLBACK;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                p += 6;
            }
            if (put_utf8(o, cp))
                return NOMEM;
            continue;
        }
        int k = 1;
        if (c >= 0x80 && !(k = utf8_length(p, r->end)))
            return FALLBACK;
        if (reserve(o, (size_t)k))
            return NOMEM;
        memcpy(o->buf + o->len, p, (size_t)k);
        o->len += (size_t)k;
        p += k;
    }
    return FALLBACK;
}

typedef struct {
    const char *text;
    size_t len;
    int is_int; /* no fraction, no exponent: json.loads makes it a Python int */
    int negative;
    int overflow; /* magnitude past 2^64 - 1 */
    uint64_t magnitude;
} Number;

static int read_number(Reader *r, Number *num) {
    skip_ws(r);
    const unsigned char *p = r->p, *start = p;
    memset(num, 0, sizeof *num);
    num->is_int = 1;
    if (p < r->end && *p == '-') {
        num->negative = 1;
        p++;
    }
    if (p >= r->end || *p < '0' || *p > '9')
        return FALLBACK; /* also NaN and Infinity, which json.loads takes and ParseDict refuses */
    if (*p == '0') {
        p++;
    } else {
        while (p < r->end && *p >= '0' && *p <= '9') {
            unsigned d = *p - '0';
            if (num->magnitude > (UINT64_MAX - d) / 10)
                num->overflow = 1;
            else
                num->magnitude = num->magnitude * 10 + d;
            p++;
        }
    }
    if (p < r->end && *p == '.') {
        num->is_int = 0;
        p++;
        if (p >= r->end || *p < '0' || *p > '9')
            return FALLBACK;
        while (p < r->end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < r->end && (*p == 'e' || *p == 'E')) {
        num->is_int = 0;
        p++;
        if (p < r->end && (*p == '+' || *p == '-'))
            p++;
        if (p >= r->end || *p < '0' || *p > '9')
            return FALLBACK;
        while (p < r->end && *p >= '0' && *p <= '9')
            p++;
    }
    num->text = (const char *)start;
    num->len = (size_t)(p - start);
    r->p = p;
    return 0;
}

static int read_literal(Reader *r, const char *word) {
    size_t n = strlen(word);
    skip_ws(r);
    if ((size_t)(r->end - r->p) >= n && memcmp(r->p, word, n) == 0) {
        r->p += n;
        return 1;
    }
    return 0;
}

/* Any JSON value, checked and passed over: the value of a key the reference ignores. */
static int skip_value(Reader *r, int depth) {
    if (depth > MAX_SKIP_DEPTH)
        return FALLBACK;
    int c = peek(r);
    const char *s;
    size_t n;
    Number num;
    int rc;
    switch (c) {
    case '"':
        return read_string(r, &s, &n);
    case '{':
        r->p++;
        if (consume(r, '}'))
            return 0;
        do {
            if ((rc = read_string(r, &s, &n)))
                return rc;
            if (!consume(r, ':'))
                return FALLBACK;
            if ((rc = skip_value(r, depth + 1)))
                return rc;
        } while (consume(r, ','));
        return consume(r, '}') ? 0 : FALLBACK;
    case '[':
        r->p++;
        if (consume(r, ']'))
            return 0;
        do {
            if ((rc = skip_value(r, depth + 1)))
                return rc;
        } while (consume(r, ','));
        return consume(r, ']') ? 0 : FALLBACK;
    case 't':
        return read_literal(r, "true") ? 0 : FALLBACK;
    case 'f':
        return read_literal(r, "false") ? 0 : FALLBACK;
    case 'n':
        return read_literal(r, "null") ? 0 : FALLBACK;
    default:
        return read_number(r, &num);
    }
}

/* --- objects and keys --- */

typedef struct {
    const char *name;
    int id;
} Field;

/* The next key of an object (after '{' was consumed): 1 with the key's field id (0 for a name the message
 * does not have), 0 at the end of the object. A key read twice, a known name this module does not handle
 * and a name json_format takes for an extension send the body back. */
static int next_key(Reader *r, int *first, const Field *fields, int kind, uint64_t *seen, int *id) {
    if (*first) {
        *first = 0;
        if (consume(r, '}'))
            return 0;
    } else if (!consume(r, ',')) {
        return consume(r, '}') ? 0 : FALLBACK;
    }
    const char *s;
    size_t n;
    int rc = read_string(r, &s, &n);
    if (rc)
        return rc;
    if (!consume(r, ':'))
        return FALLBACK;
    *id = 0;
    for (const Field *f = fields; f->name; f++) {
        if (strlen(f->name) == n && memcmp(f->name, s, n) == 0) {
            *id = f->id;
            break;
        }
    }
    if (*id) {
        if (*seen & (1ull << *id))
            return FALLBACK;
        *seen |= 1ull << *id;
        return 1;
    }
    if (kind < 0)
        return 1; /* the request's outer levels: read with dict.get, other keys ignored */
    if (n && s[0] == '[')
        return FALLBACK;
    PyObject *key = PyUnicode_DecodeUTF8(s, (Py_ssize_t)n, NULL);
    if (key == NULL)
        return NOMEM;
    int known = PySet_Contains(known_names[kind], key);
    Py_DECREF(key);
    if (known < 0)
        return NOMEM;
    return known ? FALLBACK : 1;
}

/* --- scalars as json_format converts them --- */

/* An integer field: a JSON integer, or a string of ASCII digits (ParseDict's int() takes more: handed back). */
static int read_integer(Reader *r, int *negative, uint64_t *magnitude) {
    int c = peek(r);
    if (c == '"') {
        const char *s;
        size_t n;
        int rc = read_string(r, &s, &n);
        if (rc)
            return rc;
        size_t i = 0;
        *negative = 0;
        *magnitude = 0;
        if (n && s[0] == '-') {
            *negative = 1;
            i = 1;
        }
        if (i == n || n - i > 20)
            return FALLBACK;
        for (; i < n; i++) {
            if (s[i] < '0' || s[i] > '9')
                return FALLBACK;
            unsigned d = (unsigned)(s[i] - '0');
            if (*magnitude > (UINT64_MAX - d) / 10)
                return FALLBACK;
            *magnitude = *magnitude * 10 + d;
        }
        return 0;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        Number num;
        int rc = read_number(r, &num);
        if (rc)
            return rc;
        if (!num.is_int || num.overflow)
            return FALLBACK;
        *negative = num.negative;
        *magnitude = num.magnitude;
        return 0;
    }
    return FALLBACK;
}

static int read_uint(Reader *r, uint64_t max, uint64_t *v) {
    int negative;
    int rc = read_integer(r, &negative, v);
    if (rc)
        return rc;
    if (negative && *v == 0)
        return 0;
    return negative || *v > max ? FALLBACK : 0;
}

static int read_int(Reader *r, int64_t bits, int64_t *v) {
    int negative;
    uint64_t m;
    int rc = read_integer(r, &negative, &m);
    if (rc)
        return rc;
    uint64_t limit = (uint64_t)1 << bits; /* 2^31 or 2^63 */
    if (negative) {
        if (m > limit)
            return FALLBACK;
        *v = m == limit ? (bits == 63 ? INT64_MIN : -(int64_t)limit) : -(int64_t)m;
    } else {
        if (m >= limit)
            return FALLBACK;
        *v = (int64_t)m;
    }
    return 0;
}

static int read_enum(Reader *r, const char *const *names, int count, int64_t *v) {
    if (peek(r) == '"') {
        const char *s;
        size_t n;
        int rc = read_string(r, &s, &n);
        if (rc)
            return rc;
        for (int i = 0; i < count; i++)
            if (strlen(names[i]) == n && memcmp(names[i], s, n) == 0) {
                *v = i;
                return 0;
            }
        return FALLBACK;
    }
    return read_int(r, 31, v);
}

static int read_double(Reader *r, double *v) {
    int c = peek(r);
    if (c == '"') {
        const char *s;
        size_t n;
        int rc = read_string(r, &s, &n);
        if (rc)
            return rc;
        if (n == 3 && memcmp(s, "NaN", 3) == 0)
            *v = Py_NAN;
        else if (n == 8 && memcmp(s, "Infinity", 8) == 0)
            *v = Py_HUGE_VAL;
        else if (n == 9 && memcmp(s, "-Infinity", 9) == 0)
            *v = -Py_HUGE_VAL;
        else
            return FALLBACK;
        return 0;
    }
    if (c != '-' && (c < '0' || c > '9'))
        return FALLBACK;
    Number num;
    int rc = read_number(r, &num);
    if (rc)
        return rc;
    if (num.is_int) {
        /* float(int): exact up to 2^53; -0 is the integer 0, so +0.0 */
        if (num.overflow || num.magnitude > ((uint64_t)1 << 53))
            return FALLBACK;
        *v = num.negative ? -(double)num.magnitude : (double)num.magnitude;
        if (*v == 0)
            *v = 0.0;
        return 0;
    }
    char text[128];
    if (num.len >= sizeof text)
        return FALLBACK;
    memcpy(text, num.text, num.len);
    text[num.len] = 0;
    char *end;
    *v = PyOS_string_to_double(text, &end, NULL); /* float()'s own parser */
    if (*v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear(); /* not reached for a number of the JSON grammar; the reference then says what it is */
        return FALLBACK;
    }
    if (end != text + num.len || Py_IS_INFINITY(*v))
        return FALLBACK; /* an overflow: the reference keeps it as "Infinity" at the top, refuses it nested */
    return 0;
}

static int read_bool(Reader *r, int *v) {
    if (read_literal(r, "true"))
        *v = 1;
    else if (read_literal(r, "false"))
        *v = 0;
    else
        return FALLBACK;
    return 0;
}

static int string_field(Reader *r, Out *o, int field) {
    if (peek(r) != '"')
        return FALLBACK;
    const char *s;
    size_t n;
    int rc = read_string(r, &s, &n);
    if (rc)
        return rc;
    return o ? put_bytes_field(o, field, s, n) : 0;
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A span or link id in hex, as the reference's bytes.fromhex reads it (without the whitespace it also
 * allows); "" is no id. The length is the protobuf decoder's to check. */
static int hex_id_field(Reader *r, Out *o, int field) {
    if (peek(r) != '"')
        return FALLBACK;
    const char *s;
    size_t n;
    int rc = read_string(r, &s, &n);
    if (rc)
        return rc;
    if (n == 0)
        return 0;
    if (n % 2 || n > 256)
        return FALLBACK;
    unsigned char raw[128];
    for (size_t i = 0; i < n; i += 2) {
        int hi = hex_value(s[i]), lo = hex_value(s[i + 1]);
        if (hi < 0 || lo < 0)
            return FALLBACK;
        raw[i / 2] = (unsigned char)(hi << 4 | lo);
    }
    return put_bytes_field(o, field, raw, n / 2);
}

static int b64_value(char c) {
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

/* bytesValue as json_format reads it (urlsafe_b64decode after padding, so either alphabet): the plain
 * shapes only; excess padding, stray characters and the like are handed back. */
static int bytes_field(Reader *r, Out *o, int field) {
    if (peek(r) != '"')
        return FALLBACK;
    const char *s;
    size_t n;
    int rc = read_string(r, &s, &n);
    if (rc)
        return rc;
    size_t data = n;
    while (data && s[data - 1] == '=')
        data--;
    size_t pads = n - data;
    if (data % 4 == 1 || (pads && !((data % 4 == 2 && pads <= 2) || (data % 4 == 3 && pads == 1))))
        return FALLBACK;
    if (reserve(o, data + 16))
        return NOMEM;
    size_t mark;
    if ((rc = begin_message(o, field, &mark)))
        return rc;
    if (reserve(o, data))
        return NOMEM;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < data; i++) {
        int v = b64_value(s[i]);
        if (v < 0)
            return FALLBACK;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o->buf[o->len++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    return end_message(o, mark);
}

/* --- messages --- */

static int any_value(Reader *r, Out *o, int depth);

static const Field KEYVALUE_FIELDS[] = {{"key", 1}, {"value", 2}, {"keyStrindex", 3}, {"key_strindex", 3}, {NULL, 0}};

static int key_value(Reader *r, Out *o, int depth) {
    if (!consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0;
    while ((rc = next_key(r, &first, KEYVALUE_FIELDS, K_KEYVALUE, &seen, &id)) == 1) {
        if (id == 1)
            rc = string_field(r, o, 1);
        else if (id == 2) {
            size_t mark;
            if ((rc = begin_message(o, 2, &mark)) || (rc = any_value(r, o, depth + 1)))
                return rc;
            rc = end_message(o, mark);
        } else if (id == 3) {
            int64_t index; /* the reference reads the key, not its index in a dictionary */
            rc = read_int(r, 31, &index);
        } else
            rc = skip_value(r, 0);
        if (rc)
            return rc;
    }
    return rc;
}

/* A repeated KeyValue field: a JSON array of objects. */
static int key_values(Reader *r, Out *o, int field, int depth) {
    if (!consume(r, '['))
        return FALLBACK;
    if (consume(r, ']'))
        return 0;
    do {
        size_t mark;
        int rc;
        if ((rc = begin_message(o, field, &mark)) || (rc = key_value(r, o, depth)) || (rc = end_message(o, mark)))
            return rc;
    } while (consume(r, ','));
    return consume(r, ']') ? 0 : FALLBACK;
}

static const Field VALUES_FIELDS[] = {{"values", 1}, {NULL, 0}};

/* ArrayValue or KeyValueList: {"values": [...]} */
static int value_list(Reader *r, Out *o, int kind, int depth) {
    if (!consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0;
    while ((rc = next_key(r, &first, VALUES_FIELDS, kind, &seen, &id)) == 1) {
        if (id != 1) {
            if ((rc = skip_value(r, 0)))
                return rc;
            continue;
        }
        if (kind == K_KVLIST) {
            if ((rc = key_values(r, o, 1, depth)))
                return rc;
            continue;
        }
        if (!consume(r, '['))
            return FALLBACK;
        if (consume(r, ']'))
            continue;
        do {
            size_t mark;
            if ((rc = begin_message(o, 1, &mark)) || (rc = any_value(r, o, depth + 1)) ||
                (rc = end_message(o, mark)))
                return rc;
        } while (consume(r, ','));
        if (!consume(r, ']'))
            return FALLBACK;
    }
    return rc;
}

static const Field ANYVALUE_FIELDS[] = {
    {"stringValue", 1}, {"string_value", 1}, {"boolValue", 2}, {"bool_value", 2}, {"intValue", 3},
    {"int_value", 3}, {"doubleValue", 4}, {"double_value", 4}, {"arrayValue", 5}, {"array_value", 5},
    {"kvlistValue", 6}, {"kvlist_value", 6}, {"bytesValue", 7}, {"bytes_value", 7}, {"stringValueStrindex", 8},
    {"string_value_strindex", 8}, {NULL, 0}};

static int any_value(Reader *r, Out *o, int depth) {
    if (depth > MAX_VALUE_DEPTH || !consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc, set = 0;
    uint64_t seen = 0;
    while ((rc = next_key(r, &first, ANYVALUE_FIELDS, K_ANYVALUE, &seen, &id)) == 1) {
        if (id && set++)
            return FALLBACK; /* two members of the oneof: ParseDict refuses the span */
        switch (id) {
        case 1:
            rc = string_field(r, o, 1);
            break;
        case 2: {
            int b;
            rc = read_bool(r, &b) ? FALLBACK : put_varint_field(o, 2, (uint64_t)b);
            break;
        }
        case 3: {
            int64_t v;
            rc = read_int(r, 63, &v);
            if (!rc)
                rc = put_varint_field(o, 3, (uint64_t)v);
            break;
        }
        case 4: {
            double v;
            uint64_t bits;
            rc = read_double(r, &v);
            if (!rc) {
                memcpy(&bits, &v, 8);
                rc = put_fixed64_field(o, 4, bits);
            }
            break;
        }
        case 5:
        case 6: {
            size_t mark;
            if ((rc = begin_message(o, id, &mark)) || (rc = value_list(r, o, id == 5 ? K_ARRAY : K_KVLIST, depth)))
                return rc;
            rc = end_message(o, mark);
            break;
        }
        case 7:
            rc = bytes_field(r, o, 7);
            break;
        case 8: {
            int64_t index;
            rc = read_int(r, 31, &index);
            if (!rc)
                rc = put_varint_field(o, 8, (uint64_t)index);
            break;
        }
        default:
            rc = skip_value(r, 0);
        }
        if (rc)
            return rc;
    }
    return rc;
}

/* A JSON array of strings (a repeated string field the reference does not read). */
static int strings(Reader *r) {
    if (!consume(r, '['))
        return FALLBACK;
    if (consume(r, ']'))
        return 0;
    do {
        int rc = string_field(r, NULL, 0);
        if (rc)
            return rc;
    } while (consume(r, ','));
    return consume(r, ']') ? 0 : FALLBACK;
}

static const Field ENTITYREF_FIELDS[] = {{"schemaUrl", 1}, {"schema_url", 1}, {"type", 2}, {"idKeys", 3},
                                        {"id_keys", 3}, {"descriptionKeys", 4}, {"description_keys", 4}, {NULL, 0}};

/* An entity reference of the resource: checked as ParseDict would, not kept (the reference reads none). */
static int entity_ref(Reader *r, Out *unused) {
    if (!consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0;
    while ((rc = next_key(r, &first, ENTITYREF_FIELDS, K_ENTITYREF, &seen, &id)) == 1) {
        if (id == 1 || id == 2)
            rc = string_field(r, NULL, id);
        else if (id)
            rc = strings(r);
        else
            rc = skip_value(r, 0);
        if (rc)
            return rc;
    }
    return rc;
}

static int messages(Reader *r, Out *o, int field, int (*one)(Reader *, Out *));

static const Field RESOURCE_FIELDS[] = {{"attributes", 1}, {"droppedAttributesCount", 2},
                                        {"dropped_attributes_count", 2}, {"entityRefs", 3}, {"entity_refs", 3},
                                        {NULL, 0}};

static int resource(Reader *r, Out *o) {
    if (!consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0, count;
    while ((rc = next_key(r, &first, RESOURCE_FIELDS, K_RESOURCE, &seen, &id)) == 1) {
        if (id == 1)
            rc = key_values(r, o, 1, 0);
        else if (id == 2)
            rc = read_uint(r, UINT32_MAX, &count);
        else if (id == 3) {
            Out scratch = {NULL, 0, 0};
            rc = messages(r, &scratch, 3, entity_ref);
            PyMem_Free(scratch.buf);
        } else
            rc = skip_value(r, 0);
        if (rc)
            return rc;
    }
    return rc;
}

static const Field SCOPE_FIELDS[] = {{"name", 1}, {"version", 2}, {"attributes", 3}, {"droppedAttributesCount", 4},
                                     {"dropped_attributes_count", 4}, {NULL, 0}};

static int scope(Reader *r, Out *o) {
    if (!consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0, count;
    while ((rc = next_key(r, &first, SCOPE_FIELDS, K_SCOPE, &seen, &id)) == 1) {
        switch (id) {
        case 1:
            rc = string_field(r, o, 1);
            break;
        case 2:
            rc = string_field(r, NULL, 2);
            break;
        case 3:
            rc = key_values(r, o, 3, 0);
            break;
        case 4:
            rc = read_uint(r, UINT32_MAX, &count);
            break;
        default:
            rc = skip_value(r, 0);
        }
        if (rc)
            return rc;
    }
    return rc;
}

static const Field EVENT_FIELDS[] = {{"timeUnixNano", 1}, {"time_unix_nano", 1}, {"name", 2}, {"attributes", 3},
                                     {"droppedAttributesCount", 4}, {"dropped_attributes_count", 4}, {NULL, 0}};

static int event(Reader *r, Out *o) {
    if (!consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0, v;
    while ((rc = next_key(r, &first, EVENT_FIELDS, K_EVENT, &seen, &id)) == 1) {
        switch (id) {
        case 1:
            rc = read_uint(r, UINT64_MAX, &v);
            if (!rc)
                rc = put_fixed64_field(o, 1, v);
            break;
        case 2:
            rc = string_field(r, o, 2);
            break;
        case 3:
            rc = key_values(r, o, 3, 0);
            break;
        case 4:
            rc = read_uint(r, UINT32_MAX, &v);
            break;
        default:
            rc = skip_value(r, 0);
        }
        if (rc)
            return rc;
    }
    return rc;
}

static const Field LINK_FIELDS[] = {{"traceId", 1}, {"spanId", 2}, {"traceState", 3}, {"trace_state", 3},
                                    {"attributes", 4}, {"droppedAttributesCount", 5},
                                    {"dropped_attributes_count", 5}, {"flags", 6}, {NULL, 0}};

static int span_link(Reader *r, Out *o) {
    if (!consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0, v;
    while ((rc = next_key(r, &first, LINK_FIELDS, K_LINK, &seen, &id)) == 1) {
        switch (id) {
        case 1:
        case 2:
            rc = hex_id_field(r, o, id);
            break;
        case 3:
            rc = string_field(r, NULL, 3);
            break;
        case 4:
            rc = key_values(r, o, 4, 0);
            break;
        case 5:
        case 6:
            rc = read_uint(r, UINT32_MAX, &v);
            break;
        default:
            rc = skip_value(r, 0);
        }
        if (rc)
            return rc;
    }
    return rc;
}

static const Field STATUS_FIELDS[] = {{"message", 2}, {"code", 3}, {NULL, 0}};
static const char *const STATUS_NAMES[] = {"STATUS_CODE_UNSET", "STATUS_CODE_OK", "STATUS_CODE_ERROR"};
static const char *const KIND_NAMES[] = {"SPAN_KIND_UNSPECIFIED", "SPAN_KIND_INTERNAL", "SPAN_KIND_SERVER",
                                         "SPAN_KIND_CLIENT", "SPAN_KIND_PRODUCER", "SPAN_KIND_CONSUMER"};

static int status(Reader *r, Out *o) {
    if (!consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0;
    int64_t code;
    while ((rc = next_key(r, &first, STATUS_FIELDS, K_STATUS, &seen, &id)) == 1) {
        if (id == 2)
            rc = string_field(r, o, 2);
        else if (id == 3) {
            rc = read_enum(r, STATUS_NAMES, 3, &code);
            if (!rc)
                rc = put_varint_field(o, 3, (uint64_t)code);
        } else
            rc = skip_value(r, 0);
        if (rc)
            return rc;
    }
    return rc;
}

/* A repeated message field: a JSON array of objects, each encoded by one. */
static int messages(Reader *r, Out *o, int field, int (*one)(Reader *, Out *)) {
    if (!consume(r, '['))
        return FALLBACK;
    if (consume(r, ']'))
        return 0;
    do {
        size_t mark;
        int rc;
        if ((rc = begin_message(o, field, &mark)) || (rc = one(r, o)) || (rc = end_message(o, mark)))
            return rc;
    } while (consume(r, ','));
    return consume(r, ']') ? 0 : FALLBACK;
}

static const Field SPAN_FIELDS[] = {
    {"traceId", 1}, {"spanId", 2}, {"traceState", 3}, {"trace_state", 3}, {"parentSpanId", 4}, {"name", 5},
    {"kind", 6}, {"startTimeUnixNano", 7}, {"start_time_unix_nano", 7}, {"endTimeUnixNano", 8},
    {"end_time_unix_nano", 8}, {"attributes", 9}, {"droppedAttributesCount", 10},
    {"dropped_attributes_count", 10}, {"events", 11}, {"droppedEventsCount", 12}, {"dropped_events_count", 12},
    {"links", 13}, {"droppedLinksCount", 14}, {"dropped_links_count", 14}, {"status", 15}, {"flags", 16},
    {NULL, 0}};

static int span(Reader *r, Out *o) {
    if (!consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0, v;
    int64_t kind;
    while ((rc = next_key(r, &first, SPAN_FIELDS, K_SPAN, &seen, &id)) == 1) {
        switch (id) {
        case 1:
        case 2:
        case 4:
            rc = hex_id_field(r, o, id);
            break;
        case 3:
            rc = string_field(r, NULL, 3);
            break;
        case 5:
            rc = string_field(r, o, 5);
            break;
        case 6:
            rc = read_enum(r, KIND_NAMES, 6, &kind);
            if (!rc)
                rc = put_varint_field(o, 6, (uint64_t)kind);
            break;
        case 7:
        case 8:
            rc = read_uint(r, UINT64_MAX, &v);
            if (!rc)
                rc = put_fixed64_field(o, id, v);
            break;
        case 9:
            rc = key_values(r, o, 9, 0);
            break;
        case 10:
        case 12:
        case 14:
        case 16:
            rc = read_uint(r, UINT32_MAX, &v);
            break;
        case 11:
            rc = messages(r, o, 11, event);
            break;
        case 13:
            rc = messages(r, o, 13, span_link);
            break;
        case 15: {
            size_t mark;
            if ((rc = begin_message(o, 15, &mark)) || (rc = status(r, o)))
                return rc;
            rc = end_message(o, mark);
            break;
        }
        default:
            rc = skip_value(r, 0);
        }
        if (rc)
            return rc;
    }
    return rc;
}

/* The outer levels, read by the reference with dict.get: other keys are ignored whatever their value; null
 * is an absent part. */

static const Field SCOPE_SPANS_FIELDS[] = {{"scope", 1}, {"spans", 2}, {NULL, 0}};

static int scope_spans(Reader *r, Out *o) {
    if (!consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0;
    while ((rc = next_key(r, &first, SCOPE_SPANS_FIELDS, -1, &seen, &id)) == 1) {
        if (id && read_literal(r, "null"))
            continue;
        if (id == 1) {
            size_t mark;
            if ((rc = begin_message(o, 1, &mark)) || (rc = scope(r, o)))
                return rc;
            rc = end_message(o, mark);
        } else if (id == 2)
            rc = messages(r, o, 2, span);
        else
            rc = skip_value(r, 0);
        if (rc)
            return rc;
    }
    return rc;
}

static const Field RESOURCE_SPANS_FIELDS[] = {{"resource", 1}, {"scopeSpans", 2}, {NULL, 0}};

static int resource_spans(Reader *r, Out *o) {
    if (!consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0;
    while ((rc = next_key(r, &first, RESOURCE_SPANS_FIELDS, -1, &seen, &id)) == 1) {
        if (id && read_literal(r, "null"))
            continue;
        if (id == 1) {
            size_t mark;
            if ((rc = begin_message(o, 1, &mark)) || (rc = resource(r, o)))
                return rc;
            rc = end_message(o, mark);
        } else if (id == 2)
            rc = messages(r, o, 2, scope_spans);
        else
            rc = skip_value(r, 0);
        if (rc)
            return rc;
    }
    return rc;
}

/* "resourceLogs" and "resourceMetrics" are refused by the reference with their own message. */
static const Field REQUEST_FIELDS[] = {{"resourceSpans", 1}, {"resourceLogs", 2}, {"resourceMetrics", 3}, {NULL, 0}};

static int request(Reader *r, Out *o) {
    if (!consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0;
    while ((rc = next_key(r, &first, REQUEST_FIELDS, -1, &seen, &id)) == 1) {
        if (id == 2 || id == 3)
            return FALLBACK;
        if (id == 1 && read_literal(r, "null"))
            continue;
        rc = id == 1 ? messages(r, o, 1, resource_spans) : skip_value(r, 0);
        if (rc)
            return rc;
    }
    if (rc)
        return rc;
    skip_ws(r);
    return r->p == r->end ? 0 : FALLBACK;
}

static PyObject *transcode(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (known_names[0] == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure() first");
        return NULL;
    }
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Reader r = {(const unsigned char *)view.buf, (const unsigned char *)view.buf + view.len, {NULL, 0, 0}};
    Out o = {NULL, 0, 0};
    int rc = reserve(&o, (size_t)view.len / 2 + 64);
    if (!rc)
        rc = request(&r, &o);
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
    if (!PyArg_ParseTuple(args, "O!", &PyTuple_Type, &names))
        return NULL;
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
        Py_XSETREF(known_names[i], Py_NewRef(set));
    }
    Py_RETURN_NONE;
}

static PyObject *stats(PyObject *self, PyObject *unused) {
    return Py_BuildValue("((sK)(sK))", "transcoded", n_transcoded, "reference", n_fallback);
}

static PyMethodDef methods[] = {
    {"transcode", transcode, METH_O, "OTLP/JSON trace request -> OTLP/protobuf bytes, or None for the reference"},
    {"configure", configure, METH_VARARGS, "the field names json_format knows, per message"},
    {"stats", stats, METH_NOARGS, "bodies transcoded and bodies handed to the reference since import"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_otlp_json", NULL, -1, methods};

PyMODINIT_FUNC PyInit__otlp_json(void) { return PyModule_Create(&module); }
