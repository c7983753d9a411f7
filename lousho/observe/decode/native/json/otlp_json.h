/* OTLP/JSON trace requests transcoded to OTLP/protobuf wire bytes, for the native protobuf decoder.
 *
 * The reference is otlp_decode.decode_json: json.loads, then google.protobuf.json_format.ParseDict per
 * resource, scope and span (ids in hex). This module handles the subset of bodies whose meaning it can
 * state exactly and returns None for every other body, which the caller then gives to the reference:
 * anything the reference refuses or rejects a span of for a JSON reason (bad JSON, bad UTF-8, lone
 * surrogates, a null, a wrong type, a duplicate key, a value out of its field's range, a number the
 * reference reads through a Python conversion this module does not copy). A span whose ids are valid hex
 * of the wrong length, or whose times pass 2^63, is encoded as it is: the protobuf decoder rejects it
 * with the reference's own message, as ParseDict would have let it through to the same check.
 *
 * transcode(body) -> bytes | None; stats() -> (bodies transcoded, bodies handed back).
 *
 * The sources, by job: reader.c (JSON tokens: strings, numbers, literals, values passed over), writer.c (the
 * protobuf wire bytes written), scalars.c (object keys, and scalars converted as json_format converts them),
 * values.c (AnyValue and KeyValue lists), trace.c (the trace messages: request, resource, scope, span, event,
 * link, status) and module.c (transcode(), configure(), stats()). This header holds what they share: the
 * types, the helpers every read calls (static inline, so they inline as they did in one file: whitespace,
 * and the one loop that reads a message) and the functions called across files, prefixed lsh_.
 */
#ifndef LOUSHO_OTLP_JSON_H
#define LOUSHO_OTLP_JSON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

/* Only PyInit__otlp_json is exported: the functions shared between the sources stay inside the module. */
#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

#define FALLBACK (-1)
#define NOMEM (-2)
/* ParseDict refuses messages nested 100 deep; values nested this deep are handed back instead. */
#define MAX_VALUE_DEPTH 24

typedef struct {
    unsigned char *buf;
    size_t len, cap;
} Out;

typedef struct {
    const unsigned char *p, *end;
    int level;   /* arrays and objects open at p: consume() counts them */
    Out scratch; /* a string with escapes or non-ASCII, decoded */
} Reader;

/* The names json_format knows per message (json and proto names); a known name this module does not
 * handle sends the body back. */
enum {
    K_RESOURCE, K_SCOPE, K_SPAN, K_EVENT, K_LINK, K_STATUS, K_KEYVALUE, K_ANYVALUE, K_ARRAY, K_KVLIST, K_ENTITYREF,
    K_COUNT
};

typedef struct {
    const char *text;
    size_t len;
    int is_int; /* no fraction, no exponent: json.loads makes it a Python int */
    int negative;
    int overflow; /* magnitude past 2^64 - 1 */
    uint64_t magnitude;
} Number;

typedef struct {
    const char *name;
    int id;
} Field;

/* A message as this module reads it: one loop over its JSON object's keys (read_message, below) and, per known
 * key, its member function, which reads the value and writes what the protobuf decoder is to see. */
typedef struct Message Message;
typedef int (*Member)(Reader *r, Out *o, const Message *m, int id, int depth);
struct Message {
    const Field *fields;
    int kind;  /* K_*, or -1 for the request's outer levels, read with dict.get: any other key ignored */
    int oneof; /* every field is a member of one oneof: a second one makes ParseDict refuse the span */
    Member member;
    const Message *parts[2]; /* the sub-messages the member reads, where one member serves several messages */
};

/* --- functions called across the sources --- */

/* writer.c */
int lsh_reserve(Out *o, size_t extra);
int lsh_put_varint_field(Out *o, int field, uint64_t v);
int lsh_put_fixed64_field(Out *o, int field, uint64_t v);
int lsh_put_bytes_field(Out *o, int field, const void *data, size_t n);
int lsh_begin_message(Out *o, int field, size_t *mark);
int lsh_end_message(Out *o, size_t mark);
/* reader.c */
int lsh_read_string(Reader *r, const char **s, size_t *n);
int lsh_read_number(Reader *r, Number *num);
int lsh_read_literal(Reader *r, const char *word);
int lsh_skip_value(Reader *r);
/* scalars.c */
int lsh_next_key(Reader *r, int *first, const Field *fields, int kind, uint64_t *seen, int *id);
int lsh_read_uint(Reader *r, uint64_t max, uint64_t *v);
int lsh_read_int(Reader *r, int64_t bits, int64_t *v);
int lsh_read_enum(Reader *r, const char *const *names, int count, int64_t *v);
int lsh_read_double(Reader *r, double *v);
int lsh_read_bool(Reader *r, int *v);
int lsh_string_field(Reader *r, Out *o, int field);
int lsh_hex_id_field(Reader *r, Out *o, int field);
int lsh_bytes_field(Reader *r, Out *o, int field);
void lsh_init_digits(void);
/* values.c */
extern const Message lsh_key_value;
/* trace.c */
int lsh_request(Reader *r, Out *o);
/* module.c */
extern PyObject *lsh_known_names[K_COUNT];
/* The reference refuses a body nested deeper (otlp_decode.MAX_JSON_DEPTH, given to configure()): a bracket
 * past it sends the body back, so both refuse it, and the reader's recursion stays bounded. */
extern int lsh_max_level;

/* --- whitespace and single characters, read before every token --- */

static inline void skip_ws(Reader *r) {
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\n' || *r->p == '\r' || *r->p == '\t'))
        r->p++;
}

/* Every bracket of the body is read here, so r->level is its nesting (c is a constant at each call: the
 * counting folds away for the other characters). An array or object past lsh_max_level is "not found": every
 * caller then sends the body back. */
static inline int consume(Reader *r, unsigned char c) {
    skip_ws(r);
    if (r->p < r->end && *r->p == c) {
        if ((c == '{' || c == '[') && ++r->level > lsh_max_level)
            return 0;
        if (c == '}' || c == ']')
            r->level--;
        r->p++;
        return 1;
    }
    return 0;
}

static inline int peek(Reader *r) {
    skip_ws(r);
    return r->p < r->end ? *r->p : -1;
}

/* --- a message's object, and the two ways a field holds one: embedded, and repeated (a JSON array). Every
 * message of values.c and trace.c is read by this loop with its own field table and member function; static
 * inline, as the loops it replaces were, which keeps the transcoder's instruction count where it was. --- */

/* Values nested past MAX_VALUE_DEPTH are handed back; only AnyValue and what it holds ever pass depth > 0. */
static inline int read_message(Reader *r, Out *o, const Message *m, int depth) {
    if (depth > MAX_VALUE_DEPTH || !consume(r, '{'))
        return FALLBACK;
    int first = 1, id, rc;
    uint64_t seen = 0;
    while ((rc = lsh_next_key(r, &first, m->fields, m->kind, &seen, &id)) == 1) {
        if (!id)
            rc = lsh_skip_value(r);
        else if (m->oneof && (seen & ~(1ull << id)))
            return FALLBACK;
        else
            rc = m->member(r, o, m, id, depth);
        if (rc)
            return rc;
    }
    return rc;
}

static inline int embedded(Reader *r, Out *o, int field, const Message *m, int depth) {
    size_t mark;
    int rc;
    if ((rc = lsh_begin_message(o, field, &mark)) || (rc = read_message(r, o, m, depth)))
        return rc;
    return lsh_end_message(o, mark);
}

static inline int repeated(Reader *r, Out *o, int field, const Message *m, int depth) {
    if (!consume(r, '['))
        return FALLBACK;
    if (consume(r, ']'))
        return 0;
    do {
        int rc = embedded(r, o, field, m, depth);
        if (rc)
            return rc;
    } while (consume(r, ','));
    return consume(r, ']') ? 0 : FALLBACK;
}

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
