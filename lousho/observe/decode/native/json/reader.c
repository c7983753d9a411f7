/* JSON reading: strict RFC 8259, as json.loads reads it; anything else is handed back. */
#include "otlp_json.h"

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
    if (lsh_reserve(o, 4))
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
int lsh_read_string(Reader *r, const char **s, size_t *n) {
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
    if (lsh_reserve(o, (size_t)(p - start)))
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
                if (lsh_reserve(o, 1))
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
        if (lsh_reserve(o, (size_t)k))
            return NOMEM;
        memcpy(o->buf + o->len, p, (size_t)k);
        o->len += (size_t)k;
        p += k;
    }
    return FALLBACK;
}

int lsh_read_number(Reader *r, Number *num) {
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

int lsh_read_literal(Reader *r, const char *word) {
    size_t n = strlen(word);
    skip_ws(r);
    if ((size_t)(r->end - r->p) >= n && memcmp(r->p, word, n) == 0) {
        r->p += n;
        return 1;
    }
    return 0;
}

/* Any JSON value, checked and passed over: the value of a key the reference ignores. Its recursion is bounded
 * by consume()'s nesting limit. */
int lsh_skip_value(Reader *r) {
    int c = peek(r);
    const char *s;
    size_t n;
    Number num;
    int rc;
    switch (c) {
    case '"':
        return lsh_read_string(r, &s, &n);
    case '{':
        if (!consume(r, '{'))
            return FALLBACK;
        if (consume(r, '}'))
            return 0;
        do {
            if ((rc = lsh_read_string(r, &s, &n)))
                return rc;
            if (!consume(r, ':'))
                return FALLBACK;
            if ((rc = lsh_skip_value(r)))
                return rc;
        } while (consume(r, ','));
        return consume(r, '}') ? 0 : FALLBACK;
    case '[':
        if (!consume(r, '['))
            return FALLBACK;
        if (consume(r, ']'))
            return 0;
        do {
            if ((rc = lsh_skip_value(r)))
                return rc;
        } while (consume(r, ','));
        return consume(r, ']') ? 0 : FALLBACK;
    case 't':
        return lsh_read_literal(r, "true") ? 0 : FALLBACK;
    case 'f':
        return lsh_read_literal(r, "false") ? 0 : FALLBACK;
    case 'n':
        return lsh_read_literal(r, "null") ? 0 : FALLBACK;
    default:
        return lsh_read_number(r, &num);
    }
}
