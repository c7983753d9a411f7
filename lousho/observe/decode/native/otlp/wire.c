/* The protobuf wire, past the inline reader in otlp_native.h: merged message fields, skipped groups,
 * strict UTF-8. */
#include "otlp_native.h"

void lsh_acc_add(Acc *acc, Slice s, Slice outer, uint32_t num, uint32_t inner) {
    if (acc->seen) {
        acc->more = 1;
        return;
    }
    acc->first = s;
    acc->outer = outer;
    acc->num = num;
    acc->inner = inner;
    acc->seen = 1;
    acc->more = 0;
}

/* The next occurrence of a merged field: 1 (in *out), 0 when there are no more. They were validated when first
 * read, so walking them again only fails on memory the caller got wrong. Those before acc->first belong to an
 * earlier member of a oneof: an occurrence starts after the one before it ends, in every nested message. */
int lsh_acc_next(Decoder *d, const Acc *acc, AccIter *it, Slice *out) {
    if (!acc->more) {
        if (it->started || !acc->seen) return 0;
        it->started = 1;
        *out = acc->first;
        return 1;
    }
    if (!it->started) {
        it->started = 1;
        it->outer.p = acc->outer.p;
        it->outer.end = acc->outer.p + acc->outer.n;
        it->mid.p = it->mid.end = NULL;
    }
    for (;;) {
        while (it->mid.p < it->mid.end) {
            Field f;
            if (rd_field(d, &it->mid, &f, 0) < 0) return -1;
            if (f.num == acc->inner && f.wt == 2 && f.s.p >= acc->first.p) {
                *out = f.s;
                return 1;
            }
        }
        if (it->outer.p >= it->outer.end) return 0;
        Field f;
        if (rd_field(d, &it->outer, &f, 0) < 0) return -1;
        if (f.num != acc->num || f.wt != 2) continue;
        if (acc->inner) {
            if (f.s.p + f.s.n >= acc->first.p) {
                it->mid.p = f.s.p;
                it->mid.end = f.s.p + f.s.n;
            }
        } else if (f.s.p >= acc->first.p) {
            *out = f.s;
            return 1;
        }
    }
}

/* An unknown group, skipped as upb skips one: its fields must be well formed and it must end with its own
 * end-group tag, but nothing in it is a field of a message, so a field number 0 there is not refused. */
int lsh_skip_group(Decoder *d, Rd *r, uint32_t num, int depth) {
    if (depth > MAX_DEPTH) return fail(d, "nested too deep");
    for (;;) {
        if (r->p >= r->end) return fail(d, "unterminated group");
        uint64_t tag;
        if (rd_varint(r, &tag) < 0 || tag > UINT32_MAX) return fail(d, "bad tag");
        Field f;
        f.num = (uint32_t)(tag >> 3);
        f.wt = (int)(tag & 7);
        if (f.wt == 4) {
            if (f.num != num) return fail(d, "mismatched end group");
            return 0;
        }
        if (rd_value(d, r, &f, depth) < 0) return -1;
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
