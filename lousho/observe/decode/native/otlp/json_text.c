/* JSON text of strings, ids and numbers (ASCII only: json.dumps' ensure_ascii), and base64 of bytes values. */
#include "otlp_native.h"

static int json_u16(Buf *b, unsigned v) {
    char e[6] = {'\\', 'u', HEX[(v >> 12) & 15], HEX[(v >> 8) & 15], HEX[(v >> 4) & 15], HEX[v & 15]};
    return buf_put(b, e, 6);
}

int lsh_json_string(Buf *b, Slice s) {
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

int lsh_json_hex(Buf *b, Slice s) {
    if (buf_reserve(b, s.n * 2 + 2) < 0) return -1;
    b->p[b->n++] = '"';
    for (size_t i = 0; i < s.n; i++) {
        b->p[b->n++] = HEX[s.p[i] >> 4];
        b->p[b->n++] = HEX[s.p[i] & 15];
    }
    b->p[b->n++] = '"';
    return 0;
}

int lsh_json_int(Buf *b, int64_t v) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%lld", (long long)v);
    return buf_put(b, tmp, (size_t)n);
}

int lsh_json_uint(Buf *b, uint64_t v) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
    return buf_put(b, tmp, (size_t)n);
}

int lsh_json_double(Buf *b, double v) {
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

size_t lsh_b64_len(size_t n) { return (n + 2) / 3 * 4; }

void lsh_b64_encode(char *out, Slice s) {
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

PyObject *lsh_ascii_str(const char *p, size_t n) {
    PyObject *s = PyUnicode_New((Py_ssize_t)n, 127);
    if (s == NULL) return NULL;
    memcpy(PyUnicode_1BYTE_DATA(s), p, n);
    return s;
}
