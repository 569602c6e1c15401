/* storage._crecords: declarations shared by its four compilation units (setup.py compiles them into one
 * module): _crecords.c (the decoder, the module's method table), _crecords_encode.c (the producer's
 * encoders), _crecords_validate.c (the leader's record walk) and _crecords_place.c (send_batch's
 * placement, murmur2). */
#ifndef RAFKA_CRECORDS_H
#define RAFKA_CRECORDS_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { V_OK = 0, V_TRUNC, V_TOOLONG, V_OVERFLOW };

/* A zigzag varint/varlong of up to 10 bytes (as Python's _slow_varint) from [*pp, lim). */
static inline int
varint_slow(const unsigned char **pp, const unsigned char *lim, int64_t *out)
{
    const unsigned char *p = *pp;
    uint64_t z = 0;
    int overflow = 0;
    for (int shift = 0;; shift += 7) {
        if (p >= lim)
            return V_TRUNC;
        unsigned b = *p++;
        if (shift == 63) { /* the 10th byte: must end the varint, and holds bit 63 only */
            if (b & 0x80)
                return V_TOOLONG;
            overflow = b > 1;
            z |= (uint64_t)(b & 1) << 63;
            break;
        }
        z |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80))
            break;
    }
    *pp = p;
    *out = (int64_t)((z >> 1) ^ (0 - (z & 1)));
    return overflow ? V_OVERFLOW : V_OK;
}

static inline int
varint(const unsigned char **pp, const unsigned char *lim, int64_t *out)
{
    const unsigned char *p = *pp;
    if (p < lim && *p < 0x80) {
        unsigned z = *p;
        *out = (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
        *pp = p + 1;
        return V_OK;
    }
    if (lim - p >= 2 && p[1] < 0x80) { /* 2 bytes: lengths of 64..8191 (every 100-byte record's) */
        unsigned z = (p[0] & 0x7Fu) | ((unsigned)p[1] << 7);
        *out = (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
        *pp = p + 2;
        return V_OK;
    }
    return varint_slow(pp, lim, out);
}

PyObject *crec_encode_many(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *crec_append_one(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *crec_batch_append(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *crec_validate_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *crec_place_plain(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *crec_murmur2(PyObject *module, PyObject *arg);

#endif
