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

/* ---------------------------------------------------------------- str keys
 *
 * A list of ``str`` objects runs the same loop without numbering the batch's distinct values:
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
static inline const char *utf8_of(int64_t key, Py_ssize_t *len) {
    return PyUnicode_AsUTF8AndSize((PyObject *)(intptr_t)key, len);
}

static int compare_utf8(int64_t a, int64_t b) {
    Py_ssize_t la, lb;
    const char *ua = utf8_of(a, &la), *ub = utf8_of(b, &lb);
    int c = memcmp(ua, ub, (size_t)(la < lb ? la : lb));
    if (c) return c;
    return (la > lb) - (la < lb);
}

/* ---------------------------------------------------------------- the loop
 *
 * One call's state. A key is an int64: the code itself, or the address of a str object (kept
 * alive by the caller's lists). Zero-list entries carry the slot: a listed key cannot leave its
 * slot before the pointer passes it (keys leave only through the list), so a listed slot is
 * still a zero key exactly when its stored value equals the offset. */
typedef struct {
    int is_str;
    Table table;             /* int codes */
    Probe probe;             /* str objects */
    const int64_t *codes;    /* int: the batch */
    PyObject *keys;          /* str: the batch (a list) */
    const uint64_t *hashes;  /* str: the hash of each batch key */
    int64_t *skey;           /* each slot's key */
    uint64_t *shash;         /* str: each slot's key hash */
    int64_t *sval;           /* each slot's stored value (counter + offset) */
    Pair *zeros;             /* the zero list; the second half is the sort's buffer */
    Py_ssize_t room;         /* slots at most */
} Run;

static inline int64_t run_key(const Run *r, Py_ssize_t i) {
    return r->is_str ? (int64_t)(intptr_t)PyList_GET_ITEM(r->keys, i) : r->codes[i];
}

static inline int32_t run_find(const Run *r, Py_ssize_t i, int64_t x) {
    if (r->is_str) return str_find(&r->probe, (PyObject *)(intptr_t)x, r->hashes[i]);
    return table_find(&r->table, x);
}

/* Put ``x`` (with hash ``h`` for strs) in slot ``s``. */
static inline void run_put(Run *r, int64_t x, uint64_t h, int32_t s) {
    r->skey[s] = x;
    if (r->is_str) {
        r->shash[s] = h;
        probe_put(&r->probe, h, x, s);
    } else {
        table_put(&r->table, x, s);
    }
}

static inline void run_remove(Run *r, int32_t s) {
    if (r->is_str)
        probe_remove(&r->probe, r->shash[s], s);
    else
        table_remove(&r->table, r->skey[s], s);
}

/* List the slots whose stored value is ``base`` in the fixed key order; -1 (with the
 * exception set) on a str with no UTF-8 encoding. */
static Py_ssize_t run_zero_list(Run *r, Py_ssize_t held, int64_t base) {
    Pair *zeros = r->zeros;
    Py_ssize_t nz = 0;
    for (Py_ssize_t j = 0; j < held; j++) {
        if (r->sval[j] != base) continue;
        uint64_t order = (uint64_t)r->skey[j] ^ SIGN_BIT;
        if (r->is_str) {
            Py_ssize_t len;
            const char *u = utf8_of(r->skey[j], &len);
            if (!u) return -1;
            order = 0;
            for (int b = 0; b < 8; b++)
                order = (order << 8) | (b < len ? (unsigned char)u[b] : 0);
        }
        zeros[nz++] = (Pair){order, j};
    }
    sort_pairs(zeros, zeros + r->room, nz);
    if (!r->is_str) return nz;
    /* Strs sharing their first eight bytes are ordered by the rest (insertion sort: such runs
     * are short unless many keys share a long prefix, where it stays correct, only slower). */
    for (Py_ssize_t a = 0; a < nz;) {
        Py_ssize_t b = a + 1;
        while (b < nz && zeros[b].key == zeros[a].key) b++;
        for (Py_ssize_t i = a + 1; i < b; i++) {
            Pair v = zeros[i];
            Py_ssize_t j = i;
            while (j > a && compare_utf8(r->skey[zeros[j - 1].item], r->skey[v.item]) > 0) {
                zeros[j] = zeros[j - 1];
                j--;
            }
            zeros[j] = v;
        }
        a = b;
    }
    return nz;
}

/* Algorithm 1 on the ``n`` batch keys, from ``held`` slots (their keys, values and table
 * entries set) and ``*free_left`` unused dummies; the stored values are left as counters.
 * Returns the slots held after the call, or -1 (exception set) on an unencodable str. */
static Py_ssize_t run_loop(Run *r, Py_ssize_t n, Py_ssize_t held, Py_ssize_t *free_left,
                           int64_t *decrements) {
    int64_t *sval = r->sval;
    int64_t base = 0, d = 0;
    Py_ssize_t zp = 0, nzero = run_zero_list(r, held, 0);
    if (nzero < 0) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t x = run_key(r, i);
        int32_t s = run_find(r, i, x);
        uint64_t h = r->is_str ? r->hashes[i] : 0;
        if (s >= 0) {
            if (sval[s] == base) nzero--;
            sval[s]++;
        } else if (*free_left) {
            (*free_left)--;
            sval[held] = base + 1;
            run_put(r, x, h, (int32_t)held);
            held++;
        } else if (nzero) {
            /* The smallest key still at zero leaves (a listed key may have grown since). */
            int32_t z;
            do {
                z = (int32_t)r->zeros[zp++].item;
            } while (sval[z] != base);
            run_remove(r, z);
            sval[z] = base + 1;
            run_put(r, x, h, z);
            nzero--;
        } else {
            /* Every counter is positive: all fall by one, and the new zeros are listed. */
            d++;
            base++;
            nzero = run_zero_list(r, held, base);
            if (nzero < 0) return -1;
            zp = 0;
        }
    }
    for (Py_ssize_t j = 0; j < held; j++) sval[j] -= base;
    *decrements = d;
    return held;
}

static int consistent(Py_ssize_t m, Py_ssize_t counts, Py_ssize_t out, Py_ssize_t most,
                      Py_ssize_t k, Py_ssize_t free_slots) {
    if (counts == m && out >= most && k >= 1 && free_slots >= 0 && m + free_slots == k &&
        k <= INT32_MAX)
        return 1;
    PyErr_SetString(PyExc_ValueError, "inconsistent Misra-Gries kernel arguments");
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

    PyObject *result = NULL;
    Run r;
    memset(&r, 0, sizeof r);
    r.codes = (const int64_t *)b_codes.buf;
    r.skey = (int64_t *)b_ok.buf;
    r.sval = (int64_t *)b_oc.buf;
    const int64_t *in_keys = (const int64_t *)b_keys.buf;
    const int64_t *in_counts = (const int64_t *)b_counts.buf;
    Py_ssize_t n = b_codes.len / 8, m = b_keys.len / 8;
    r.room = m + (free_slots < n ? free_slots : n);
    if (b_oc.len != b_ok.len ||
        !consistent(m, b_counts.len / 8, b_ok.len / 8, r.room, k, free_slots))
        goto done;

    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (r.codes[i] < lo) lo = r.codes[i];
        if (r.codes[i] > hi) hi = r.codes[i];
    }
    for (Py_ssize_t s = 0; s < m; s++) {
        if (in_keys[s] < lo) lo = in_keys[s];
        if (in_keys[s] > hi) hi = in_keys[s];
    }
    if (lo > hi) lo = hi = 0; /* no keys at all */
    r.zeros = (Pair *)malloc((size_t)(r.room > 0 ? r.room : 1) * 2 * sizeof(Pair));
    if (table_init(&r.table, r.room, n, lo, hi) < 0 || !r.zeros) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t s = 0; s < m; s++) {
        if (table_find(&r.table, in_keys[s]) >= 0) {
            PyErr_SetString(PyExc_ValueError, "duplicate held keys");
            goto done;
        }
        r.sval[s] = in_counts[s];
        run_put(&r, in_keys[s], 0, (int32_t)s);
    }
    int64_t d = 0;
    Py_ssize_t held;
    Py_BEGIN_ALLOW_THREADS
    held = run_loop(&r, n, m, &free_slots, &d);
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("nnn", held, free_slots, (Py_ssize_t)d);
done:
    table_free(&r.table);
    free(r.zeros);
    PyBuffer_Release(&b_oc);
fail_ok:
    PyBuffer_Release(&b_ok);
fail_counts:
    PyBuffer_Release(&b_counts);
fail_keys:
    PyBuffer_Release(&b_keys);
fail_codes:
    PyBuffer_Release(&b_codes);
    return result;
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
    Run r;
    memset(&r, 0, sizeof r);
    r.is_str = 1;
    r.keys = keys;
    r.sval = (int64_t *)b_out.buf;
    r.room = m + (free_slots < n ? free_slots : n);
    const int64_t *in_counts = (const int64_t *)b_counts.buf;
    uint64_t *hashes = NULL;
    if (!consistent(m, b_counts.len / 8, b_out.len / 8, r.room, k, free_slots)) goto done;
    size_t room = (size_t)(r.room > 0 ? r.room : 1);
    hashes = (uint64_t *)malloc((size_t)(n > 0 ? n : 1) * sizeof(uint64_t));
    r.skey = (int64_t *)malloc(room * sizeof(int64_t));
    r.shash = (uint64_t *)malloc(room * sizeof(uint64_t));
    r.zeros = (Pair *)malloc(room * 2 * sizeof(Pair));
    if (!hashes || !r.skey || !r.shash || !r.zeros || probe_init(&r.probe, r.room) < 0) {
        PyErr_NoMemory();
        goto done;
    }
    r.hashes = hashes;
    /* Every key must be an exact str; its hash is computed (and cached by the str) here. */
    for (Py_ssize_t i = 0; i < n + m; i++) {
        PyObject *x = i < n ? PyList_GET_ITEM(keys, i) : PyList_GET_ITEM(held_keys, i - n);
        if (!PyUnicode_CheckExact(x)) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        Py_hash_t h = PyObject_Hash(x);
        if (h == -1) goto done;
        if (i < n) {
            hashes[i] = (uint64_t)h;
            continue;
        }
        Py_ssize_t s = i - n;
        if (str_find(&r.probe, x, (uint64_t)h) >= 0) {
            PyErr_SetString(PyExc_ValueError, "duplicate held keys");
            goto done;
        }
        r.sval[s] = in_counts[s];
        run_put(&r, (int64_t)(intptr_t)x, (uint64_t)h, (int32_t)s);
    }
    int64_t d = 0;
    Py_ssize_t held = run_loop(&r, n, m, &free_slots, &d);
    if (held < 0) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
            PyErr_Clear();
            result = Py_NewRef(Py_None);
        }
        goto done;
    }
    PyObject *out_keys = PyList_New(held);
    if (!out_keys) goto done;
    for (Py_ssize_t j = 0; j < held; j++)
        PyList_SET_ITEM(out_keys, j, Py_NewRef((PyObject *)(intptr_t)r.skey[j]));
    result = Py_BuildValue("Nnn", out_keys, free_slots, (Py_ssize_t)d);
done:
    probe_free(&r.probe);
    free(hashes);
    free(r.skey);
    free(r.shash);
    free(r.zeros);
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
