/*
 * Algorithm 1 of Lebeda and Tetek (PODS 2023) in arrival order, over int64 key codes.
 *
 * The Misra-Gries variant of the paper is inherently sequential: whether an arriving key
 * decrements every counter or replaces the smallest zero-count key depends on every key before
 * it, so numpy cannot vectorise it. This file runs exactly the loop of
 * ``MisraGries._update_unit`` (sketch.py) in C; the Python wrapper maps keys to int64 codes
 * whose numeric order is the sketch's fixed key order (the ints themselves, or the ranks of
 * strings and bytes in their sorted distinct values), and maps the codes back.
 *
 * State in and out is plain arrays: the held keys (zero counters included), their counters,
 * and the number of unused dummy slots. The dummies come first in the fixed order, so a free
 * dummy is always used before a zero-count key.
 *
 * Counters are stored with a lazy offset (stored = counter + base): a decrement of every
 * counter is ``base += 1`` followed by a scan for the keys that reached zero.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Key -> sketch slot. When every key of the call lies in a short range (ranks of strings,
 * compact ints) the table is an array indexed by ``key - lo``; otherwise it is open addressing
 * with linear probing. */
typedef struct {
    int64_t *keys;   /* key of each entry (hashed mode only) */
    int32_t *slot;   /* sketch slot of each entry, -1 when empty */
    uint64_t mask;   /* hashed mode: capacity - 1 (capacity is a power of two) */
    int64_t lo;      /* direct mode: the smallest key */
    int direct;
} Table;

/* Direct mode when the key range is at most DIRECT_SPAN, a few times the entries, or at
 * most DIRECT_SPAN_MAX and the call's length. */
#define DIRECT_SPAN (1 << 16)
#define DIRECT_SPAN_MAX (1 << 22)

static inline uint64_t mix(int64_t key) {
    /* A multiplicative mix (Fibonacci hashing constant) with a fold of the high bits: the
     * table only needs keys spread over its buckets, nothing here is a privacy mechanism. */
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 29);
}

static int table_init(Table *t, Py_ssize_t entries, Py_ssize_t n, int64_t lo, int64_t hi) {
    uint64_t span = (uint64_t)hi - (uint64_t)lo + 1; /* wraps to 0 for the full int64 range */
    /* A long call may pay for clearing a larger array (at most one int32 per key). */
    if (span && (span <= DIRECT_SPAN || span <= (uint64_t)entries * 4 ||
                 (span <= DIRECT_SPAN_MAX && span <= (uint64_t)n))) {
        t->direct = 1;
        t->lo = lo;
        t->keys = NULL;
        t->slot = (int32_t *)malloc(span * sizeof(int32_t));
        if (!t->slot) return -1;
        memset(t->slot, 0xff, span * sizeof(int32_t));
        return 0;
    }
    t->direct = 0;
    uint64_t cap = 16;
    while (cap < (uint64_t)entries * 2) cap <<= 1;
    t->keys = (int64_t *)malloc(cap * sizeof(int64_t));
    t->slot = (int32_t *)malloc(cap * sizeof(int32_t));
    if (!t->keys || !t->slot) {
        free(t->keys);
        free(t->slot);
        return -1;
    }
    memset(t->slot, 0xff, cap * sizeof(int32_t));
    t->mask = cap - 1;
    return 0;
}

static void table_free(Table *t) {
    free(t->keys);
    free(t->slot);
}

/* The slot of ``key``, or -1. */
static inline int32_t table_find(const Table *t, int64_t key) {
    if (t->direct) return t->slot[(uint64_t)key - (uint64_t)t->lo];
    uint64_t i = mix(key) & t->mask;
    for (;;) {
        int32_t s = t->slot[i];
        if (s < 0) return -1;
        if (t->keys[i] == key) return s;
        i = (i + 1) & t->mask;
    }
}

static inline void table_put(Table *t, int64_t key, int32_t s) {
    if (t->direct) {
        t->slot[(uint64_t)key - (uint64_t)t->lo] = s;
        return;
    }
    uint64_t i = mix(key) & t->mask;
    while (t->slot[i] >= 0) i = (i + 1) & t->mask;
    t->keys[i] = key;
    t->slot[i] = s;
}

/* Remove ``key`` (present) with backward-shift deletion, so lookups never meet tombstones. */
static void table_remove(Table *t, int64_t key) {
    if (t->direct) {
        t->slot[(uint64_t)key - (uint64_t)t->lo] = -1;
        return;
    }
    uint64_t i = mix(key) & t->mask;
    while (t->keys[i] != key || t->slot[i] < 0) i = (i + 1) & t->mask;
    uint64_t j = i;
    for (;;) {
        j = (j + 1) & t->mask;
        if (t->slot[j] < 0) break;
        uint64_t home = mix(t->keys[j]) & t->mask;
        /* Move entry j back to the hole i unless its home lies cyclically in (i, j]. */
        int in_range = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
        if (!in_range) {
            t->keys[i] = t->keys[j];
            t->slot[i] = t->slot[j];
            i = j;
        }
    }
    t->slot[i] = -1;
}

/* Sort ``a[0..n)`` ascending: least-significant-digit radix sort on the sign-flipped bits,
 * one byte per pass, skipping the passes in which every key has the same byte (key codes
 * are often small ranks, so most passes are skipped). ``tmp`` has room for ``n`` keys. */
static void sort_int64(int64_t *a, int64_t *tmp, Py_ssize_t n) {
    if (n < 2) return;
    if (n <= 32) {
        for (Py_ssize_t i = 1; i < n; i++) {
            int64_t v = a[i];
            Py_ssize_t j = i;
            while (j > 0 && a[j - 1] > v) {
                a[j] = a[j - 1];
                j--;
            }
            a[j] = v;
        }
        return;
    }
    uint64_t all_or = 0, all_and = ~0ULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t u = (uint64_t)a[i] ^ 0x8000000000000000ULL;
        all_or |= u;
        all_and &= u;
    }
    uint64_t varying = all_or ^ all_and;
    int64_t *src = a, *dst = tmp;
    for (int shift = 0; shift < 64; shift += 8) {
        if (!((varying >> shift) & 0xff)) continue;
        Py_ssize_t count[257] = {0};
        for (Py_ssize_t i = 0; i < n; i++)
            count[(((uint64_t)src[i] ^ 0x8000000000000000ULL) >> shift & 0xff) + 1]++;
        for (int b = 0; b < 256; b++) count[b + 1] += count[b];
        for (Py_ssize_t i = 0; i < n; i++)
            dst[count[((uint64_t)src[i] ^ 0x8000000000000000ULL) >> shift & 0xff]++] = src[i];
        int64_t *swap = src;
        src = dst;
        dst = swap;
    }
    if (src != a) memcpy(a, src, (size_t)n * sizeof(int64_t));
}

static int get_int64s(PyObject *obj, Py_buffer *view, int writable, const char *name) {
    if (PyObject_GetBuffer(obj, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0) return -1;
    if (view->len % (Py_ssize_t)sizeof(int64_t)) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s must be a contiguous int64 buffer", name);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(update_unit_doc,
"update_unit(codes, keys, counts, out_keys, out_counts, k, free) -> (held, free, decrements)\n\n"
"Algorithm 1 of Lebeda and Tetek on ``codes`` (int64, arrival order, weight 1 each).\n"
"``keys``/``counts`` (int64) are the held keys and counters, ``free`` the unused dummy slots;\n"
"the new state is written to the first ``held`` entries of ``out_keys``/``out_counts``\n"
"(int64, writable, at least ``min(k, len(keys) + len(codes))`` entries each).");

static PyObject *update_unit(PyObject *self, PyObject *args) {
    PyObject *o_codes, *o_keys, *o_counts, *o_out_keys, *o_out_counts;
    Py_ssize_t k, free_slots;
    if (!PyArg_ParseTuple(args, "OOOOOnn", &o_codes, &o_keys, &o_counts, &o_out_keys,
                          &o_out_counts, &k, &free_slots))
        return NULL;
    Py_buffer b_codes, b_keys, b_counts, b_ok, b_oc;
    if (get_int64s(o_codes, &b_codes, 0, "codes") < 0) return NULL;
    if (get_int64s(o_keys, &b_keys, 0, "keys") < 0) goto fail_codes;
    if (get_int64s(o_counts, &b_counts, 0, "counts") < 0) goto fail_keys;
    if (get_int64s(o_out_keys, &b_ok, 1, "out_keys") < 0) goto fail_counts;
    if (get_int64s(o_out_counts, &b_oc, 1, "out_counts") < 0) goto fail_ok;

    const int64_t *codes = (const int64_t *)b_codes.buf;
    const int64_t *in_keys = (const int64_t *)b_keys.buf;
    const int64_t *in_counts = (const int64_t *)b_counts.buf;
    int64_t *skey = (int64_t *)b_ok.buf;
    int64_t *sval = (int64_t *)b_oc.buf;
    Py_ssize_t n = b_codes.len / 8, m = b_keys.len / 8;
    Py_ssize_t cap_out = b_ok.len / 8;
    Py_ssize_t most = m + (free_slots < n ? free_slots : n);
    if (b_counts.len / 8 != m || b_oc.len / 8 != cap_out || cap_out < most || k < 1 ||
        free_slots < 0 || m + free_slots != k || k > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "inconsistent Misra-Gries kernel arguments");
        goto fail_all;
    }

    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (codes[i] < lo) lo = codes[i];
        if (codes[i] > hi) hi = codes[i];
    }
    for (Py_ssize_t s = 0; s < m; s++) {
        if (in_keys[s] < lo) lo = in_keys[s];
        if (in_keys[s] > hi) hi = in_keys[s];
    }
    if (lo > hi) lo = hi = 0; /* no keys at all */
    Table t;
    int64_t *zeros = NULL;
    if (table_init(&t, most, n, lo, hi) < 0) {
        PyErr_NoMemory();
        goto fail_all;
    }
    /* The zero list holds at most every held key; the second half is the sort's buffer. */
    zeros = (int64_t *)malloc((size_t)(most > 0 ? most : 1) * 2 * sizeof(int64_t));
    if (!zeros) {
        table_free(&t);
        PyErr_NoMemory();
        goto fail_all;
    }
    Py_ssize_t nz = 0;
    for (Py_ssize_t s = 0; s < m; s++) {
        skey[s] = in_keys[s];
        sval[s] = in_counts[s];
        if (table_find(&t, in_keys[s]) >= 0) {
            table_free(&t);
            free(zeros);
            PyErr_SetString(PyExc_ValueError, "duplicate held keys");
            goto fail_all;
        }
        table_put(&t, in_keys[s], (int32_t)s);
        if (in_counts[s] == 0) zeros[nz++] = in_keys[s];
    }
    sort_int64(zeros, zeros + most, nz);

    Py_BEGIN_ALLOW_THREADS
    int64_t base = 0, d = 0;
    Py_ssize_t held = m, zp = 0, nzero = nz, free_left = free_slots;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t x = codes[i];
        int32_t s = table_find(&t, x);
        if (s >= 0) {
            if (sval[s] == base) nzero--;
            sval[s]++;
        } else if (free_left) {
            free_left--;
            skey[held] = x;
            sval[held] = base + 1;
            table_put(&t, x, (int32_t)held);
            held++;
        } else if (nzero) {
            /* The smallest key still at zero leaves (a listed key may have grown since). */
            int32_t z;
            for (;;) {
                z = table_find(&t, zeros[zp++]);
                if (z >= 0 && sval[z] == base) break;
            }
            table_remove(&t, skey[z]);
            skey[z] = x;
            sval[z] = base + 1;
            table_put(&t, x, z);
            nzero--;
        } else {
            /* Every counter is positive: all fall by one, and the new zeros are listed. */
            d++;
            base++;
            nz = 0;
            for (Py_ssize_t j = 0; j < held; j++)
                if (sval[j] == base) zeros[nz++] = skey[j];
            sort_int64(zeros, zeros + most, nz);
            zp = 0;
            nzero = nz;
        }
    }
    for (Py_ssize_t j = 0; j < held; j++) sval[j] -= base;
    m = held;
    free_slots = free_left;
    k = d; /* reuse: the decrements of this call */
    Py_END_ALLOW_THREADS

    table_free(&t);
    free(zeros);
    PyBuffer_Release(&b_oc);
    PyBuffer_Release(&b_ok);
    PyBuffer_Release(&b_counts);
    PyBuffer_Release(&b_keys);
    PyBuffer_Release(&b_codes);
    return Py_BuildValue("nnn", m, free_slots, k);

fail_all:
    PyBuffer_Release(&b_oc);
fail_ok:
    PyBuffer_Release(&b_ok);
fail_counts:
    PyBuffer_Release(&b_counts);
fail_keys:
    PyBuffer_Release(&b_keys);
fail_codes:
    PyBuffer_Release(&b_codes);
    return NULL;
}

PyDoc_STRVAR(encode_strs_doc,
"encode_strs(keys, out) -> dict or None\n\n"
"Number the distinct values of ``keys`` (a list) by first occurrence: write each key's number\n"
"to ``out`` (int64, writable, ``len(keys)`` entries) and return the dict value -> number.\n"
"Returns None as soon as an element is not exactly a ``str`` (the caller then takes another\n"
"path); the numbers are identities only, never an order.");

static PyObject *encode_strs(PyObject *self, PyObject *args) {
    PyObject *keys, *o_out;
    if (!PyArg_ParseTuple(args, "O!O", &PyList_Type, &keys, &o_out)) return NULL;
    Py_buffer b_out;
    if (get_int64s(o_out, &b_out, 1, "out") < 0) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (b_out.len / 8 < n) {
        PyBuffer_Release(&b_out);
        PyErr_SetString(PyExc_ValueError, "out is shorter than keys");
        return NULL;
    }
    int64_t *out = (int64_t *)b_out.buf;
    PyObject *ids = PyDict_New();
    if (!ids) goto fail;
    PyObject *last_key = NULL;
    int64_t last_id = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyList_GET_ITEM(keys, i);
        if (x == last_key) { /* runs of one object skip the dict */
            out[i] = last_id;
            continue;
        }
        if (!PyUnicode_CheckExact(x)) {
            Py_DECREF(ids);
            PyBuffer_Release(&b_out);
            Py_RETURN_NONE;
        }
        PyObject *id = PyDict_GetItemWithError(ids, x); /* borrowed */
        if (!id) {
            if (PyErr_Occurred()) goto fail_ids;
            PyObject *next = PyLong_FromSsize_t(PyDict_GET_SIZE(ids));
            if (!next) goto fail_ids;
            int bad = PyDict_SetItem(ids, x, next);
            Py_DECREF(next);
            if (bad) goto fail_ids;
            id = next; /* the dict holds it */
        }
        last_key = x;
        last_id = (int64_t)PyLong_AsSsize_t(id);
        out[i] = last_id;
    }
    PyBuffer_Release(&b_out);
    return ids;
fail_ids:
    Py_DECREF(ids);
fail:
    PyBuffer_Release(&b_out);
    return NULL;
}

static PyMethodDef methods[] = {
    {"update_unit", update_unit, METH_VARARGS, update_unit_doc},
    {"encode_strs", encode_strs, METH_VARARGS, encode_strs_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kernel",
    "Algorithm 1 of Lebeda and Tetek in arrival order over int64 key codes (C).", -1, methods,
};

PyMODINIT_FUNC PyInit_kernel(void) { return PyModule_Create(&module); }
