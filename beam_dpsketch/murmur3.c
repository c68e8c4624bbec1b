/*
 * MurmurHash3 x64 128-bit of the canonical encoding of str and bytes keys, over a whole batch.
 *
 * The canonical encoding of a str is its UTF-8 bytes followed by the tag byte 0x03, of a bytes
 * object its bytes followed by 0x04 (see beam_dpsketch/hashing.py). Hashing a Python list of
 * str keys in numpy first needs an Arrow copy of every string; this loop instead reads each
 * string's UTF-8 in place (for compact ASCII strings CPython stores it directly) and writes the
 * two 64-bit halves of each hash into caller-allocated buffers. No Python object is created
 * per key.
 *
 * The loop reads Python objects, so it keeps the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define TAG_STR 0x03
#define TAG_BYTES 0x04

static const uint64_t C1 = 0x87c37b91114253d5ULL;
static const uint64_t C2 = 0x4cf5ad432745937fULL;

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

/* Unaligned little-endian 64-bit load: MurmurHash3 reads its blocks as little-endian words,
 * so big-endian hosts must swap to produce the same hashes. */
static inline uint64_t load64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline uint64_t fmix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

/* One 16-byte block of the body loop. */
static inline void mix_block(uint64_t *h1, uint64_t *h2, uint64_t k1, uint64_t k2) {
    k1 *= C1;
    k1 = rotl64(k1, 31);
    k1 *= C2;
    *h1 ^= k1;
    *h1 = rotl64(*h1, 27);
    *h1 += *h2;
    *h1 = *h1 * 5 + 0x52dce729;

    k2 *= C2;
    k2 = rotl64(k2, 33);
    k2 *= C1;
    *h2 ^= k2;
    *h2 = rotl64(*h2, 31);
    *h2 += *h1;
    *h2 = *h2 * 5 + 0x38495ab5;
}

static inline uint64_t load32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    return v;
}

/*
 * The last ``rest`` (< 16) payload bytes at ``p`` as two little-endian words, zero above.
 *
 * Reads only bytes inside [p, p + rest) (a read past a key's end could cross into an unmapped
 * page), with overlapping loads rather than a byte loop or a copy into a scratch buffer: small
 * stores followed by a wide load of the same bytes stall on store forwarding.
 */
static inline void load_tail(const unsigned char *p, Py_ssize_t rest, uint64_t *lo,
                             uint64_t *hi) {
    if (rest >= 8) {
        *lo = load64(p);
        /* Bytes 8..rest-1 are the top rest-8 bytes of the word ending at p + rest. */
        *hi = rest == 8 ? 0 : load64(p + rest - 8) >> (8 * (16 - rest));
    } else if (rest >= 4) {
        /* Two 4-byte loads overlap on equal bytes, so or-ing them is exact. */
        *lo = load32(p) | load32(p + rest - 4) << (8 * (rest - 4));
        *hi = 0;
    } else if (rest > 0) {
        /* First, middle and last byte cover every length 1..3. */
        *lo = (uint64_t)p[0] | (uint64_t)p[rest >> 1] << (8 * (rest >> 1)) |
              (uint64_t)p[rest - 1] << (8 * (rest - 1));
        *hi = 0;
    } else {
        *lo = 0;
        *hi = 0;
    }
}

/*
 * MurmurHash3_x64_128 of data[0:len] followed by the byte ``tag`` (len + 1 bytes in all).
 *
 * Full blocks are read from ``data`` in place. The last len % 16 payload bytes and the tag form
 * the final 16 bytes or fewer: if they fill 16 (len % 16 == 15) they are one more body block and
 * the tail is empty, else they are the tail. Tail words are zero above the tail's bytes, so
 * mixing both words unconditionally equals the reference's switch on the tail length (a zero
 * k1 or k2 leaves h1 or h2 unchanged).
 */
static void murmur3_tagged(const unsigned char *data, Py_ssize_t len, unsigned char tag,
                           uint64_t seed, uint64_t *out1, uint64_t *out2) {
    uint64_t h1 = seed, h2 = seed;
    Py_ssize_t body = len & ~(Py_ssize_t)15;
    for (Py_ssize_t i = 0; i < body; i += 16) {
        mix_block(&h1, &h2, load64(data + i), load64(data + i + 8));
    }
    Py_ssize_t rest = len - body;
    uint64_t k1, k2;
    load_tail(data + body, rest, &k1, &k2);
    if (rest < 8) {
        k1 |= (uint64_t)tag << (8 * rest);
    } else {
        k2 |= (uint64_t)tag << (8 * (rest - 8));
    }
    if (rest == 15) {
        mix_block(&h1, &h2, k1, k2);
    } else {
        k2 *= C2;
        k2 = rotl64(k2, 33);
        k2 *= C1;
        h2 ^= k2;
        k1 *= C1;
        k1 = rotl64(k1, 31);
        k1 *= C2;
        h1 ^= k1;
    }
    uint64_t total = (uint64_t)len + 1;
    h1 ^= total;
    h2 ^= total;
    h1 += h2;
    h2 += h1;
    h1 = fmix64(h1);
    h2 = fmix64(h2);
    h1 += h2;
    h2 += h1;
    *out1 = h1;
    *out2 = h2;
}

PyDoc_STRVAR(hash_tagged_doc,
             "hash_tagged(keys, tag, seed, h1, h2, /)\n"
             "--\n\n"
             "Hash each key's bytes followed by the byte ``tag`` into ``h1[i]``, ``h2[i]``.\n\n"
             "``keys`` is a sequence whose elements must all be exactly ``str`` (tag 3, hashed as\n"
             "UTF-8) or exactly ``bytes`` (tag 4); ``seed`` is in [0, 2**32); ``h1`` and ``h2``\n"
             "are writable contiguous buffers of at least ``8 * len(keys)`` bytes, filled with\n"
             "native-endian uint64 values.\n\n"
             "Returns -1 when every key was hashed, else the index of the first key that is not\n"
             "of the exact type or (str) cannot be encoded as UTF-8; entries before it are\n"
             "filled, entries from it on are not.");

static PyObject *hash_tagged(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *keys;
    int tag;
    PyObject *seed_obj;
    Py_buffer out1, out2;
    if (!PyArg_ParseTuple(args, "OiO!w*w*:hash_tagged", &keys, &tag, &PyLong_Type, &seed_obj,
                          &out1, &out2)) {
        return NULL;
    }
    PyObject *seq = NULL;
    PyObject *result = NULL;
    if (tag != TAG_STR && tag != TAG_BYTES) {
        PyErr_Format(PyExc_ValueError, "tag must be %d (str) or %d (bytes), got %d", TAG_STR,
                     TAG_BYTES, tag);
        goto done;
    }
    /* Checked, not wrapped: a negative or too large seed must not silently hash as another. */
    unsigned long long seed = PyLong_AsUnsignedLongLong(seed_obj);
    if (seed == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        seed = 0xFFFFFFFFFFFFFFFFULL;
    }
    if (seed > 0xFFFFFFFFULL) {
        PyErr_SetString(PyExc_ValueError, "seed must be in [0, 2**32)");
        goto done;
    }
    seq = PySequence_Fast(keys, "keys must be a sequence");
    if (seq == NULL) {
        goto done;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (out1.len / 8 < n || out2.len / 8 < n) {
        PyErr_SetString(PyExc_ValueError, "h1 and h2 must hold 8 bytes per key");
        goto done;
    }
    /* The items array stays valid for the whole loop: nothing below runs Python code, so the
     * list cannot be resized under it. */
    PyObject **items = PySequence_Fast_ITEMS(seq);
    uint64_t *h1 = (uint64_t *)out1.buf;
    uint64_t *h2 = (uint64_t *)out2.buf;
    Py_ssize_t bad = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = items[i];
        const char *data;
        Py_ssize_t len;
        if (tag == TAG_STR) {
            if (!PyUnicode_CheckExact(key)) {
                bad = i;
                break;
            }
            data = PyUnicode_AsUTF8AndSize(key, &len);
            if (data == NULL) {
                /* Lone surrogates have no UTF-8 encoding: the caller's general path reports
                 * them. Other failures (memory) propagate. */
                if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
                    PyErr_Clear();
                    bad = i;
                    break;
                }
                goto done;
            }
        } else {
            if (!PyBytes_CheckExact(key)) {
                bad = i;
                break;
            }
            data = PyBytes_AS_STRING(key);
            len = PyBytes_GET_SIZE(key);
        }
        murmur3_tagged((const unsigned char *)data, len, (unsigned char)tag, seed, h1 + i, h2 + i);
    }
    result = PyLong_FromSsize_t(bad);
done:
    Py_XDECREF(seq);
    PyBuffer_Release(&out1);
    PyBuffer_Release(&out2);
    return result;
}

static PyMethodDef methods[] = {
    {"hash_tagged", hash_tagged, METH_VARARGS, hash_tagged_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "beam_dpsketch.murmur3",
    "MurmurHash3 x64 128-bit of tagged str and bytes keys, over a batch.",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit_murmur3(void) { return PyModule_Create(&module); }
