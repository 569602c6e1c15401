/* storage._crecords: the hot loops of storage/records.py in C: the consumer's record decoding
 * (``_decode_records``, this file), the producer's record encoding (``RecordBatchBuilder.append_many``
 * and ``.append``'s fast path: _crecords_encode.c) and the leader's record walk (_crecords_validate.c).
 * setup.py compiles the three files into one module; _crecords.h holds what they share.
 *
 * decode_into(data, start, end, count, base_offset, base_timestamp, append_timestamp, out[, shape]) -> bool
 *
 *   Decodes ``count`` records of the RecordBatch v2 grammar (see storage/records.py) from the
 *   uncompressed region ``data[start:end]`` (any C-contiguous buffer) and appends a ``Record`` (the
 *   class given once to ``set_record_type``) per record to the list ``out``. ``append_timestamp`` is
 *   None (CreateTime: base_timestamp + delta) or the batch's MaxTimestamp (LogAppendTime: every record
 *   carries it). Returns True when done.
 *
 *   ``shape`` (cls, topic, partition, leader_epoch, min_offset) builds the consumer's records instead:
 *   ``cls(topic, partition, offset, timestamp, timestamp_type, key, value, headers, leader_epoch)`` (a
 *   NamedTuple of 9 fields, rafka.structs.ConsumerRecord; timestamp_type 1 under LogAppendTime), only
 *   for the records at or after ``min_offset`` (the consumer's position inside a batch).
 *
 *   Malformed records raise ValueError (UnicodeDecodeError for a header key that is not utf-8) with a
 *   message saying what is wrong; the caller wraps it into InvalidRecordError. Returns False, having
 *   appended nothing, when a timestamp or offset does not fit a signed 64-bit integer (a 10-byte varint
 *   with bits past 64, or base + delta overflowing): only the arbitrary-precision reference decoder in
 *   Python gives the exact answer for such (hostile) input, so the caller hands the batch to it.
 *   ``out`` is left as it was on an error too.
 *
 * Every read is bounds-checked against the record's declared end (the batch's end for the length
 * itself), which accepts exactly the inputs the Python decoder accepts (that one reads laxly but must
 * land exactly on each record's end). The GIL is held throughout.
 */
#include "_crecords.h"
#include <stdarg.h>

static PyTypeObject *record_type = NULL; /* storage.records.Record (strong reference) */

/* Raise ValueError for a varint status other than V_OK/V_OVERFLOW-handled-by-caller. */
static void
varint_error(int st, const char *what)
{
    if (st == V_TOOLONG)
        PyErr_Format(PyExc_ValueError, "the %s varint is longer than 10 bytes", what);
    else if (st == V_OVERFLOW)
        PyErr_Format(PyExc_ValueError, "the %s varint does not fit 64 bits", what);
    else
        PyErr_Format(PyExc_ValueError, "the %s varint does not fit the record's declared length", what);
}

/* Headers => [(str, bytes | None)] of one record, from [*pp, rend); a new reference or NULL. */
static PyObject *
decode_headers(const unsigned char **pp, const unsigned char *rend, int64_t count)
{
    const unsigned char *p = *pp;
    PyObject *headers = PyTuple_New((Py_ssize_t)count);
    if (headers == NULL)
        return NULL;
    for (int64_t i = 0; i < count; i++) {
        int64_t klen, vlen;
        int st = varint(&p, rend, &klen);
        if (st != V_OK) {
            varint_error(st, "record header key length");
            goto fail;
        }
        if (klen < 0 || klen > rend - p) {
            PyErr_Format(PyExc_ValueError, "impossible record header key length %lld", (long long)klen);
            goto fail;
        }
        PyObject *hkey = PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)klen, NULL);
        if (hkey == NULL)
            goto fail; /* UnicodeDecodeError, a ValueError, as bytes.decode("utf-8") raises */
        p += klen;
        st = varint(&p, rend, &vlen);
        if (st != V_OK) {
            Py_DECREF(hkey);
            varint_error(st, "record header value length");
            goto fail;
        }
        PyObject *hval;
        if (vlen == -1) {
            hval = Py_NewRef(Py_None);
        }
        else if (vlen < 0 || vlen > rend - p) {
            Py_DECREF(hkey);
            PyErr_Format(PyExc_ValueError, "impossible record header value length %lld", (long long)vlen);
            goto fail;
        }
        else {
            hval = PyBytes_FromStringAndSize((const char *)p, (Py_ssize_t)vlen);
            if (hval == NULL) {
                Py_DECREF(hkey);
                goto fail;
            }
            p += vlen;
        }
        PyObject *pair = PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(hkey);
            Py_DECREF(hval);
            goto fail;
        }
        PyTuple_SET_ITEM(pair, 0, hkey);
        PyTuple_SET_ITEM(pair, 1, hval);
        PyObject_GC_UnTrack(pair); /* holds a str and bytes/None: can never be part of a cycle */
        PyTuple_SET_ITEM(headers, (Py_ssize_t)i, pair);
    }
    PyObject_GC_UnTrack(headers); /* holds only untracked pairs */
    *pp = p;
    return headers;
fail:
    Py_DECREF(headers); /* slots not yet filled are NULL, which tuple dealloc skips */
    return NULL;
}

/* Drop out[first:], keeping any pending exception. */
static void
truncate_list(PyObject *out, Py_ssize_t first)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (PyList_SetSlice(out, first, PyList_GET_SIZE(out), NULL) < 0)
        PyErr_Clear();
    PyErr_Restore(type, value, tb);
}

static int
as_int64(PyObject *o, int64_t *out, int *overflow)
{
    long long v = PyLong_AsLongLongAndOverflow(o, overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (*overflow)
        return 0;
    *out = v;
    return 0;
}

/* A tuple subclass without instance attributes (a NamedTuple): its instances are built with tp_alloc. */
static int
plain_tuple_type(PyTypeObject *t)
{
    return PyType_IsSubtype(t, &PyTuple_Type) && t->tp_basicsize == PyTuple_Type.tp_basicsize &&
           t->tp_itemsize == PyTuple_Type.tp_itemsize && t->tp_dictoffset == 0 && t->tp_weaklistoffset == 0 &&
           t->tp_alloc != NULL;
}

static PyObject *
decode_into(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 8 && nargs != 9) {
        PyErr_Format(PyExc_TypeError, "decode_into() takes 8 or 9 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *shape = nargs == 9 && args[8] != Py_None ? args[8] : NULL;
    PyTypeObject *shape_cls = NULL;
    int64_t min_offset = 0;
    int skip_all = 0;
    if (shape != NULL) {
        int ovf = 0;
        if (!PyTuple_CheckExact(shape) || PyTuple_GET_SIZE(shape) != 5 || !PyType_Check(PyTuple_GET_ITEM(shape, 0)) ||
            !plain_tuple_type((PyTypeObject *)PyTuple_GET_ITEM(shape, 0)) || !PyLong_Check(PyTuple_GET_ITEM(shape, 4))) {
            PyErr_SetString(PyExc_TypeError, "decode_into() shape must be (cls, topic, partition, leader_epoch, "
                            "min_offset) with cls a NamedTuple of 9 fields");
            return NULL;
        }
        shape_cls = (PyTypeObject *)PyTuple_GET_ITEM(shape, 0);
        if (as_int64(PyTuple_GET_ITEM(shape, 4), &min_offset, &ovf) < 0)
            return NULL;
        if (ovf) { /* past 64 bits: before every offset, or after every one */
            min_offset = INT64_MIN;
            skip_all = _PyLong_Sign(PyTuple_GET_ITEM(shape, 4)) > 0;
        }
    }
    if (record_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "storage._crecords.set_record_type() was never called");
        return NULL;
    }
    PyObject *append_ts = args[6] == Py_None ? NULL : args[6];
    PyObject *out = args[7];
    if (!PyList_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "decode_into() needs a list to append to");
        return NULL;
    }
    if (append_ts != NULL && !PyLong_CheckExact(append_ts)) {
        PyErr_SetString(PyExc_TypeError, "decode_into() needs an int or None append timestamp");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t end = PyLong_AsSsize_t(args[2]);
    if (end == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t count = PyLong_AsSsize_t(args[3]);
    if (count == -1 && PyErr_Occurred())
        return NULL;
    int64_t base_offset = 0, base_ts = 0;
    int ovf_offset = 0, ovf_ts = 0;
    if (as_int64(args[4], &base_offset, &ovf_offset) < 0 || as_int64(args[5], &base_ts, &ovf_ts) < 0)
        return NULL;
    if (ovf_offset || (ovf_ts && append_ts == NULL))
        Py_RETURN_FALSE; /* beyond 64 bits: the Python decoder's business */

    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t first = PyList_GET_SIZE(out);
    PyObject *ts_obj = NULL; /* the last timestamp object (records of a batch often share one) */
    int64_t ts_last = 0;
    PyObject *result = NULL;
    int deferred = 0;

    if (start < 0 || start > end || end > view.len) {
        PyErr_Format(PyExc_ValueError, "the records region [%zd, %zd) runs past the end of the batch "
                     "(%zd bytes available)", start, end, view.len);
        goto done;
    }
    if (append_ts != NULL)
        ts_obj = Py_NewRef(append_ts);

    const unsigned char *const base = (const unsigned char *)view.buf;
    const unsigned char *p = base + start;
    const unsigned char *const stop = base + end;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t n, tsd, od, offset = 0, ts = 0, klen, vlen, hcount;
        int st = varint(&p, stop, &n); /* Length */
        if (st != V_OK) {
            if (st == V_TRUNC)
                PyErr_SetString(PyExc_ValueError, "a record runs past the end of the batch");
            else
                varint_error(st, "record length");
            goto done;
        }
        if (n < 6 || n > stop - p) { /* attributes + five 1-byte varints at least */
            PyErr_Format(PyExc_ValueError, "record length %lld does not fit the batch", (long long)n);
            goto done;
        }
        const unsigned char *const rend = p + n;
        p++; /* Attributes (unused) */
        st = varint(&p, rend, &tsd); /* TimestampDelta */
        if (st == V_OVERFLOW && append_ts == NULL) {
            deferred = 1;
            goto done;
        }
        if (st != V_OK && st != V_OVERFLOW) {
            varint_error(st, "record timestamp delta");
            goto done;
        }
        st = varint(&p, rend, &od); /* OffsetDelta */
        if (st == V_OVERFLOW || (st == V_OK && __builtin_add_overflow(base_offset, od, &offset))) {
            deferred = 1;
            goto done;
        }
        if (st != V_OK) {
            varint_error(st, "record offset delta");
            goto done;
        }
        if (append_ts == NULL && __builtin_add_overflow(base_ts, tsd, &ts)) {
            deferred = 1;
            goto done;
        }
        st = varint(&p, rend, &klen); /* KeyLength, Key */
        if (st != V_OK) {
            varint_error(st, "record key length");
            goto done;
        }
        const unsigned char *kp = p;
        if (klen < 0) {
            if (klen != -1) {
                PyErr_Format(PyExc_ValueError, "record at offset %lld has negative key length %lld",
                             (long long)offset, (long long)klen);
                goto done;
            }
        }
        else if (klen > rend - p) {
            PyErr_Format(PyExc_ValueError, "record at offset %lld overruns its declared length",
                         (long long)offset);
            goto done;
        }
        else {
            p += klen;
        }
        st = varint(&p, rend, &vlen); /* ValueLength, Value */
        if (st != V_OK) {
            varint_error(st, "record value length");
            goto done;
        }
        const unsigned char *vp = p;
        if (vlen < 0) {
            if (vlen != -1) {
                PyErr_Format(PyExc_ValueError, "record at offset %lld has negative value length %lld",
                             (long long)offset, (long long)vlen);
                goto done;
            }
        }
        else if (vlen > rend - p) {
            PyErr_Format(PyExc_ValueError, "record at offset %lld overruns its declared length",
                         (long long)offset);
            goto done;
        }
        else {
            p += vlen;
        }
        st = varint(&p, rend, &hcount); /* HeadersCount, Headers */
        if (st != V_OK) {
            varint_error(st, "record header count");
            goto done;
        }
        if (hcount < 0 || hcount > rend - p) {
            PyErr_Format(PyExc_ValueError, "impossible record header count %lld", (long long)hcount);
            goto done;
        }
        PyObject *headers;
        if (hcount == 0) {
            headers = PyTuple_New(0); /* the () singleton */
        }
        else {
            headers = decode_headers(&p, rend, hcount);
        }
        if (headers == NULL)
            goto done;
        if (p != rend) {
            Py_DECREF(headers);
            PyErr_Format(PyExc_ValueError, "record at offset %lld does not fill its declared length",
                         (long long)offset);
            goto done;
        }

        if (shape != NULL && (skip_all || offset < min_offset)) { /* before the consumer's position: not handed out */
            Py_DECREF(headers);
            continue;
        }
        /* Record(offset, timestamp, key, value, headers), or with a shape the consumer's record:
         * (topic, partition, offset, timestamp, timestamp_type, key, value, headers, leader_epoch) */
        int at = shape != NULL ? 2 : 0;
        PyObject *rec = shape != NULL ? shape_cls->tp_alloc(shape_cls, 9) : record_type->tp_alloc(record_type, 5);
        if (rec == NULL) {
            Py_DECREF(headers);
            goto done;
        }
        PyTuple_SET_ITEM(rec, at + 4 + (shape != NULL), headers); /* as made: Py_DECREF(rec) frees what is set */
        if (shape != NULL) {
            PyTuple_SET_ITEM(rec, 0, Py_NewRef(PyTuple_GET_ITEM(shape, 1)));
            PyTuple_SET_ITEM(rec, 1, Py_NewRef(PyTuple_GET_ITEM(shape, 2)));
            PyTuple_SET_ITEM(rec, 4, PyLong_FromLong(append_ts != NULL)); /* small ints: never NULL */
            PyTuple_SET_ITEM(rec, 8, Py_NewRef(PyTuple_GET_ITEM(shape, 3)));
        }
        PyObject *o = PyLong_FromLongLong(offset);
        if (o == NULL)
            goto fail_rec;
        PyTuple_SET_ITEM(rec, at, o);
        if (append_ts == NULL && (ts_obj == NULL || ts != ts_last)) {
            Py_XDECREF(ts_obj);
            ts_obj = PyLong_FromLongLong(ts);
            if (ts_obj == NULL)
                goto fail_rec;
            ts_last = ts;
        }
        PyTuple_SET_ITEM(rec, at + 1, Py_NewRef(ts_obj));
        int kv = at + 2 + (shape != NULL); /* the key's slot: after the timestamp type in a consumer record */
        o = klen < 0 ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize((const char *)kp, (Py_ssize_t)klen);
        if (o == NULL)
            goto fail_rec;
        PyTuple_SET_ITEM(rec, kv, o);
        o = vlen < 0 ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize((const char *)vp, (Py_ssize_t)vlen);
        if (o == NULL)
            goto fail_rec;
        PyTuple_SET_ITEM(rec, kv + 1, o);
        /* ints, bytes, None and an untracked headers tuple: no cycle possible (what the collector's
         * own tuple untracking would conclude at its next pass) */
        PyObject_GC_UnTrack(rec);
        if (PyList_Append(out, rec) < 0)
            goto fail_rec;
        Py_DECREF(rec);
        continue;
    fail_rec:
        Py_DECREF(rec);
        goto done;
    }
    if (p != stop) {
        PyErr_Format(PyExc_ValueError, "%zd bytes remain after the batch's %zd records",
                     (Py_ssize_t)(stop - p), count);
        goto done;
    }
    result = Py_NewRef(Py_True);
done:
    Py_XDECREF(ts_obj);
    PyBuffer_Release(&view);
    if (result == NULL) {
        truncate_list(out, first);
        if (deferred && !PyErr_Occurred())
            result = Py_NewRef(Py_False);
    }
    return result;
}

static PyObject *
set_record_type(PyObject *module, PyObject *cls)
{
    (void)module;
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "set_record_type() needs a tuple subclass");
        return NULL;
    }
    PyTypeObject *t = (PyTypeObject *)cls;
    if (!plain_tuple_type(t)) {
        PyErr_SetString(PyExc_TypeError,
                        "set_record_type() needs a tuple subclass without instance attributes "
                        "(a NamedTuple: __slots__ = ())");
        return NULL;
    }
    Py_INCREF(cls);
    Py_XSETREF(record_type, t);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode_into", (PyCFunction)(void (*)(void))decode_into, METH_FASTCALL,
     "decode_into(data, start, end, count, base_offset, base_timestamp, append_timestamp, out[, shape]) -> bool\n\n"
     "Append the Records (with shape (cls, topic, partition, leader_epoch, min_offset): the consumer's\n"
     "records from min_offset) of the uncompressed region data[start:end] to out; False (nothing appended)\n"
     "when a timestamp or offset exceeds 64 bits; ValueError for a malformed record."},
    {"encode_many", (PyCFunction)(void (*)(void))crec_encode_many, METH_FASTCALL,
     "encode_many(items, start, base_ts, last_delta, size, batch_size, count[, headroom])\n"
     "    -> (blob, next, base_ts, size, max_ts)\n\n"
     "Encode (timestamp, key, value, headers) items from start while they fit the batch and take the fast\n"
     "path; the caller appends items[next] through Python when next < len(items) and the batch has room.\n"
     "With headroom > 0 the blob is a bytearray whose first headroom bytes (zeros) precede the records."},
    {"append_one", (PyCFunction)(void (*)(void))crec_append_one, METH_FASTCALL,
     "append_one(builder, timestamp_ms, key, value) -> True | False | None\n\n"
     "RecordBatchBuilder.append's fast path for one record without headers: True appended, False the\n"
     "batch is full, None not taken (the caller appends through Python)."},
    {"batch_append", (PyCFunction)(void (*)(void))crec_batch_append, METH_FASTCALL,
     "batch_append(batch, timestamp_ms, key, value) -> index | False | None\n\n"
     "Unless batch.closed, append_one to batch.builder in one step under the GIL: the record's index,\n"
     "False (closed or full) or None (not taken)."},
    {"validate_records", (PyCFunction)(void (*)(void))crec_validate_records, METH_FASTCALL,
     "validate_records(data, start, end, count, base_timestamp, log_append_time, compacted, ts_low, ts_high)\n"
     "    -> (status, index, detail)\n\n"
     "Walk every record of data[start:end] without building objects (the leader's LogValidator):\n"
     "(0, count, max_timestamp), or the first failure: (1, i, message), (2, i, None) null key on a\n"
     "compacted topic, (3, i, timestamp) out of [ts_low, ts_high]."},
    {"place_plain", (PyCFunction)(void (*)(void))crec_place_plain, METH_FASTCALL,
     "place_plain(records, start, override, lists, valid, num_partitions, limit, default_ts, sticky,\n"
     "            sticky_bytes, batch_size, default_partitioner, where) -> (next, sticky_bytes)\n\n"
     "Producer.send_batch's placement of plain records from start (storage/_crecords_place.c): each taken\n"
     "record's (timestamp, key, value, ()) goes to lists[partition] and its partition to where; next is the\n"
     "first record left to the Python loop (len(records) when all were taken)."},
    {"murmur2", crec_murmur2, METH_O, "murmur2(data) -> int: Utils.murmur2 of Kafka's Java client (signed 32-bit)."},
    {"set_record_type", set_record_type, METH_O, "set_record_type(cls): the Record NamedTuple to build."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "storage._crecords",
    "RecordBatch v2 record decoding in C (the accelerator of storage.records).", -1, methods,
};

PyMODINIT_FUNC
PyInit__crecords(void)
{
    return PyModule_Create(&moduledef);
}
