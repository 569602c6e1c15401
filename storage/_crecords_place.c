/* storage._crecords: the producer's record placement (``Producer.send_batch``'s per-record loop) and Kafka's
 * murmur2 key hash, in C. The pure-Python twins: rafka/send_batch.py (the loop body) and
 * rafka/partitioner.py (murmur2, partition_for_key); tests/unit/test_place_plain.py holds them equal. */
#include "_crecords.h"

/* Utils.murmur2 of the Java client: MurmurHash2, seed 0x9747b28c, on unsigned 32-bit arithmetic; the
 * caller reads the result as a signed int32. */
static uint32_t
murmur2_u32(const unsigned char *data, Py_ssize_t length)
{
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t n4 = length >> 2;
    for (Py_ssize_t i = 0; i < n4; i++) {
        const unsigned char *q = data + (i << 2);
        uint32_t k = (uint32_t)q[0] | ((uint32_t)q[1] << 8) | ((uint32_t)q[2] << 16) | ((uint32_t)q[3] << 24);
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    Py_ssize_t base = length & ~(Py_ssize_t)3;
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)data[base + 2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)data[base + 1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)data[base];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

PyObject *
crec_murmur2(PyObject *module, PyObject *arg)
{
    (void)module;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t h = murmur2_u32((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromLong((long)(int32_t)h);
}

/* 1: *out is a plain bytes object or NULL for None (*len -1); 0: neither. */
static int
plain_bytes(PyObject *o, PyObject **out, Py_ssize_t *len)
{
    if (o == Py_None) {
        *out = NULL;
        *len = -1;
        return 1;
    }
    if (!PyBytes_CheckExact(o))
        return 0;
    *out = o;
    *len = PyBytes_GET_SIZE(o);
    return 1;
}

/* ---------------------------------------------------------------------------------------------------
 * place_plain(records, start, override, lists, valid, num_partitions, limit, default_ts, sticky,
 *             sticky_bytes, batch_size, default_partitioner, where) -> (next, sticky_bytes)
 *
 *   The common case of send_batch's placement loop (rafka/send_batch.py), record by record from ``start``:
 *   a tuple or list ``(key, value[, partition[, headers[, timestamp]]])`` with bytes-or-None key and value,
 *   no headers, key + value at most ``limit`` bytes, an int timestamp in [-1, 2**63) or none. Its partition: ``override``
 *   (not None), else its own int, else murmur2 of its key modulo ``num_partitions``, else (keyless) the
 *   call's ``sticky`` partition while ``sticky_bytes`` + its size stays within ``batch_size`` (each record
 *   counts its size + 10, as the Python loop does). Keyed and keyless-unpartitioned records take this path
 *   only under the default partitioner. The partition must be marked in ``valid`` (a bytes object indexed
 *   by partition id) and have its run list in ``lists[p]``; then ``(timestamp, key, value, ())`` is
 *   appended to that list and ``p`` to ``where``.
 *
 *   Stops at the first record it does not take (anything else: serializers, headers, other types, a record
 *   over the limit, an unknown partition, a partition without a run list yet, no sticky partition yet or
 *   one that must move on) and returns its index, which the caller places through Python; len(records)
 *   when every record was taken.
 */
PyObject *
crec_place_plain(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 13) {
        PyErr_SetString(PyExc_TypeError, "place_plain() takes 13 arguments");
        return NULL;
    }
    PyObject *records = args[0], *override = args[2], *lists = args[3], *valid = args[4];
    PyObject *default_ts = args[7], *sticky_obj = args[8], *where = args[12];
    if ((!PyList_CheckExact(records) && !PyTuple_CheckExact(records)) || !PyList_CheckExact(lists) ||
        !PyBytes_CheckExact(valid) || !PyList_CheckExact(where) || !PyLong_CheckExact(default_ts)) {
        PyErr_SetString(PyExc_TypeError,
                        "place_plain() needs a list or tuple of records, a list of run lists, a bytes mask, "
                        "an int default timestamp and a list for the partitions");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    Py_ssize_t nparts = PyLong_AsSsize_t(args[5]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[6]);
    long long sticky_bytes = PyLong_AsLongLong(args[9]);
    long long batch_size = PyLong_AsLongLong(args[10]);
    int default_partitioner = PyObject_IsTrue(args[11]);
    long sticky = -1;
    if (sticky_obj != Py_None)
        sticky = PyLong_AsLong(sticky_obj);
    if (PyErr_Occurred() || default_partitioner < 0)
        return NULL;
    long forced = -1;
    if (override != Py_None) {
        if (!PyLong_CheckExact(override))
            return Py_BuildValue("(nL)", start, sticky_bytes); /* Python places it (and raises if it must) */
        int overflow = 0;
        forced = PyLong_AsLongAndOverflow(override, &overflow);
        if (overflow || forced < 0)
            return Py_BuildValue("(nL)", start, sticky_bytes);
    }
    const unsigned char *mask = (const unsigned char *)PyBytes_AS_STRING(valid);
    Py_ssize_t nmask = PyBytes_GET_SIZE(valid), nlists = PyList_GET_SIZE(lists);
    PyObject *empty = PyTuple_New(0);
    if (empty == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(records), i = start;
    PyObject **recs = PySequence_Fast_ITEMS(records);
    for (; i < n; i++) {
        PyObject *r = recs[i];
        if (!PyTuple_CheckExact(r) && !PyList_CheckExact(r))
            break;
        Py_ssize_t rn = PySequence_Fast_GET_SIZE(r);
        if (rn < 2)
            break;
        PyObject **f = PySequence_Fast_ITEMS(r);
        if (rn > 3 && f[3] != Py_None) {
            PyObject *h = f[3];
            if (!((PyTuple_CheckExact(h) || PyList_CheckExact(h)) && PySequence_Fast_GET_SIZE(h) == 0))
                break;
        }
        PyObject *kb, *vb;
        Py_ssize_t kl, vl;
        if (!plain_bytes(f[0], &kb, &kl) || !plain_bytes(f[1], &vb, &vl))
            break;
        Py_ssize_t size = (kl > 0 ? kl : 0) + (vl > 0 ? vl : 0);
        if (size > limit)
            break;
        PyObject *ts = default_ts;
        if (rn > 4 && f[4] != Py_None) {
            if (!PyLong_CheckExact(f[4]))
                break;
            int overflow = 0;
            long long t = PyLong_AsLongLongAndOverflow(f[4], &overflow);
            if (overflow || t < -1) /* Python raises InvalidTimestampError */
                break;
            ts = f[4];
        }
        long p;
        PyObject *po = forced >= 0 ? NULL : (rn > 2 ? f[2] : Py_None);
        if (forced >= 0)
            p = forced;
        else if (po != Py_None) {
            if (!PyLong_CheckExact(po))
                break;
            int overflow = 0;
            p = PyLong_AsLongAndOverflow(po, &overflow);
            if (overflow || p < 0)
                break;
        }
        else if (!default_partitioner)
            break;
        else if (kb == NULL) { /* keyless: the call's sticky partition */
            if (sticky < 0 || (sticky_bytes + size > batch_size && sticky_bytes))
                break;
            p = sticky;
        }
        else {
            if (nparts <= 0)
                break;
            uint32_t h = murmur2_u32((const unsigned char *)PyBytes_AS_STRING(kb), kl);
            p = (long)((h & 0x7fffffffu) % (uint32_t)nparts);
        }
        if (p >= nmask || !mask[p] || p >= nlists)
            break;
        PyObject *run = PyList_GET_ITEM(lists, p);
        if (!PyList_CheckExact(run))
            break;
        PyObject *item = PyTuple_New(4);
        if (item == NULL)
            goto fail;
        Py_INCREF(ts);
        PyTuple_SET_ITEM(item, 0, ts);
        PyObject *k = kb ? kb : Py_None, *v = vb ? vb : Py_None;
        Py_INCREF(k);
        PyTuple_SET_ITEM(item, 1, k);
        Py_INCREF(v);
        PyTuple_SET_ITEM(item, 2, v);
        Py_INCREF(empty);
        PyTuple_SET_ITEM(item, 3, empty);
        int bad = PyList_Append(run, item);
        Py_DECREF(item);
        if (bad)
            goto fail;
        PyObject *pl = PyLong_FromLong(p);
        if (pl == NULL)
            goto fail;
        bad = PyList_Append(where, pl);
        Py_DECREF(pl);
        if (bad)
            goto fail;
        if (forced < 0 && po == Py_None && kb == NULL)
            sticky_bytes += size + 10;
    }
    Py_DECREF(empty);
    return Py_BuildValue("(nL)", i, sticky_bytes);
fail:
    Py_DECREF(empty);
    return NULL;
}
