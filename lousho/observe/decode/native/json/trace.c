/* The trace messages, outermost last: resource and its entity refs, scope, event, link, status, span, and
 * the request's outer levels. */
#include "otlp_json.h"

/* A JSON array of strings (a repeated string field the reference does not read). */
static int strings(Reader *r) {
    if (!consume(r, '['))
        return FALLBACK;
    if (consume(r, ']'))
        return 0;
    do {
        int rc = lsh_string_field(r, NULL, 0);
        if (rc)
            return rc;
    } while (consume(r, ','));
    return consume(r, ']') ? 0 : FALLBACK;
}

static const Field ENTITYREF_FIELDS[] = {{"schemaUrl", 1}, {"schema_url", 1}, {"type", 2}, {"idKeys", 3},
                                        {"id_keys", 3}, {"descriptionKeys", 4}, {"description_keys", 4}, {NULL, 0}};

/* An entity reference of the resource: checked as ParseDict would, not kept (the reference reads none). */
static int entity_ref_member(Reader *r, Out *unused, const Message *m, int id, int depth) {
    return id <= 2 ? lsh_string_field(r, NULL, id) : strings(r);
}

static const Message ENTITY_REF = {ENTITYREF_FIELDS, K_ENTITYREF, 0, entity_ref_member, {NULL, NULL}};

static const Field RESOURCE_FIELDS[] = {{"attributes", 1}, {"droppedAttributesCount", 2},
                                        {"dropped_attributes_count", 2}, {"entityRefs", 3}, {"entity_refs", 3},
                                        {NULL, 0}};

static int resource_member(Reader *r, Out *o, const Message *m, int id, int depth) {
    uint64_t count;
    switch (id) {
    case 1:
        return repeated(r, o, 1, &lsh_key_value, 0);
    case 2:
        return lsh_read_uint(r, UINT32_MAX, &count);
    default: {
        Out scratch = {NULL, 0, 0};
        int rc = repeated(r, &scratch, 3, &ENTITY_REF, 0);
        PyMem_Free(scratch.buf);
        return rc;
    }
    }
}

static const Message RESOURCE = {RESOURCE_FIELDS, K_RESOURCE, 0, resource_member, {NULL, NULL}};

static const Field SCOPE_FIELDS[] = {{"name", 1}, {"version", 2}, {"attributes", 3}, {"droppedAttributesCount", 4},
                                     {"dropped_attributes_count", 4}, {NULL, 0}};

static int scope_member(Reader *r, Out *o, const Message *m, int id, int depth) {
    uint64_t count;
    switch (id) {
    case 1:
        return lsh_string_field(r, o, 1);
    case 2:
        return lsh_string_field(r, NULL, 2);
    case 3:
        return repeated(r, o, 3, &lsh_key_value, 0);
    default:
        return lsh_read_uint(r, UINT32_MAX, &count);
    }
}

static const Message SCOPE = {SCOPE_FIELDS, K_SCOPE, 0, scope_member, {NULL, NULL}};

static const Field EVENT_FIELDS[] = {{"timeUnixNano", 1}, {"time_unix_nano", 1}, {"name", 2}, {"attributes", 3},
                                     {"droppedAttributesCount", 4}, {"dropped_attributes_count", 4}, {NULL, 0}};

static int event_member(Reader *r, Out *o, const Message *m, int id, int depth) {
    uint64_t v;
    int rc;
    switch (id) {
    case 1:
        rc = lsh_read_uint(r, UINT64_MAX, &v);
        return rc ? rc : lsh_put_fixed64_field(o, 1, v);
    case 2:
        return lsh_string_field(r, o, 2);
    case 3:
        return repeated(r, o, 3, &lsh_key_value, 0);
    default:
        return lsh_read_uint(r, UINT32_MAX, &v);
    }
}

static const Message EVENT = {EVENT_FIELDS, K_EVENT, 0, event_member, {NULL, NULL}};

static const Field LINK_FIELDS[] = {{"traceId", 1}, {"spanId", 2}, {"traceState", 3}, {"trace_state", 3},
                                    {"attributes", 4}, {"droppedAttributesCount", 5},
                                    {"dropped_attributes_count", 5}, {"flags", 6}, {NULL, 0}};

static int link_member(Reader *r, Out *o, const Message *m, int id, int depth) {
    uint64_t v;
    switch (id) {
    case 1:
    case 2:
        return lsh_hex_id_field(r, o, id);
    case 3:
        return lsh_string_field(r, NULL, 3);
    case 4:
        return repeated(r, o, 4, &lsh_key_value, 0);
    default:
        return lsh_read_uint(r, UINT32_MAX, &v);
    }
}

static const Message LINK = {LINK_FIELDS, K_LINK, 0, link_member, {NULL, NULL}};

static const Field STATUS_FIELDS[] = {{"message", 2}, {"code", 3}, {NULL, 0}};
static const char *const STATUS_NAMES[] = {"STATUS_CODE_UNSET", "STATUS_CODE_OK", "STATUS_CODE_ERROR"};
static const char *const KIND_NAMES[] = {"SPAN_KIND_UNSPECIFIED", "SPAN_KIND_INTERNAL", "SPAN_KIND_SERVER",
                                         "SPAN_KIND_CLIENT", "SPAN_KIND_PRODUCER", "SPAN_KIND_CONSUMER"};

/* An enum field, by name or number, written as its number. */
static int enum_field(Reader *r, Out *o, int field, const char *const *names, int count) {
    int64_t v;
    int rc = lsh_read_enum(r, names, count, &v);
    return rc ? rc : lsh_put_varint_field(o, field, (uint64_t)v);
}

static int status_member(Reader *r, Out *o, const Message *m, int id, int depth) {
    return id == 2 ? lsh_string_field(r, o, 2) : enum_field(r, o, 3, STATUS_NAMES, 3);
}

static const Message STATUS = {STATUS_FIELDS, K_STATUS, 0, status_member, {NULL, NULL}};

static const Field SPAN_FIELDS[] = {
    {"traceId", 1}, {"spanId", 2}, {"traceState", 3}, {"trace_state", 3}, {"parentSpanId", 4}, {"name", 5},
    {"kind", 6}, {"startTimeUnixNano", 7}, {"start_time_unix_nano", 7}, {"endTimeUnixNano", 8},
    {"end_time_unix_nano", 8}, {"attributes", 9}, {"droppedAttributesCount", 10},
    {"dropped_attributes_count", 10}, {"events", 11}, {"droppedEventsCount", 12}, {"dropped_events_count", 12},
    {"links", 13}, {"droppedLinksCount", 14}, {"dropped_links_count", 14}, {"status", 15}, {"flags", 16},
    {NULL, 0}};

static int span_member(Reader *r, Out *o, const Message *m, int id, int depth) {
    uint64_t v;
    int rc;
    switch (id) {
    case 1:
    case 2:
    case 4:
        return lsh_hex_id_field(r, o, id);
    case 3:
        return lsh_string_field(r, NULL, 3);
    case 5:
        return lsh_string_field(r, o, 5);
    case 6:
        return enum_field(r, o, 6, KIND_NAMES, 6);
    case 7:
    case 8:
        rc = lsh_read_uint(r, UINT64_MAX, &v);
        return rc ? rc : lsh_put_fixed64_field(o, id, v);
    case 9:
        return repeated(r, o, 9, &lsh_key_value, 0);
    case 11:
        return repeated(r, o, 11, &EVENT, 0);
    case 13:
        return repeated(r, o, 13, &LINK, 0);
    case 15:
        return embedded(r, o, 15, &STATUS, 0);
    default: /* the dropped counts and flags, checked, not kept */
        return lsh_read_uint(r, UINT32_MAX, &v);
    }
}

static const Message SPAN = {SPAN_FIELDS, K_SPAN, 0, span_member, {NULL, NULL}};

/* The outer levels, read by the reference with dict.get: other keys are ignored whatever their value; null
 * is an absent part. ScopeSpans and ResourceSpans are each a message (field 1) and a list of messages (2). */
static int outer_member(Reader *r, Out *o, const Message *m, int id, int depth) {
    if (lsh_read_literal(r, "null"))
        return 0;
    return id == 1 ? embedded(r, o, 1, m->parts[0], 0) : repeated(r, o, 2, m->parts[1], 0);
}

static const Field SCOPE_SPANS_FIELDS[] = {{"scope", 1}, {"spans", 2}, {NULL, 0}};
static const Message SCOPE_SPANS = {SCOPE_SPANS_FIELDS, -1, 0, outer_member, {&SCOPE, &SPAN}};

static const Field RESOURCE_SPANS_FIELDS[] = {{"resource", 1}, {"scopeSpans", 2}, {NULL, 0}};
static const Message RESOURCE_SPANS = {RESOURCE_SPANS_FIELDS, -1, 0, outer_member, {&RESOURCE, &SCOPE_SPANS}};

/* "resourceLogs" and "resourceMetrics" are refused by the reference with their own message. */
static const Field REQUEST_FIELDS[] = {{"resourceSpans", 1}, {"resourceLogs", 2}, {"resourceMetrics", 3}, {NULL, 0}};

static int request_member(Reader *r, Out *o, const Message *m, int id, int depth) {
    if (id != 1)
        return FALLBACK;
    return lsh_read_literal(r, "null") ? 0 : repeated(r, o, 1, &RESOURCE_SPANS, 0);
}

static const Message REQUEST = {REQUEST_FIELDS, -1, 0, request_member, {NULL, NULL}};

int lsh_request(Reader *r, Out *o) {
    int rc = read_message(r, o, &REQUEST, 0);
    if (rc)
        return rc;
    skip_ws(r);
    return r->p == r->end ? 0 : FALLBACK;
}
