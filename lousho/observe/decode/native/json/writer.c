/* Protobuf output: fields written as wire bytes, nested messages with their length filled in after. */
#include "otlp_json.h"

int lsh_reserve(Out *o, size_t extra) {
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

int lsh_put_varint_field(Out *o, int field, uint64_t v) {
    if (lsh_reserve(o, 16))
        return NOMEM;
    put_varint_unchecked(o, (uint64_t)field << 3);
    put_varint_unchecked(o, v);
    return 0;
}

int lsh_put_fixed64_field(Out *o, int field, uint64_t v) {
    if (lsh_reserve(o, 16))
        return NOMEM;
    put_varint_unchecked(o, (uint64_t)field << 3 | 1);
    for (int i = 0; i < 8; i++)
        o->buf[o->len++] = (unsigned char)(v >> (8 * i));
    return 0;
}

int lsh_put_bytes_field(Out *o, int field, const void *data, size_t n) {
    if (lsh_reserve(o, n + 16))
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
int lsh_begin_message(Out *o, int field, size_t *mark) {
    if (lsh_reserve(o, 16))
        return NOMEM;
    put_varint_unchecked(o, (uint64_t)field << 3 | 2);
    *mark = o->len++;
    return 0;
}

int lsh_end_message(Out *o, size_t mark) {
    size_t n = o->len - mark - 1;
    int size = varint_size(n);
    if (size > 1) {
        if (lsh_reserve(o, (size_t)size))
            return NOMEM;
        memmove(o->buf + mark + size, o->buf + mark + 1, n);
    }
    size_t end = o->len + (size_t)size - 1;
    o->len = mark;
    put_varint_unchecked(o, n);
    o->len = end;
    return 0;
}
