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

/* Key -> sketch slot by open addressing with linear probing: each entry keeps its key's hash,
 * the key (an int64 code, or the address of a str object) and the slot. Both loops use it;
 * only looking a key up depends on what a key is. */
typedef struct {
    uint64_t *hash;
    int64_t *key;
    int32_t *slot; /* -1 when the entry is empty */
    uint64_t mask; /* capacity - 1 (capacity is a power of two, at least twice the entries) */
} Probe;

static int probe_init(Probe *p, Py_ssize_t entries) {
    uint64_t cap = 16;
    while (cap < (uint64_t)entries * 2) cap <<= 1;
    p->hash = (uint64_t *)malloc(cap * sizeof(uint64_t));
    p->key = (int64_t *)malloc(cap * sizeof(int64_t));
    p->slot = (int32_t *)malloc(cap * sizeof(int32_t));
    if (!p->hash || !p->key || !p->slot) return -1; /* probe_free releases what was allocated */
    memset(p->slot, 0xff, cap * sizeof(int32_t));
    p->mask = cap - 1;
    return 0;
}

static void probe_free(Probe *p) {
    free(p->hash);
    free(p->key);
    free(p->slot);
}

static inline void probe_put(Probe *p, uint64_t h, int64_t key, int32_t s) {
    uint64_t i = h & p->mask;
    while (p->slot[i] >= 0) i = (i + 1) & p->mask;
    p->hash[i] = h;
    p->key[i] = key;
    p->slot[i] = s;
}

/* Remove the entry of slot ``s`` (present, hash ``h``) with backward-shift deletion, so
 * lookups never meet tombstones. */
static void probe_remove(Probe *p, uint64_t h, int32_t s) {
    uint64_t i = h & p->mask;
    while (p->slot[i] != s) i = (i + 1) & p->mask;
    uint64_t j = i;
    for (;;) {
        j = (j + 1) & p->mask;
        if (p->slot[j] < 0) break;
        uint64_t home = p->hash[j] & p->mask;
        /* Move entry j back to the hole i unless its home lies cyclically in (i, j]. */
        int in_range = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
        if (!in_range) {
            p->hash[i] = p->hash[j];
            p->key[i] = p->key[j];
            p->slot[i] = p->slot[j];
            i = j;
        }
    }
    p->slot[i] = -1;
}

/* The int64-code table: when every code of the call lies in a short range (ranks of strings,
 * compact ints) an array indexed by ``code - lo``, otherwise a Probe table. */
typedef struct {
    Probe probe;
    int32_t *direct_slot;
    int64_t lo;
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
    memset(t, 0, sizeof *t);
    uint64_t span = (uint64_t)hi - (uint64_t)lo + 1; /* wraps to 0 for the full int64 range */
    /* A long call may pay for clearing a larger array (at most one int32 per key). */
    if (span && (span <= DIRECT_SPAN || span <= (uint64_t)entries * 4 ||
                 (span <= DIRECT_SPAN_MAX && span <= (uint64_t)n))) {
        t->lo = lo;
        t->direct_slot = (int32_t *)malloc(span * sizeof(int32_t));
        if (!t->direct_slot) return -1;
        memset(t->direct_slot, 0xff, span * sizeof(int32_t));
        return 0;
    }
    return probe_init(&t->probe, entries);
}

static void table_free(Table *t) {
    free(t->direct_slot);
    probe_free(&t->probe);
}

/* The slot of ``key``, or -1. */
static inline int32_t table_find(const Table *t, int64_t key) {
    if (t->direct_slot) return t->direct_slot[(uint64_t)key - (uint64_t)t->lo];
    const Probe *p = &t->probe;
    uint64_t i = mix(key) & p->mask;
    for (;;) {
        int32_t s = p->slot[i];
        if (s < 0) return -1;
        if (p->key[i] == key) return s;
        i = (i + 1) & p->mask;
    }
}

static inline void table_put(Table *t, int64_t key, int32_t s) {
    if (t->direct_slot)
        t->direct_slot[(uint64_t)key - (uint64_t)t->lo] = s;
    else
        probe_put(&t->probe, mix(key), key, s);
}

static void table_remove(Table *t, int64_t key, int32_t s) {
    if (t->direct_slot)
        t->direct_slot[(uint64_t)key - (uint64_t)t->lo] = -1;
    else
        probe_remove(&t->probe, mix(key), s);
}

/* A zero-list entry: ``key`` orders it (unsigned), ``item`` is what the loop needs back. */
typedef struct {
    uint64_t key;
    int64_t item;
} Pair;

#define SIGN_BIT 0x8000000000000000ULL

/* Sort ``a[0..n)`` by ``key`` ascending: least-significant-digit radix sort, one byte per pass,
 * skipping the passes in which every key has the same byte (codes are often small ranks, so
 * most passes are skipped). ``tmp`` has room for ``n`` entries. */
static void sort_pairs(Pair *a, Pair *tmp, Py_ssize_t n) {
    if (n < 2) return;
    if (n <= 32) {
        for (Py_ssize_t i = 1; i < n; i++) {
            Pair v = a[i];
            Py_ssize_t j = i;
            while (j > 0 && a[j - 1].key > v.key) {
                a[j] = a[j - 1];
                j--;
            }
            a[j] = v;
        }
        return;
    }
    uint64_t all_or = 0, all_and = ~0ULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        all_or |= a[i].key;
        all_and &= a[i].key;
    }
    uint64_t varying = all_or ^ all_and;
    Pair *src = a, *dst = tmp;
    for (int shift = 0; shift < 64; shift += 8) {
        if (!((varying >> shift) & 0xff)) continue;
        Py_ssize_t count[257] = {0};
        for (Py_ssize_t i = 0; i < n; i++) count[((src[i].key >> shift) & 0xff) + 1]++;
        for (int b = 0; b < 256; b++) count[b + 1] += count[b];
        for (Py_ssize_t i = 0; i < n; i++) dst[count[(src[i].key >> shift) & 0xff]++] = src[i];
        Pair *swap = src;
        src = dst;
        dst = swap;
    }
    if (src != a) memcpy(a, src, (size_t)n * sizeof(Pair));
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
    Pair *zeros = NULL;
    if (table_init(&t, most, n, lo, hi) < 0) {
        table_free(&t);
        PyErr_NoMemory();
        goto fail_all;
    }
    /* The zero list holds at most every held key; the second half is the sort's buffer. */
    zeros = (Pair *)malloc((size_t)(most > 0 ? most : 1) * 2 * sizeof(Pair));
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
        if (in_counts[s] == 0) zeros[nz++] = (Pair){(uint64_t)in_keys[s] ^ SIGN_BIT, in_keys[s]};
    }
    sort_pairs(zeros, zeros + most, nz);

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
                z = table_find(&t, zeros[zp++].item);
                if (z >= 0 && sval[z] == base) break;
            }
            table_remove(&t, skey[z], z);
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
                if (sval[j] == base) zeros[nz++] = (Pair){(uint64_t)skey[j] ^ SIGN_BIT, skey[j]};
            sort_pairs(zeros, zeros + most, nz);
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

/* ---------------------------------------------------------------- str keys
 *
 * The same loop over a list of ``str`` objects, without numbering the batch's distinct values:
 * the Probe table holds only the keys the sketch holds (at most k), found by the str's own
 * cached hash and compared by value. The table's hash decides where a key sits in the table,
 * never what the sketch holds. Zero lists are sorted in code-point order (UTF-8 byte order):
 * by a radix sort of each key's first eight UTF-8 bytes, then by a full comparison of the keys
 * that share them. */

static inline int str_equal(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    Py_ssize_t n = PyUnicode_GET_LENGTH(a);
    int kind = PyUnicode_KIND(a);
    /* Equal strs have the same kind: CPython stores each in its narrowest kind. */
    if (n != PyUnicode_GET_LENGTH(b) || kind != (int)PyUnicode_KIND(b)) return 0;
    return memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), (size_t)n * (size_t)kind) == 0;
}

static inline int32_t str_find(const Probe *p, PyObject *x, uint64_t h) {
    uint64_t i = h & p->mask;
    for (;;) {
        int32_t s = p->slot[i];
        if (s < 0) return -1;
        if (p->hash[i] == h && str_equal((PyObject *)(intptr_t)p->key[i], x)) return s;
        i = (i + 1) & p->mask;
    }
}

/* The UTF-8 bytes of a str (cached in the object by CPython), or NULL with an exception set
 * (a lone surrogate). */
static inline const char *utf8_of(PyObject *x, Py_ssize_t *len) {
    return PyUnicode_AsUTF8AndSize(x, len);
}

static int compare_utf8(PyObject *a, PyObject *b) {
    Py_ssize_t la, lb;
    const char *ua = utf8_of(a, &la), *ub = utf8_of(b, &lb);
    int c = memcmp(ua, ub, (size_t)(la < lb ? la : lb));
    if (c) return c;
    return (la > lb) - (la < lb);
}

/* The zero-list entries of slots whose stored value is ``base``, sorted by key; -1 on a key
 * with no UTF-8 encoding. ``skey`` is read for the keys; ``zeros`` has room for 2 * ``held``. */
static Py_ssize_t str_zero_list(Pair *zeros, PyObject **skey, const int64_t *sval, Py_ssize_t held,
                                int64_t base, Py_ssize_t room) {
    Py_ssize_t nz = 0;
    for (Py_ssize_t j = 0; j < held; j++) {
        if (sval[j] != base) continue;
        Py_ssize_t len;
        const char *u = utf8_of(skey[j], &len);
        if (!u) return -1;
        uint64_t prefix = 0;
        for (int b = 0; b < 8; b++)
            prefix = (prefix << 8) | (b < len ? (unsigned char)u[b] : 0);
        zeros[nz++] = (Pair){prefix, j};
    }
    sort_pairs(zeros, zeros + room, nz);
    /* Keys sharing their first eight bytes are ordered by the rest (insertion sort: such runs
     * are short unless many keys share a long prefix, where it stays correct, only slower). */
    for (Py_ssize_t a = 0; a < nz;) {
        Py_ssize_t b = a + 1;
        while (b < nz && zeros[b].key == zeros[a].key) b++;
        for (Py_ssize_t i = a + 1; i < b; i++) {
            Pair v = zeros[i];
            Py_ssize_t j = i;
            while (j > a && compare_utf8(skey[zeros[j - 1].item], skey[v.item]) > 0) {
                zeros[j] = zeros[j - 1];
                j--;
            }
            zeros[j] = v;
        }
        a = b;
    }
    return nz;
}

PyDoc_STRVAR(update_strs_doc,
"update_strs(keys, held, counts, out_counts, k, free) -> (held, free, decrements) or None\n\n"
"Algorithm 1 of Lebeda and Tetek on ``keys`` (a list of str, arrival order, weight 1 each).\n"
"``held`` (a list of str) and ``counts`` (int64) are the held keys and counters, ``free`` the\n"
"unused dummy slots. Returns the new held keys as a list, their counters written to the first\n"
"entries of ``out_counts`` (int64, writable, at least ``min(k, len(held) + len(keys))``), or\n"
"None, changing nothing, when a key is not exactly a str or has no UTF-8 encoding.");

static PyObject *update_strs(PyObject *self, PyObject *args) {
    PyObject *keys, *held_keys, *o_counts, *o_out;
    Py_ssize_t k, free_slots;
    if (!PyArg_ParseTuple(args, "O!O!OOnn", &PyList_Type, &keys, &PyList_Type, &held_keys,
                          &o_counts, &o_out, &k, &free_slots))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys), m = PyList_GET_SIZE(held_keys);
    Py_buffer b_counts, b_out;
    if (get_int64s(o_counts, &b_counts, 0, "counts") < 0) return NULL;
    if (get_int64s(o_out, &b_out, 1, "out_counts") < 0) {
        PyBuffer_Release(&b_counts);
        return NULL;
    }
    PyObject *result = NULL;
    uint64_t *hashes = NULL, *shash = NULL;
    PyObject **skey = NULL;
    Pair *zeros = NULL;
    Probe t = {NULL, NULL, NULL, 0};
    Py_ssize_t most = m + (free_slots < n ? free_slots : n);
    int64_t *sval = (int64_t *)b_out.buf;
    const int64_t *in_counts = (const int64_t *)b_counts.buf;
    if (b_counts.len / 8 != m || b_out.len / 8 < most || k < 1 || free_slots < 0 ||
        m + free_slots != k || k > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "inconsistent Misra-Gries kernel arguments");
        goto done;
    }
    /* Every key must be an exact str; its hash is computed (and cached by the str) here. */
    hashes = (uint64_t *)malloc((size_t)(n > 0 ? n : 1) * sizeof(uint64_t));
    skey = (PyObject **)malloc((size_t)(most > 0 ? most : 1) * sizeof(PyObject *));
    shash = (uint64_t *)malloc((size_t)(most > 0 ? most : 1) * sizeof(uint64_t));
    zeros = (Pair *)malloc((size_t)(most > 0 ? most : 1) * 2 * sizeof(Pair));
    if (!hashes || !skey || !shash || !zeros || probe_init(&t, most) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n + m; i++) {
        PyObject *x = i < n ? PyList_GET_ITEM(keys, i) : PyList_GET_ITEM(held_keys, i - n);
        if (!PyUnicode_CheckExact(x)) {
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
        Py_hash_t h = PyObject_Hash(x);
        if (h == -1) goto done;
        if (i < n) hashes[i] = (uint64_t)h;
        else shash[i - n] = (uint64_t)h;
    }
    for (Py_ssize_t s = 0; s < m; s++) {
        PyObject *x = PyList_GET_ITEM(held_keys, s);
        if (str_find(&t, x, shash[s]) >= 0) {
            PyErr_SetString(PyExc_ValueError, "duplicate held keys");
            goto done;
        }
        skey[s] = x;
        sval[s] = in_counts[s];
        probe_put(&t, shash[s], (int64_t)(intptr_t)x, (int32_t)s);
    }
    int64_t base = 0, d = 0;
    Py_ssize_t held = m, zp = 0, free_left = free_slots;
    Py_ssize_t nz = str_zero_list(zeros, skey, sval, held, 0, most);
    if (nz < 0) goto unencodable;
    Py_ssize_t nzero = nz;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PyList_GET_ITEM(keys, i);
        uint64_t h = hashes[i];
        int32_t s = str_find(&t, x, h);
        if (s >= 0) {
            if (sval[s] == base) nzero--;
            sval[s]++;
        } else if (free_left) {
            free_left--;
            skey[held] = x;
            shash[held] = h;
            sval[held] = base + 1;
            probe_put(&t, h, (int64_t)(intptr_t)x, (int32_t)held);
            held++;
        } else if (nzero) {
            /* The smallest key still at zero leaves (a listed key may have grown since). */
            int32_t z;
            do {
                z = (int32_t)zeros[zp++].item;
            } while (sval[z] != base);
            probe_remove(&t, shash[z], z);
            skey[z] = x;
            shash[z] = h;
            sval[z] = base + 1;
            probe_put(&t, h, (int64_t)(intptr_t)x, z);
            nzero--;
        } else {
            d++;
            base++;
            nz = str_zero_list(zeros, skey, sval, held, base, most);
            if (nz < 0) goto unencodable;
            zp = 0;
            nzero = nz;
        }
    }
    PyObject *out_keys = PyList_New(held);
    if (!out_keys) goto done;
    for (Py_ssize_t j = 0; j < held; j++) {
        Py_INCREF(skey[j]);
        PyList_SET_ITEM(out_keys, j, skey[j]);
        sval[j] -= base;
    }
    result = Py_BuildValue("Nnn", out_keys, free_left, (Py_ssize_t)d);
    goto done;
unencodable:
    if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
        PyErr_Clear();
        result = Py_None;
        Py_INCREF(result);
    }
done:
    probe_free(&t);
    free(hashes);
    free(skey);
    free(shash);
    free(zeros);
    PyBuffer_Release(&b_out);
    PyBuffer_Release(&b_counts);
    return result;
}

static PyMethodDef methods[] = {
    {"update_unit", update_unit, METH_VARARGS, update_unit_doc},
    {"update_strs", update_strs, METH_VARARGS, update_strs_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "kernel",
    "Algorithm 1 of Lebeda and Tetek in arrival order over int64 key codes (C).", -1, methods,
};

PyMODINIT_FUNC PyInit_kernel(void) { return PyModule_Create(&module); }
