/* storage._crecords: the hot loops of storage/records.py in C: the consumer's record decoding
 * (``_decode_records``) and the producer's record encoding (``RecordBatchBuilder.append_many``).
 *
 * decode_into(data, start, end, count, base_offset, base_timestamp, append_timestamp, out) -> bool
 *
 *   Decodes ``count`` records of the RecordBatch v2 grammar (see storage/records.py) from the
 *   uncompressed region ``data[start:end]`` (any C-contiguous buffer) and appends a ``Record`` (the
 *   class given once to ``set_record_type``) per record to the list ``out``. ``append_timestamp`` is
 *   None (CreateTime: base_timestamp + delta) or the batch's MaxTimestamp (LogAppendTime: every record
 *   carries it). Returns True when done.
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
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdarg.h>
#include <string.h>

static PyTypeObject *record_type = NULL; /* storage.records.Record (strong reference) */

enum { V_OK = 0, V_TRUNC, V_TOOLONG, V_OVERFLOW };

/* A zigzag varint/varlong of up to 10 bytes (as Python's _slow_varint) from [*pp, lim). */
static int
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

static PyObject *
decode_into(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 8) {
        PyErr_Format(PyExc_TypeError, "decode_into() takes 8 arguments (%zd given)", nargs);
        return NULL;
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

        PyObject *rec = record_type->tp_alloc(record_type, 5);
        if (rec == NULL) {
            Py_DECREF(headers);
            goto done;
        }
        PyTuple_SET_ITEM(rec, 4, headers); /* filled as made: Py_DECREF(rec) frees what is there */
        PyObject *o = PyLong_FromLongLong(offset);
        if (o == NULL)
            goto fail_rec;
        PyTuple_SET_ITEM(rec, 0, o);
        if (append_ts == NULL && (ts_obj == NULL || ts != ts_last)) {
            Py_XDECREF(ts_obj);
            ts_obj = PyLong_FromLongLong(ts);
            if (ts_obj == NULL)
                goto fail_rec;
            ts_last = ts;
        }
        PyTuple_SET_ITEM(rec, 1, Py_NewRef(ts_obj));
        o = klen < 0 ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize((const char *)kp, (Py_ssize_t)klen);
        if (o == NULL)
            goto fail_rec;
        PyTuple_SET_ITEM(rec, 2, o);
        o = vlen < 0 ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize((const char *)vp, (Py_ssize_t)vlen);
        if (o == NULL)
            goto fail_rec;
        PyTuple_SET_ITEM(rec, 3, o);
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
    if (t->tp_basicsize != PyTuple_Type.tp_basicsize || t->tp_itemsize != PyTuple_Type.tp_itemsize ||
        t->tp_dictoffset != 0 || t->tp_weaklistoffset != 0 || t->tp_alloc == NULL) {
        PyErr_SetString(PyExc_TypeError,
                        "set_record_type() needs a tuple subclass without instance attributes "
                        "(a NamedTuple: __slots__ = ())");
        return NULL;
    }
    Py_INCREF(cls);
    Py_XSETREF(record_type, t);
    Py_RETURN_NONE;
}


/* ---------------------------------------------------------------------------------------------------
 * encode_many(items, start, base_ts, last_delta, size, batch_size, count) -> (blob, next, base_ts, size, max_ts)
 *
 *   The producer's hot loop (RecordBatchBuilder.append_many): encodes the records items[start:next] of
 *   the list ``items`` ((timestamp_ms, key, value, headers) tuples) into ``blob``, the concatenated
 *   record bytes, with offset deltas last_delta+1, last_delta+2, ... and timestamp deltas from
 *   ``base_ts`` (None: the first record's timestamp, returned). ``size`` is the batch's estimated
 *   size so far and ``count`` its record count: a record that would take the size past batch_size stops
 *   the run unless the batch is still empty. A record the fast path does not handle (key/value not
 *   bytes or None, a timestamp below -1 or beyond 64 bits, a header that is not (str|bytes, bytes|None))
 *   also stops it: the caller appends that one through the Python path, which converts or raises.
 */
static inline Py_ssize_t
uvarint_len(uint64_t z)
{
    Py_ssize_t n = 1;
    while (z > 0x7F) {
        z >>= 7;
        n++;
    }
    return n;
}

static inline uint64_t
zigzag(int64_t n)
{
    return ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
}

static inline unsigned char *
put_uvarint(unsigned char *p, uint64_t z)
{
    while (z > 0x7F) {
        *p++ = (unsigned char)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    *p++ = (unsigned char)z;
    return p;
}

/* A varint length and the bytes, or length -1 (varint 0x01) for null: keys, values, header values. */
static inline unsigned char *
put_nullable(unsigned char *p, const char *data, Py_ssize_t len)
{
    if (len < 0) {
        *p++ = 1;
        return p;
    }
    p = put_uvarint(p, zigzag(len));
    memcpy(p, data, (size_t)len);
    return p + len;
}

/* Fields of one record as the fast path sees them (borrowed pointers into the item). */
typedef struct {
    int64_t ts;
    const char *key;
    Py_ssize_t klen; /* -1: null */
    const char *value;
    Py_ssize_t vlen;
    PyObject *headers; /* NULL or a non-empty tuple/list */
    Py_ssize_t body;   /* encoded length of the record after its length varint */
} enc_rec;

/* Bytes of the header section, or -1 when the fast path does not take these headers. */
static Py_ssize_t
headers_len(PyObject *headers)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(headers);
    Py_ssize_t total = uvarint_len(zigzag(n));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *h = PySequence_Fast_GET_ITEM(headers, i);
        if (!PyTuple_CheckExact(h) || PyTuple_GET_SIZE(h) != 2)
            return -1;
        PyObject *hk = PyTuple_GET_ITEM(h, 0), *hv = PyTuple_GET_ITEM(h, 1);
        Py_ssize_t kl;
        if (PyUnicode_CheckExact(hk)) {
            if (PyUnicode_AsUTF8AndSize(hk, &kl) == NULL) {
                PyErr_Clear(); /* e.g. lone surrogates: the Python path raises the proper error */
                return -1;
            }
        }
        else if (PyBytes_CheckExact(hk))
            kl = PyBytes_GET_SIZE(hk);
        else
            return -1;
        total += uvarint_len(zigzag(kl)) + kl;
        if (hv == Py_None)
            total += 1;
        else if (PyBytes_CheckExact(hv))
            total += uvarint_len(zigzag(PyBytes_GET_SIZE(hv))) + PyBytes_GET_SIZE(hv);
        else
            return -1;
    }
    return total;
}

static unsigned char *
put_headers(unsigned char *p, PyObject *headers)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(headers);
    p = put_uvarint(p, zigzag(n));
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *h = PySequence_Fast_GET_ITEM(headers, i);
        PyObject *hk = PyTuple_GET_ITEM(h, 0), *hv = PyTuple_GET_ITEM(h, 1);
        const char *k;
        Py_ssize_t kl;
        if (PyUnicode_CheckExact(hk))
            k = PyUnicode_AsUTF8AndSize(hk, &kl); /* cached by headers_len */
        else {
            k = PyBytes_AS_STRING(hk);
            kl = PyBytes_GET_SIZE(hk);
        }
        p = put_nullable(p, k, kl);
        p = hv == Py_None ? put_nullable(p, NULL, -1) : put_nullable(p, PyBytes_AS_STRING(hv), PyBytes_GET_SIZE(hv));
    }
    return p;
}

/* 1: the fast path takes items[i] (fields filled, body not yet), 0: it does not, -1: error set. */
static int
take_item(PyObject *item, enc_rec *r)
{
    if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) < 3)
        return 0;
    int overflow = 0;
    PyObject *ts = PyTuple_GET_ITEM(item, 0);
    if (!PyLong_CheckExact(ts))
        return 0;
    r->ts = PyLong_AsLongLongAndOverflow(ts, &overflow);
    if (overflow || (r->ts == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    if (r->ts < -1)
        return 0;
    PyObject *k = PyTuple_GET_ITEM(item, 1), *v = PyTuple_GET_ITEM(item, 2);
    if (k == Py_None) {
        r->key = NULL;
        r->klen = -1;
    }
    else if (PyBytes_CheckExact(k)) {
        r->key = PyBytes_AS_STRING(k);
        r->klen = PyBytes_GET_SIZE(k);
    }
    else
        return 0;
    if (v == Py_None) {
        r->value = NULL;
        r->vlen = -1;
    }
    else if (PyBytes_CheckExact(v)) {
        r->value = PyBytes_AS_STRING(v);
        r->vlen = PyBytes_GET_SIZE(v);
    }
    else
        return 0;
    r->headers = NULL;
    if (PyTuple_GET_SIZE(item) > 3) {
        PyObject *h = PyTuple_GET_ITEM(item, 3);
        if (h != Py_None) {
            if (!PyTuple_CheckExact(h) && !PyList_CheckExact(h))
                return 0;
            if (PySequence_Fast_GET_SIZE(h) > 0)
                r->headers = h;
        }
    }
    return 1;
}

static PyObject *
encode_many(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "encode_many(items, start, base_ts, last_delta, size, batch_size, count) takes 7 arguments");
        return NULL;
    }
    PyObject *items = args[0];
    if (!PyList_CheckExact(items)) {
        PyErr_SetString(PyExc_TypeError, "encode_many() needs a list of items");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    long long base_ts = 0;
    int have_base = args[2] != Py_None;
    if (have_base)
        base_ts = PyLong_AsLongLong(args[2]);
    long long last_delta = PyLong_AsLongLong(args[3]);
    Py_ssize_t size = PyLong_AsSsize_t(args[4]);
    Py_ssize_t batch_size = PyLong_AsSsize_t(args[5]);
    Py_ssize_t count = PyLong_AsSsize_t(args[6]);
    if (PyErr_Occurred())
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items);
    if (start < 0 || start > n) {
        PyErr_SetString(PyExc_IndexError, "encode_many() start is out of range");
        return NULL;
    }
    enc_rec *recs = PyMem_Malloc(sizeof(enc_rec) * (size_t)(n - start + 1));
    if (recs == NULL)
        return PyErr_NoMemory();
    int64_t max_ts = -1;
    Py_ssize_t total = 0, i = start, m = 0;
    long long delta = last_delta;
    for (; i < n; i++) {
        enc_rec *r = &recs[m];
        int ok = take_item(PyList_GET_ITEM(items, i), r);
        if (ok < 0)
            goto fail;
        if (!ok)
            break;
        if (!have_base) {
            base_ts = r->ts;
            have_base = 1;
        }
        int64_t tsd;
        if (__builtin_sub_overflow(r->ts, (int64_t)base_ts, &tsd))
            break;
        if (delta + 1 > 0x7FFFFFFF)
            break;
        Py_ssize_t hl = 1;
        if (r->headers != NULL && (hl = headers_len(r->headers)) < 0)
            break;
        Py_ssize_t body = 1 + uvarint_len(zigzag(tsd)) + uvarint_len(zigzag(delta + 1)) +
                          (r->klen < 0 ? 1 : uvarint_len(zigzag(r->klen)) + r->klen) +
                          (r->vlen < 0 ? 1 : uvarint_len(zigzag(r->vlen)) + r->vlen) + hl;
        Py_ssize_t rsize = body + uvarint_len(zigzag(body));
        if (size + rsize > batch_size && count > 0)
            break;
        r->body = body;
        size += rsize;
        total += rsize;
        count++;
        delta++;
        m++;
        if (r->ts > max_ts)
            max_ts = r->ts;
    }
    PyObject *blob = PyBytes_FromStringAndSize(NULL, total);
    if (blob == NULL)
        goto fail;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(blob);
    long long d = last_delta;
    for (Py_ssize_t j = 0; j < m; j++) {
        enc_rec *r = &recs[j];
        p = put_uvarint(p, zigzag(r->body));
        *p++ = 0; /* attributes */
        p = put_uvarint(p, zigzag(r->ts - (int64_t)base_ts));
        p = put_uvarint(p, zigzag(++d));
        p = put_nullable(p, r->key, r->klen);
        p = put_nullable(p, r->value, r->vlen);
        if (r->headers == NULL)
            *p++ = 0;
        else
            p = put_headers(p, r->headers);
    }
    PyMem_Free(recs);
    if (!have_base || (m == 0 && args[2] == Py_None)) /* no record taken: the base is still unset */
        return Py_BuildValue("(NnOnL)", blob, i, Py_None, size, (long long)max_ts);
    return Py_BuildValue("(NnLnL)", blob, i, base_ts, size, (long long)max_ts);
fail:
    PyMem_Free(recs);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------------
 * validate_records(data, start, end, count, base_timestamp, log_append_time, compacted, ts_low, ts_high)
 *     -> (status, index, detail)
 *
 *   The leader's record walk (storage/log_validator.py, Kafka's LogValidator): checks every record of
 *   the uncompressed region data[start:end] without building a Python object per record. Each record
 *   must parse exactly to its declared length (every varint within it, key/value lengths -1 or fitting,
 *   header count and header lengths possible, header keys valid UTF-8), carry offset delta == its index,
 *   and the region must end right after ``count`` records. Then, per record: a null key is refused when
 *   ``compacted``; unless ``log_append_time``, its timestamp (base + delta, within 64 bits) must lie in
 *   [ts_low, ts_high] unless it is -1 (NO_TIMESTAMP).
 *
 *   Returns (0, count, max_timestamp) (max over the records, at least -1; -1 under log_append_time), or
 *   the first failure: (1, index, message) malformed, (2, index, None) null key on a compacted topic,
 *   (3, index, timestamp) out of bounds. ``index`` is the record's position in the batch (count when
 *   bytes remain after the last record). The pure-Python twin is log_validator._walk_records; both must
 *   give identical answers (tests/unit/test_log_validator_diff.py).
 */
enum { WALK_OK = 0, WALK_MALFORMED = 1, WALK_NULL_KEY = 2, WALK_TIMESTAMP = 3 };

/* Well-formed UTF-8 (Unicode table 3-7): exactly what Python's strict utf-8 decoder accepts. */
static int
utf8_valid(const unsigned char *s, Py_ssize_t n)
{
    const unsigned char *e = s + n;
    while (s < e) {
        unsigned c = *s;
        if (c < 0x80) {
            s++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) {
            if (e - s < 2 || (s[1] & 0xC0) != 0x80)
                return 0;
            s += 2;
        }
        else if (c >= 0xE0 && c <= 0xEF) {
            if (e - s < 3)
                return 0;
            unsigned c1 = s[1];
            if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 > 0x9F) || (c1 & 0xC0) != 0x80 ||
                (s[2] & 0xC0) != 0x80)
                return 0;
            s += 3;
        }
        else if (c >= 0xF0 && c <= 0xF4) {
            if (e - s < 4)
                return 0;
            unsigned c1 = s[1];
            if ((c == 0xF0 && c1 < 0x90) || (c == 0xF4 && c1 > 0x8F) || (c1 & 0xC0) != 0x80 ||
                (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
                return 0;
            s += 4;
        }
        else
            return 0;
    }
    return 1;
}

static PyObject *
walk_fail(Py_ssize_t index, const char *fmt, ...)
{
    va_list vargs;
    va_start(vargs, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, vargs);
    va_end(vargs);
    if (msg == NULL)
        return NULL;
    return Py_BuildValue("(inN)", WALK_MALFORMED, index, msg);
}

static PyObject *
validate_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "validate_records() takes 9 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    Py_ssize_t end = PyLong_AsSsize_t(args[2]);
    Py_ssize_t count = PyLong_AsSsize_t(args[3]);
    long long base_ts = PyLong_AsLongLong(args[4]);
    int lat = PyObject_IsTrue(args[5]);
    int compacted = PyObject_IsTrue(args[6]);
    long long ts_low = PyLong_AsLongLong(args[7]);
    long long ts_high = PyLong_AsLongLong(args[8]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = NULL;
    if (start < 0 || start > end || end > view.len || count < 0) {
        PyErr_Format(PyExc_ValueError, "validate_records(): region [%zd, %zd) of %zd bytes, count %zd",
                     start, end, view.len, count);
        goto done;
    }
    const unsigned char *const base = (const unsigned char *)view.buf;
    const unsigned char *p = base + start;
    const unsigned char *const stop = base + end;
    int64_t max_ts = -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t n, tsd, od, klen, vlen, hcount, ts = -1;
        if (varint(&p, stop, &n) != V_OK) {
            result = walk_fail(i, "the record length is not a valid varint (truncated, over 10 bytes or "
                               "past 64 bits)");
            goto done;
        }
        if (n < 6 || n > stop - p) {
            result = walk_fail(i, "record length %lld does not fit the batch (%zd bytes left)",
                               (long long)n, (Py_ssize_t)(stop - p));
            goto done;
        }
        const unsigned char *const rend = p + n;
        p++; /* Attributes (unused) */
        int st = varint(&p, rend, &tsd);
        if (!(st == V_OK || (st == V_OVERFLOW && lat))) {
            result = walk_fail(i, "the timestamp delta is not a valid varint");
            goto done;
        }
        if (varint(&p, rend, &od) != V_OK) {
            result = walk_fail(i, "the offset delta is not a valid varint");
            goto done;
        }
        if (od != (int64_t)i) {
            result = walk_fail(i, "offset delta %lld, expected %zd (deltas must run 0, 1, 2, ...)",
                               (long long)od, i);
            goto done;
        }
        if (!lat && (st == V_OVERFLOW || __builtin_add_overflow((int64_t)base_ts, tsd, &ts))) {
            result = walk_fail(i, "the timestamp (base timestamp + delta) does not fit 64 bits");
            goto done;
        }
        if (varint(&p, rend, &klen) != V_OK) {
            result = walk_fail(i, "the key length is not a valid varint");
            goto done;
        }
        if (klen < -1 || klen > rend - p) {
            result = walk_fail(i, "key length %lld does not fit the record", (long long)klen);
            goto done;
        }
        if (klen > 0)
            p += klen;
        if (varint(&p, rend, &vlen) != V_OK) {
            result = walk_fail(i, "the value length is not a valid varint");
            goto done;
        }
        if (vlen < -1 || vlen > rend - p) {
            result = walk_fail(i, "value length %lld does not fit the record", (long long)vlen);
            goto done;
        }
        if (vlen > 0)
            p += vlen;
        if (varint(&p, rend, &hcount) != V_OK) {
            result = walk_fail(i, "the header count is not a valid varint");
            goto done;
        }
        if (hcount < 0 || hcount > rend - p) {
            result = walk_fail(i, "header count %lld does not fit the record", (long long)hcount);
            goto done;
        }
        for (int64_t h = 0; h < hcount; h++) {
            int64_t hk, hv;
            if (varint(&p, rend, &hk) != V_OK) {
                result = walk_fail(i, "the length of header %lld's key is not a valid varint", (long long)h);
                goto done;
            }
            if (hk < 0 || hk > rend - p) {
                result = walk_fail(i, "header %lld has key length %lld, which does not fit the record",
                                   (long long)h, (long long)hk);
                goto done;
            }
            if (!utf8_valid(p, (Py_ssize_t)hk)) {
                result = walk_fail(i, "header %lld's key is not valid UTF-8", (long long)h);
                goto done;
            }
            p += hk;
            if (varint(&p, rend, &hv) != V_OK) {
                result = walk_fail(i, "the length of header %lld's value is not a valid varint", (long long)h);
                goto done;
            }
            if (hv < -1 || hv > rend - p) {
                result = walk_fail(i, "header %lld has value length %lld, which does not fit the record",
                                   (long long)h, (long long)hv);
                goto done;
            }
            if (hv > 0)
                p += hv;
        }
        if (p != rend) {
            result = walk_fail(i, "the record's fields end %zd bytes before its declared length %lld",
                               (Py_ssize_t)(rend - p), (long long)n);
            goto done;
        }
        if (compacted && klen < 0) {
            result = Py_BuildValue("(inO)", WALK_NULL_KEY, i, Py_None);
            goto done;
        }
        if (!lat) {
            if (ts != -1 && (ts < ts_low || ts > ts_high)) {
                result = Py_BuildValue("(inL)", WALK_TIMESTAMP, i, (long long)ts);
                goto done;
            }
            if (ts > max_ts)
                max_ts = ts;
        }
    }
    if (p != stop) {
        result = walk_fail(count, "%zd bytes remain after the batch's %zd records", (Py_ssize_t)(stop - p),
                           count);
        goto done;
    }
    result = Py_BuildValue("(inL)", WALK_OK, count, (long long)max_ts);
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_into", (PyCFunction)(void (*)(void))decode_into, METH_FASTCALL,
     "decode_into(data, start, end, count, base_offset, base_timestamp, append_timestamp, out) -> bool\n\n"
     "Append the Records of the uncompressed region data[start:end] to out; False (nothing appended)\n"
     "when a timestamp or offset exceeds 64 bits; ValueError for a malformed record."},
    {"encode_many", (PyCFunction)(void (*)(void))encode_many, METH_FASTCALL,
     "encode_many(items, start, base_ts, last_delta, size, batch_size, count)\n"
     "    -> (blob, next, base_ts, size, max_ts)\n\n"
     "Encode (timestamp, key, value, headers) items from start while they fit the batch and take the fast\n"
     "path; the caller appends items[next] through Python when next < len(items) and the batch has room."},
    {"validate_records", (PyCFunction)(void (*)(void))validate_records, METH_FASTCALL,
     "validate_records(data, start, end, count, base_timestamp, log_append_time, compacted, ts_low, ts_high)\n"
     "    -> (status, index, detail)\n\n"
     "Walk every record of data[start:end] without building objects (the leader's LogValidator):\n"
     "(0, count, max_timestamp), or the first failure: (1, i, message), (2, i, None) null key on a\n"
     "compacted topic, (3, i, timestamp) out of [ts_low, ts_high]."},
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
