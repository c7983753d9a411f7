/* AnyValue, ArrayValue, KeyValueList and KeyValue. The depth passed down counts the AnyValues a value sits in. */
#include "otlp_json.h"

static const Message ANY_VALUE;

static const Field KEYVALUE_FIELDS[] = {{"key", 1}, {"value", 2}, {"keyStrindex", 3}, {"key_strindex", 3}, {NULL, 0}};

static int key_value_member(Reader *r, Out *o, const Message *m, int id, int depth) {
    int64_t index; /* the reference reads the key, not its index in a dictionary */
    switch (id) {
    case 1:
        return lsh_string_field(r, o, 1);
    case 2:
        return embedded(r, o, 2, &ANY_VALUE, depth + 1);
    default:
        return lsh_read_int(r, 31, &index);
    }
}

const Message lsh_key_value = {KEYVALUE_FIELDS, K_KEYVALUE, 0, key_value_member, {NULL, NULL}};

static const Field VALUES_FIELDS[] = {{"values", 1}, {NULL, 0}};

/* ArrayValue or KeyValueList: {"values": [...]}, AnyValues one level down or KeyValues at this one. */
static int values_member(Reader *r, Out *o, const Message *m, int id, int depth) {
    return repeated(r, o, 1, m->parts[0], m->kind == K_ARRAY ? depth + 1 : depth);
}

static const Message ARRAY_VALUE = {VALUES_FIELDS, K_ARRAY, 0, values_member, {&ANY_VALUE, NULL}};
static const Message KVLIST_VALUE = {VALUES_FIELDS, K_KVLIST, 0, values_member, {&lsh_key_value, NULL}};

static const Field ANYVALUE_FIELDS[] = {
    {"stringValue", 1}, {"string_value", 1}, {"boolValue", 2}, {"bool_value", 2}, {"intValue", 3},
    {"int_value", 3}, {"doubleValue", 4}, {"double_value", 4}, {"arrayValue", 5}, {"array_value", 5},
    {"kvlistValue", 6}, {"kvlist_value", 6}, {"bytesValue", 7}, {"bytes_value", 7}, {"stringValueStrindex", 8},
    {"string_value_strindex", 8}, {NULL, 0}};

static int any_value_member(Reader *r, Out *o, const Message *m, int id, int depth) {
    switch (id) {
    case 1:
        return lsh_string_field(r, o, 1);
    case 2: {
        int b;
        return lsh_read_bool(r, &b) ? FALLBACK : lsh_put_varint_field(o, 2, (uint64_t)b);
    }
    case 3:
    case 8: { /* intValue, or stringValueStrindex (an int32) */
        int64_t v;
        int rc = lsh_read_int(r, id == 3 ? 63 : 31, &v);
        return rc ? rc : lsh_put_varint_field(o, id, (uint64_t)v);
    }
    case 4: {
        double v;
        uint64_t bits;
        int rc = lsh_read_double(r, &v);
        if (rc)
            return rc;
        memcpy(&bits, &v, 8);
        return lsh_put_fixed64_field(o, 4, bits);
    }
    case 5:
    case 6:
        return embedded(r, o, id, m->parts[id - 5], depth);
    default:
        return lsh_bytes_field(r, o, 7);
    }
}

static const Message ANY_VALUE = {ANYVALUE_FIELDS, K_ANYVALUE, 1, any_value_member, {&ARRAY_VALUE, &KVLIST_VALUE}};
