/* AnyValue, ArrayValue, KeyValueList and KeyValue lists. */
#include "otlp_json.h"

static int any_value(Reader *r, Out *o, int depth);

static const Field KEYVALUE_FIELDS[] = {{"key", 1}, {"value", 2}, {"keyStrindex", 3}, {"key_strindex", 3}, {NULL, 0}};

static int key_value(Reader *r, Out *o, int depth) {
    if (!consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0;
    while ((rc = lsh_next_key(r, &first, KEYVALUE_FIELDS, K_KEYVALUE, &seen, &id)) == 1) {
        if (id == 1)
            rc = lsh_string_field(r, o, 1);
        else if (id == 2) {
            size_t mark;
            if ((rc = lsh_begin_message(o, 2, &mark)) || (rc = any_value(r, o, depth + 1)))
                return rc;
            rc = lsh_end_message(o, mark);
        } else if (id == 3) {
            int64_t index; /* the reference reads the key, not its index in a dictionary */
            rc = lsh_read_int(r, 31, &index);
        } else
            rc = lsh_skip_value(r, 0);
        if (rc)
            return rc;
    }
    return rc;
}

/* A repeated KeyValue field: a JSON array of objects. */
int lsh_key_values(Reader *r, Out *o, int field, int depth) {
    if (!consume(r, '['))
        return FALLBACK;
    if (consume(r, ']'))
        return 0;
    do {
        size_t mark;
        int rc;
        if ((rc = lsh_begin_message(o, field, &mark)) || (rc = key_value(r, o, depth)) ||
            (rc = lsh_end_message(o, mark)))
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
    while ((rc = lsh_next_key(r, &first, VALUES_FIELDS, kind, &seen, &id)) == 1) {
        if (id != 1) {
            if ((rc = lsh_skip_value(r, 0)))
                return rc;
            continue;
        }
        if (kind == K_KVLIST) {
            if ((rc = lsh_key_values(r, o, 1, depth)))
                return rc;
            continue;
        }
        if (!consume(r, '['))
            return FALLBACK;
        if (consume(r, ']'))
            continue;
        do {
            size_t mark;
            if ((rc = lsh_begin_message(o, 1, &mark)) || (rc = any_value(r, o, depth + 1)) ||
                (rc = lsh_end_message(o, mark)))
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
    while ((rc = lsh_next_key(r, &first, ANYVALUE_FIELDS, K_ANYVALUE, &seen, &id)) == 1) {
        if (id && set++)
            return FALLBACK; /* two members of the oneof: ParseDict refuses the span */
        switch (id) {
        case 1:
            rc = lsh_string_field(r, o, 1);
            break;
        case 2: {
            int b;
            rc = lsh_read_bool(r, &b) ? FALLBACK : lsh_put_varint_field(o, 2, (uint64_t)b);
            break;
        }
        case 3: {
            int64_t v;
            rc = lsh_read_int(r, 63, &v);
            if (!rc)
                rc = lsh_put_varint_field(o, 3, (uint64_t)v);
            break;
        }
        case 4: {
            double v;
            uint64_t bits;
            rc = lsh_read_double(r, &v);
            if (!rc) {
                memcpy(&bits, &v, 8);
                rc = lsh_put_fixed64_field(o, 4, bits);
            }
            break;
        }
        case 5:
        case 6: {
            size_t mark;
            if ((rc = lsh_begin_message(o, id, &mark)) || (rc = value_list(r, o, id == 5 ? K_ARRAY : K_KVLIST, depth)))
                return rc;
            rc = lsh_end_message(o, mark);
            break;
        }
        case 7:
            rc = lsh_bytes_field(r, o, 7);
            break;
        case 8: {
            int64_t index;
            rc = lsh_read_int(r, 31, &index);
            if (!rc)
                rc = lsh_put_varint_field(o, 8, (uint64_t)index);
            break;
        }
        default:
            rc = lsh_skip_value(r, 0);
        }
        if (rc)
            return rc;
    }
    return rc;
}
