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
static int entity_ref(Reader *r, Out *unused) {
    if (!consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0;
    while ((rc = lsh_next_key(r, &first, ENTITYREF_FIELDS, K_ENTITYREF, &seen, &id)) == 1) {
        if (id == 1 || id == 2)
            rc = lsh_string_field(r, NULL, id);
        else if (id)
            rc = strings(r);
        else
            rc = lsh_skip_value(r, 0);
        if (rc)
            return rc;
    }
    return rc;
}

static int messages(Reader *r, Out *o, int field, int (*one)(Reader *, Out *));

static const Field RESOURCE_FIELDS[] = {{"attributes", 1}, {"droppedAttributesCount", 2},
                                        {"dropped_attributes_count", 2}, {"entityRefs", 3}, {"entity_refs", 3},
                                        {NULL, 0}};

static int resource(Reader *r, Out *o) {
    if (!consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0, count;
    while ((rc = lsh_next_key(r, &first, RESOURCE_FIELDS, K_RESOURCE, &seen, &id)) == 1) {
        if (id == 1)
            rc = lsh_key_values(r, o, 1, 0);
        else if (id == 2)
            rc = lsh_read_uint(r, UINT32_MAX, &count);
        else if (id == 3) {
            Out scratch = {NULL, 0, 0};
            rc = messages(r, &scratch, 3, entity_ref);
            PyMem_Free(scratch.buf);
        } else
            rc = lsh_skip_value(r, 0);
        if (rc)
            return rc;
    }
    return rc;
}

static const Field SCOPE_FIELDS[] = {{"name", 1}, {"version", 2}, {"attributes", 3}, {"droppedAttributesCount", 4},
                                     {"dropped_attributes_count", 4}, {NULL, 0}};

static int scope(Reader *r, Out *o) {
    if (!consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0, count;
    while ((rc = lsh_next_key(r, &first, SCOPE_FIELDS, K_SCOPE, &seen, &id)) == 1) {
        switch (id) {
        case 1:
            rc = lsh_string_field(r, o, 1);
            break;
        case 2:
            rc = lsh_string_field(r, NULL, 2);
            break;
        case 3:
            rc = lsh_key_values(r, o, 3, 0);
            break;
        case 4:
            rc = lsh_read_uint(r, UINT32_MAX, &count);
            break;
        default:
            rc = lsh_skip_value(r, 0);
        }
        if (rc)
            return rc;
    }
    return rc;
}

static const Field EVENT_FIELDS[] = {{"timeUnixNano", 1}, {"time_unix_nano", 1}, {"name", 2}, {"attributes", 3},
                                     {"droppedAttributesCount", 4}, {"dropped_attributes_count", 4}, {NULL, 0}};

static int event(Reader *r, Out *o) {
    if (!consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0, v;
    while ((rc = lsh_next_key(r, &first, EVENT_FIELDS, K_EVENT, &seen, &id)) == 1) {
        switch (id) {
        case 1:
            rc = lsh_read_uint(r, UINT64_MAX, &v);
            if (!rc)
                rc = lsh_put_fixed64_field(o, 1, v);
            break;
        case 2:
            rc = lsh_string_field(r, o, 2);
            break;
        case 3:
            rc = lsh_key_values(r, o, 3, 0);
            break;
        case 4:
            rc = lsh_read_uint(r, UINT32_MAX, &v);
            break;
        default:
            rc = lsh_skip_value(r, 0);
        }
        if (rc)
            return rc;
    }
    return rc;
}

static const Field LINK_FIELDS[] = {{"traceId", 1}, {"spanId", 2}, {"traceState", 3}, {"trace_state", 3},
                                    {"attributes", 4}, {"droppedAttributesCount", 5},
                                    {"dropped_attributes_count", 5}, {"flags", 6}, {NULL, 0}};

static int span_link(Reader *r, Out *o) {
    if (!consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0, v;
    while ((rc = lsh_next_key(r, &first, LINK_FIELDS, K_LINK, &seen, &id)) == 1) {
        switch (id) {
        case 1:
        case 2:
            rc = lsh_hex_id_field(r, o, id);
            break;
        case 3:
            rc = lsh_string_field(r, NULL, 3);
            break;
        case 4:
            rc = lsh_key_values(r, o, 4, 0);
            break;
        case 5:
        case 6:
            rc = lsh_read_uint(r, UINT32_MAX, &v);
            break;
        default:
            rc = lsh_skip_value(r, 0);
        }
        if (rc)
            return rc;
    }
    return rc;
}

static const Field STATUS_FIELDS[] = {{"message", 2}, {"code", 3}, {NULL, 0}};
static const char *const STATUS_NAMES[] = {"STATUS_CODE_UNSET", "STATUS_CODE_OK", "STATUS_CODE_ERROR"};
static const char *const KIND_NAMES[] = {"SPAN_KIND_UNSPECIFIED", "SPAN_KIND_INTERNAL", "SPAN_KIND_SERVER",
                                         "SPAN_KIND_CLIENT", "SPAN_KIND_PRODUCER", "SPAN_KIND_CONSUMER"};

static int status(Reader *r, Out *o) {
    if (!consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0;
    int64_t code;
    while ((rc = lsh_next_key(r, &first, STATUS_FIELDS, K_STATUS, &seen, &id)) == 1) {
        if (id == 2)
            rc = lsh_string_field(r, o, 2);
        else if (id == 3) {
            rc = lsh_read_enum(r, STATUS_NAMES, 3, &code);
            if (!rc)
                rc = lsh_put_varint_field(o, 3, (uint64_t)code);
        } else
            rc = lsh_skip_value(r, 0);
        if (rc)
            return rc;
    }
    return rc;
}

/* A repeated message field: a JSON array of objects, each encoded by one. */
static int messages(Reader *r, Out *o, int field, int (*one)(Reader *, Out *)) {
    if (!consume(r, '['))
        return FALLBACK;
    if (consume(r, ']'))
        return 0;
    do {
        size_t mark;
        int rc;
        if ((rc = lsh_begin_message(o, field, &mark)) || (rc = one(r, o)) || (rc = lsh_end_message(o, mark)))
            return rc;
    } while (consume(r, ','));
    return consume(r, ']') ? 0 : FALLBACK;
}

static const Field SPAN_FIELDS[] = {
    {"traceId", 1}, {"spanId", 2}, {"traceState", 3}, {"trace_state", 3}, {"parentSpanId", 4}, {"name", 5},
    {"kind", 6}, {"startTimeUnixNano", 7}, {"start_time_unix_nano", 7}, {"endTimeUnixNano", 8},
    {"end_time_unix_nano", 8}, {"attributes", 9}, {"droppedAttributesCount", 10},
    {"dropped_attributes_count", 10}, {"events", 11}, {"droppedEventsCount", 12}, {"dropped_events_count", 12},
    {"links", 13}, {"droppedLinksCount", 14}, {"dropped_links_count", 14}, {"status", 15}, {"flags", 16},
    {NULL, 0}};

static int span(Reader *r, Out *o) {
    if (!consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0, v;
    int64_t kind;
    while ((rc = lsh_next_key(r, &first, SPAN_FIELDS, K_SPAN, &seen, &id)) == 1) {
        switch (id) {
        case 1:
        case 2:
        case 4:
            rc = lsh_hex_id_field(r, o, id);
            break;
        case 3:
            rc = lsh_string_field(r, NULL, 3);
            break;
        case 5:
            rc = lsh_string_field(r, o, 5);
            break;
        case 6:
            rc = lsh_read_enum(r, KIND_NAMES, 6, &kind);
            if (!rc)
                rc = lsh_put_varint_field(o, 6, (uint64_t)kind);
            break;
        case 7:
        case 8:
            rc = lsh_read_uint(r, UINT64_MAX, &v);
            if (!rc)
                rc = lsh_put_fixed64_field(o, id, v);
            break;
        case 9:
            rc = lsh_key_values(r, o, 9, 0);
            break;
        case 10:
        case 12:
        case 14:
        case 16:
            rc = lsh_read_uint(r, UINT32_MAX, &v);
            break;
        case 11:
            rc = messages(r, o, 11, event);
            break;
        case 13:
            rc = messages(r, o, 13, span_link);
            break;
        case 15: {
            size_t mark;
            if ((rc = lsh_begin_message(o, 15, &mark)) || (rc = status(r, o)))
                return rc;
            rc = lsh_end_message(o, mark);
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

/* The outer levels, read by the reference with dict.get: other keys are ignored whatever their value; null
 * is an absent part. */

static const Field SCOPE_SPANS_FIELDS[] = {{"scope", 1}, {"spans", 2}, {NULL, 0}};

static int scope_spans(Reader *r, Out *o) {
    if (!consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0;
    while ((rc = lsh_next_key(r, &first, SCOPE_SPANS_FIELDS, -1, &seen, &id)) == 1) {
        if (id && lsh_read_literal(r, "null"))
            continue;
        if (id == 1) {
            size_t mark;
            if ((rc = lsh_begin_message(o, 1, &mark)) || (rc = scope(r, o)))
                return rc;
            rc = lsh_end_message(o, mark);
        } else if (id == 2)
            rc = messages(r, o, 2, span);
        else
            rc = lsh_skip_value(r, 0);
        if (rc)
            return rc;
    }
    return rc;
}

static const Field RESOURCE_SPANS_FIELDS[] = {{"resource", 1}, {"scopeSpans", 2}, {NULL, 0}};

static int resource_spans(Reader *r, Out *o) {
    if (!consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0;
    while ((rc = lsh_next_key(r, &first, RESOURCE_SPANS_FIELDS, -1, &seen, &id)) == 1) {
        if (id && lsh_read_literal(r, "null"))
            continue;
        if (id == 1) {
            size_t mark;
            if ((rc = lsh_begin_message(o, 1, &mark)) || (rc = resource(r, o)))
                return rc;
            rc = lsh_end_message(o, mark);
        } else if (id == 2)
            rc = messages(r, o, 2, scope_spans);
        else
            rc = lsh_skip_value(r, 0);
        if (rc)
            return rc;
    }
    return rc;
}

/* "resourceLogs" and "resourceMetrics" are refused by the reference with their own message. */
static const Field REQUEST_FIELDS[] = {{"resourceSpans", 1}, {"resourceLogs", 2}, {"resourceMetrics", 3}, {NULL, 0}};

int lsh_request(Reader *r, Out *o) {
    if (!consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0;
    while ((rc = lsh_next_key(r, &first, REQUEST_FIELDS, -1, &seen, &id)) == 1) {
        if (id == 2 || id == 3)
            return FALLBACK;
        if (id == 1 && lsh_read_literal(r, "null"))
            continue;
        rc = id == 1 ? messages(r, o, 1, resource_spans) : lsh_skip_value(r, 0);
        if (rc)
            return rc;
    }
    if (rc)
        return rc;
    skip_ws(r);
    return r->p == r->end ? 0 : FALLBACK;
}
