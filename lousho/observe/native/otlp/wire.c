/* The protobuf wire, past the inline reader in otlp_native.h: merged message fields, skipped groups,
 * strict UTF-8. */
#include "otlp_native.h"

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

void lsh_arena_free(Arena *a) {
    while (a->head) {
        Block *next = a->head->next;
        PyMem_Free(a->head);
        a->head = next;
    }
}

int lsh_acc_add(Arena *a, Acc *acc, Slice s) {
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

int lsh_skip_group(Decoder *d, Rd *r, uint32_t num, int depth) {
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

int lsh_utf8_valid(Slice s) {
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
