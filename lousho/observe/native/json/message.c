/* A message's JSON object read key by key, and the two ways a message field holds one: embedded, and
 * repeated (a JSON array). Every message reader of values.c and trace.c is this loop with its own field table
 * and member function. */
#include "otlp_json.h"

/* Values nested past MAX_VALUE_DEPTH are handed back; only AnyValue and what it holds ever pass depth > 0. */
int lsh_message(Reader *r, Out *o, const Message *m, int depth) {
    if (depth > MAX_VALUE_DEPTH || !consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0;
    while ((rc = lsh_next_key(r, &first, m->fields, m->kind, &seen, &id)) == 1) {
        if (!id)
            rc = lsh_skip_value(r, 0);
        else if (m->oneof && (seen & ~(1ull << id)))
            return FALLBACK;
        else
            rc = m->member(r, o, m, id, depth);
        if (rc)
            return rc;
    }
    return rc;
}

int lsh_embedded(Reader *r, Out *o, int field, const Message *m, int depth) {
    size_t mark;
    int rc;
    if ((rc = lsh_begin_message(o, field, &mark)) || (rc = lsh_message(r, o, m, depth)))
        return rc;
    return lsh_end_message(o, mark);
}

int lsh_repeated(Reader *r, Out *o, int field, const Message *m, int depth) {
    if (!consume(r, '['))
        return FALLBACK;
    if (consume(r, ']'))
        return 0;
    do {
        int rc = lsh_embedded(r, o, field, m, depth);
        if (rc)
            return rc;
    } while (consume(r, ','));
    return consume(r, ']') ? 0 : FALLBACK;
}
