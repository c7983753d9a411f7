/* Object keys, and the scalars of a field (integers, enums, doubles, bools, strings, hex ids, bytes) as
 * json_format converts them. */
#include "otlp_json.h"

/* The next key of an object (after '{' was consumed): 1 with the key's field id (0 for a name the message
 * does not have), 0 at the end of the object. A key read twice, a known name this module does not handle
 * and a name json_format takes for an extension send the body back. */
int lsh_next_key(Reader *r, int *first, const Field *fields, int kind, uint64_t *seen, int *id) {
    if (*first) {
        *first = 0;
        if (consume(r, '}'))
            return 0;
    } else if (!consume(r, ',')) {
        return consume(r, '}') ? 0 : FALLBACK;
    }
    const char *s;
    size_t n;
    int rc = lsh_read_string(r, &s, &n);
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
    int known = PySet_Contains(lsh_known_names[kind], key);
    Py_DECREF(key);
    if (known < 0)
        return NOMEM;
    return known ? FALLBACK : 1;
}

/* --- scalars as json_format converts them --- */

/* A scalar json_format also takes written as a JSON string: 1 with that string read, 0 if the value is not a
 * string, or an error. */
static int string_form(Reader *r, const char **s, size_t *n) {
    if (peek(r) != '"')
        return 0;
    int rc = lsh_read_string(r, s, n);
    return rc ? rc : 1;
}

/* An integer field: a JSON integer, or a string of ASCII digits (ParseDict's int() takes more: handed back). */
static int read_integer(Reader *r, int *negative, uint64_t *magnitude) {
    const char *s;
    size_t n;
    int rc = string_form(r, &s, &n);
    if (rc < 0)
        return rc;
    if (rc) {
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
    int c = peek(r);
    if (c == '-' || (c >= '0' && c <= '9')) {
        Number num;
        if ((rc = lsh_read_number(r, &num)))
            return rc;
        if (!num.is_int || num.overflow)
            return FALLBACK;
        *negative = num.negative;
        *magnitude = num.magnitude;
        return 0;
    }
    return FALLBACK;
}

int lsh_read_uint(Reader *r, uint64_t max, uint64_t *v) {
    int negative;
    int rc = read_integer(r, &negative, v);
    if (rc)
        return rc;
    if (negative && *v == 0)
        return 0;
    return negative || *v > max ? FALLBACK : 0;
}

int lsh_read_int(Reader *r, int64_t bits, int64_t *v) {
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

int lsh_read_enum(Reader *r, const char *const *names, int count, int64_t *v) {
    const char *s;
    size_t n;
    int rc = string_form(r, &s, &n);
    if (rc < 0)
        return rc;
    if (rc) {
        for (int i = 0; i < count; i++)
            if (strlen(names[i]) == n && memcmp(names[i], s, n) == 0) {
                *v = i;
                return 0;
            }
        return FALLBACK;
    }
    return lsh_read_int(r, 31, v);
}

int lsh_read_double(Reader *r, double *v) {
    const char *s;
    size_t n;
    int rc = string_form(r, &s, &n);
    if (rc < 0)
        return rc;
    if (rc) {
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
    int c = peek(r);
    if (c != '-' && (c < '0' || c > '9'))
        return FALLBACK;
    Number num;
    if ((rc = lsh_read_number(r, &num)))
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

int lsh_read_bool(Reader *r, int *v) {
    if (lsh_read_literal(r, "true"))
        *v = 1;
    else if (lsh_read_literal(r, "false"))
        *v = 0;
    else
        return FALLBACK;
    return 0;
}

/* The string fields: a JSON string, converted on its way to the wire (as it is, hex ids, base64 bytes). */
typedef int (*Convert)(Out *o, int field, const char *s, size_t n);

static inline int string_as(Reader *r, Out *o, int field, Convert convert) {
    const char *s;
    size_t n;
    int rc = lsh_read_string(r, &s, &n);
    return rc ? rc : convert(o, field, s, n);
}

/* As it is; with o NULL, a field the reference does not read, only checked. */
static int text(Out *o, int field, const char *s, size_t n) {
    return o ? lsh_put_bytes_field(o, field, s, n) : 0;
}

int lsh_string_field(Reader *r, Out *o, int field) {
    return string_as(r, o, field, text);
}

/* The alphabets of hex ids and base64 bytes, as runs of characters each with the value of its first; expanded
 * by lsh_init_digits into tables of each byte's value (-1: not a digit), as a per-character search costs. */
typedef struct {
    char first, last;
    int value;
} Digits;

static const Digits HEX_RUNS[] = {{'0', '9', 0}, {'a', 'f', 10}, {'A', 'F', 10}, {0, 0, 0}};
/* Both base64 alphabets, standard and urlsafe. */
static const Digits BASE64_RUNS[] = {{'A', 'Z', 0}, {'a', 'z', 26}, {'0', '9', 52}, {'+', '+', 62},
                                     {'-', '-', 62}, {'/', '/', 63}, {'_', '_', 63}, {0, 0, 0}};
static signed char HEX[256], BASE64[256];

static void expand(signed char *table, const Digits *runs) {
    memset(table, -1, 256);
    for (const Digits *d = runs; d->first; d++)
        for (int c = d->first; c <= d->last; c++)
            table[c] = (signed char)(d->value + (c - d->first));
}

void lsh_init_digits(void) {
    expand(HEX, HEX_RUNS);
    expand(BASE64, BASE64_RUNS);
}

/* A span or link id in hex, as the reference's bytes.fromhex reads it (without the whitespace it also
 * allows); "" is no id. The length is the protobuf decoder's to check. */
static int hex_id(Out *o, int field, const char *s, size_t n) {
    if (n == 0)
        return 0;
    if (n % 2 || n > 256)
        return FALLBACK;
    unsigned char raw[128];
    for (size_t i = 0; i < n; i += 2) {
        int hi = HEX[(unsigned char)s[i]], lo = HEX[(unsigned char)s[i + 1]];
        if (hi < 0 || lo < 0)
            return FALLBACK;
        raw[i / 2] = (unsigned char)(hi << 4 | lo);
    }
    return lsh_put_bytes_field(o, field, raw, n / 2);
}

int lsh_hex_id_field(Reader *r, Out *o, int field) {
    return string_as(r, o, field, hex_id);
}

/* bytesValue as json_format reads it (urlsafe_b64decode after padding, so either alphabet): the plain
 * shapes only; excess padding, stray characters and the like are handed back. */
static int base64(Out *o, int field, const char *s, size_t n) {
    int rc;
    size_t data = n;
    while (data && s[data - 1] == '=')
        data--;
    size_t pads = n - data;
    if (data % 4 == 1 || (pads && !((data % 4 == 2 && pads <= 2) || (data % 4 == 3 && pads == 1))))
        return FALLBACK;
    if (lsh_reserve(o, data + 16))
        return NOMEM;
    size_t mark;
    if ((rc = lsh_begin_message(o, field, &mark)))
        return rc;
    if (lsh_reserve(o, data))
        return NOMEM;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < data; i++) {
        int v = BASE64[(unsigned char)s[i]];
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
    return lsh_end_message(o, mark);
}

int lsh_bytes_field(Reader *r, Out *o, int field) {
    return string_as(r, o, field, base64);
}
