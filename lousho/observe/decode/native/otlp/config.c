/* configure(): the keys, alias tables, event names and column types otlp_native.py passes, kept in lsh_cfg. */
#include "otlp_native.h"

Config lsh_cfg;

/* The table of the keys configure() was given. Unlike the attribute tables it holds nothing a sender chose: a
 * lookup walks at most one run of its own slots, so a key made to land in the longest costs at most nkeys
 * comparisons, and the hash can be the cheap FNV-1a every span's keys are looked up with. */
static uint64_t config_hash(Slice k) {
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < k.n; i++) h = (h ^ k.p[i]) * 1099511628211ULL;
    return h;
}

int lsh_key_id(Slice key) {
    if (lsh_cfg.nkeys == 0) return -1;
    size_t slot = (size_t)config_hash(key) & (lsh_cfg.size - 1);
    while (lsh_cfg.table[slot] != SIZE_MAX) {
        if (key_eq(lsh_cfg.keys[lsh_cfg.table[slot]], key)) return (int)lsh_cfg.table[slot];
        slot = (slot + 1) & (lsh_cfg.size - 1);
    }
    return -1;
}

static int id_of(PyObject *key) {
    Py_ssize_t len;
    const char *s = PyUnicode_AsUTF8AndSize(key, &len);
    if (s == NULL) return -2;
    Slice k = {(const uint8_t *)s, (size_t)len};
    int id = lsh_key_id(k);
    if (id < 0) PyErr_Format(PyExc_ValueError, "key %R is not among the keys", key);
    return id;
}

/* A tuple of column types, each a T_* storage. */
static int storage_of(PyObject *types, int *storage) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(types); i++) {
        long type = PyLong_AsLong(PyTuple_GET_ITEM(types, i));
        if (type < 0 || type > T_I32) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a column's type is 0 to 4");
            return -1;
        }
        storage[i] = (int)type;
    }
    return 0;
}

/* Marks each key of a tuple with flag (K_*). */
static int flag_keys(PyObject *names, uint8_t flag) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
        int id = id_of(PyTuple_GET_ITEM(names, i));
        if (id < 0) return -1;
        lsh_cfg.flags[id] |= flag;
    }
    return 0;
}

/* configure(bad_payload, tail, price, kinds, statuses, name_operations, agent_operation, reported, price_table,
 *           keys, fallback_keys, message_keys, operation_key, probe_key, promote_spec, special,
 *           (evaluation, exception, details event names), pass_labels, fail_labels, column_types, score_types) */
PyObject *lsh_configure(PyObject *self, PyObject *args) {
    PyObject *bad, *tail, *price, *kinds, *statuses, *prefixes, *agent_op, *reported, *price_table, *keys, *fallback,
        *messages, *op_key, *probe_key, *spec, *special, *events, *pass_labels, *fail_labels,
        *column_types, *score_types;
    if (!PyArg_ParseTuple(args, "OOOO!O!O!UUUO!O!O!UUO!O!O!O!O!O!O!", &bad, &tail, &price, &PyTuple_Type, &kinds,
                          &PyTuple_Type, &statuses, &PyTuple_Type, &prefixes, &agent_op, &reported, &price_table,
                          &PyTuple_Type, &keys, &PyTuple_Type, &fallback, &PyTuple_Type, &messages, &op_key,
                          &probe_key, &PyTuple_Type, &spec, &PyTuple_Type, &special, &PyTuple_Type, &events,
                          &PyFrozenSet_Type, &pass_labels, &PyFrozenSet_Type, &fail_labels, &PyTuple_Type,
                          &column_types, &PyTuple_Type, &score_types))
        return NULL;
    if (PyTuple_GET_SIZE(column_types) > MAX_COLS || PyTuple_GET_SIZE(score_types) != N_SCORE) {
        PyErr_SetString(PyExc_ValueError, "wrong number of column types");
        return NULL;
    }
    if (storage_of(score_types, lsh_cfg.score_storage) < 0 || storage_of(column_types, lsh_cfg.storage) < 0)
        return NULL;
    lsh_cfg.ncols = (int)PyTuple_GET_SIZE(column_types);
    if (PyTuple_GET_SIZE(events) != 3) {
        PyErr_SetString(PyExc_ValueError, "three event names");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(keys);
    if (PyTuple_GET_SIZE(spec) > MAX_PROMOTED || PyTuple_GET_SIZE(special) != N_SPECIAL) {
        PyErr_SetString(PyExc_ValueError, "promote_spec or special has the wrong size");
        return NULL;
    }
    size_t size = 64;
    while (size < (size_t)n * 2) size *= 2;
    PyMem_Free(lsh_cfg.keys);
    PyMem_Free(lsh_cfg.table);
    PyMem_Free(lsh_cfg.flags);
    lsh_cfg.ready = 0;
    lsh_cfg.nkeys = 0;
    lsh_cfg.keys = PyMem_Malloc(((size_t)n + 1) * sizeof(Slice));
    lsh_cfg.table = PyMem_Malloc(size * sizeof(size_t));
    lsh_cfg.flags = PyMem_Calloc((size_t)n + 1, 1);
    if (lsh_cfg.keys == NULL || lsh_cfg.table == NULL || lsh_cfg.flags == NULL) return PyErr_NoMemory();
    lsh_cfg.size = size;
    for (size_t i = 0; i < size; i++) lsh_cfg.table[i] = SIZE_MAX;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len;
        const char *s = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(keys, i), &len);
        if (s == NULL) return NULL;
        lsh_cfg.keys[i].p = (const uint8_t *)s;
        lsh_cfg.keys[i].n = (size_t)len;
        size_t slot = (size_t)config_hash(lsh_cfg.keys[i]) & (size - 1);
        while (lsh_cfg.table[slot] != SIZE_MAX) slot = (slot + 1) & (size - 1);
        lsh_cfg.table[slot] = (size_t)i;
    }
    lsh_cfg.nkeys = (size_t)n;
    if (flag_keys(fallback, K_FALLBACK) < 0 || flag_keys(messages, K_MESSAGES) < 0) return NULL;
    if ((lsh_cfg.op_key = id_of(op_key)) < 0 || (lsh_cfg.probe_key = id_of(probe_key)) < 0) return NULL;
    Slice *names[3] = {&lsh_cfg.evaluation, &lsh_cfg.exception, &lsh_cfg.details};
    for (int i = 0; i < 3; i++) {
        Py_ssize_t len;
        const char *name = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(events, i), &len);
        if (name == NULL) return NULL;
        names[i]->p = (const uint8_t *)name;
        names[i]->n = (size_t)len;
    }
    lsh_cfg.npromote = (int)PyTuple_GET_SIZE(spec);
    for (int c = 0; c < lsh_cfg.npromote; c++) {
        PyObject *entry = PyTuple_GET_ITEM(spec, c);
        PyObject *aliases;
        if (!PyArg_ParseTuple(entry, "iO!", &lsh_cfg.promote[c].kind, &PyTuple_Type, &aliases)) return NULL;
        if (PyTuple_GET_SIZE(aliases) > MAX_ALIASES) {
            PyErr_SetString(PyExc_ValueError, "too many aliases");
            return NULL;
        }
        lsh_cfg.promote[c].n = (int)PyTuple_GET_SIZE(aliases);
        for (int a = 0; a < lsh_cfg.promote[c].n; a++)
            if ((lsh_cfg.promote[c].ids[a] = id_of(PyTuple_GET_ITEM(aliases, a))) < 0) return NULL;
    }
    for (int i = 0; i < N_SPECIAL; i++) {
        lsh_cfg.special[i] = (int)PyLong_AsLong(PyTuple_GET_ITEM(special, i));
        if (lsh_cfg.special[i] < 0 || lsh_cfg.special[i] >= lsh_cfg.npromote) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "special index out of range");
            return NULL;
        }
    }
    /* The objects the decoder reads, held until the next configure(). */
    PyObject **kept[] = {&lsh_cfg.owner, &lsh_cfg.bad_payload, &lsh_cfg.tail, &lsh_cfg.price, &lsh_cfg.kinds,
                         &lsh_cfg.statuses, &lsh_cfg.prefixes, &lsh_cfg.agent_op, &lsh_cfg.reported,
                         &lsh_cfg.price_table, &lsh_cfg.event_names, &lsh_cfg.pass_labels, &lsh_cfg.fail_labels};
    PyObject *values[] = {keys, bad, tail, price, kinds, statuses, prefixes, agent_op, reported, price_table, events,
                          pass_labels, fail_labels};
    for (size_t i = 0; i < sizeof(kept) / sizeof(*kept); i++) Py_XSETREF(*kept[i], Py_NewRef(values[i]));
    lsh_cfg.ready = 1;
    Py_RETURN_NONE;
}
