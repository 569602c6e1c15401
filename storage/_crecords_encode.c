/* storage._crecords, the producer's side: record encoding (RecordBatchBuilder.append_many and
 * .append's fast path). See _crecords.c for the module. */
#include "_crecords.h"

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

PyObject *
crec_encode_many(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 7 && nargs != 8) {
        PyErr_SetString(PyExc_TypeError,
                        "encode_many(items, start, base_ts, last_delta, size, batch_size, count[, headroom]) takes 7 "
                        "or 8 arguments");
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
    Py_ssize_t headroom = nargs > 7 ? PyLong_AsSsize_t(args[7]) : 0;
    if (PyErr_Occurred())
        return NULL;
    if (headroom < 0 || headroom > 4096) {
        PyErr_SetString(PyExc_ValueError, "encode_many() headroom must be within [0, 4096]");
        return NULL;
    }
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
    /* with headroom: a bytearray whose first ``headroom`` bytes are left for the batch header, so the batch can
     * be sealed in place (RecordBatchBuilder.build) instead of copied into a new buffer behind its header */
    PyObject *blob = headroom ? PyByteArray_FromStringAndSize(NULL, headroom + total)
                              : PyBytes_FromStringAndSize(NULL, total);
    if (blob == NULL)
        goto fail;
    unsigned char *p = headroom ? (unsigned char *)PyByteArray_AS_STRING(blob)
                                : (unsigned char *)PyBytes_AS_STRING(blob);
    if (headroom) {
        memset(p, 0, (size_t)headroom);
        p += headroom;
    }
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
 * append_one(builder, timestamp_ms, key, value) -> True | False | None
 *
 *   RecordBatchBuilder.append's fast path for one plain record (no headers, the next offset): what
 *   ``Producer.send`` calls per record. Reads and updates the builder's slots (_base_ts, _last_delta,
 *   _size, _count, _max_ts, _parts; batch_size) exactly as the Python method does: True when the record
 *   was appended, False when it would take the size past batch_size while the batch holds a record.
 *   None when the fast path does not take it (key or value not bytes or None, a timestamp below -1 or
 *   beyond 64 bits, a delta past 32 bits): nothing was changed and the caller appends through Python,
 *   which converts or raises.
 */
static PyObject *s_base_ts, *s_last_delta, *s_size, *s_count, *s_max_ts, *s_batch_size, *s_parts;

static int
intern_names(void)
{
    if (s_parts != NULL)
        return 0;
    s_base_ts = PyUnicode_InternFromString("_base_ts");
    s_last_delta = PyUnicode_InternFromString("_last_delta");
    s_size = PyUnicode_InternFromString("_size");
    s_count = PyUnicode_InternFromString("_count");
    s_max_ts = PyUnicode_InternFromString("_max_ts");
    s_batch_size = PyUnicode_InternFromString("batch_size");
    s_parts = PyUnicode_InternFromString("_parts");
    return (s_base_ts && s_last_delta && s_size && s_count && s_max_ts && s_batch_size && s_parts) ? 0 : -1;
}

/* 1: *out holds the int attribute, 0: it is None or does not fit 64 bits, -1: error set. */
static int
get_ll(PyObject *obj, PyObject *name, long long *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    int overflow = 0;
    int ok = v != Py_None && PyLong_Check(v);
    if (ok) {
        *out = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (*out == -1 && PyErr_Occurred()) {
            Py_DECREF(v);
            return -1;
        }
    }
    Py_DECREF(v);
    return ok && !overflow;
}

static int
set_ll(PyObject *obj, PyObject *name, long long value)
{
    PyObject *v = PyLong_FromLongLong(value);
    if (v == NULL)
        return -1;
    int r = PyObject_SetAttr(obj, name, v);
    Py_DECREF(v);
    return r;
}

/* A bytes-or-None field: 1 taken (data/len set, len -1 for None), 0 not the fast path's. */
static inline int
plain_field(PyObject *o, const char **data, Py_ssize_t *len)
{
    if (o == Py_None) {
        *data = NULL;
        *len = -1;
        return 1;
    }
    if (!PyBytes_CheckExact(o))
        return 0;
    *data = PyBytes_AS_STRING(o);
    *len = PyBytes_GET_SIZE(o);
    return 1;
}

/* Append one plain record to builder ``b``: 1 appended (*count_out: the builder's count after it), 0 the
 * batch is full, 2 not the fast path's (nothing changed), -1 error set. */
static int
append_impl(PyObject *b, PyObject *ts_obj, PyObject *k, PyObject *v, long long *count_out)
{
    const char *key, *value;
    Py_ssize_t klen, vlen;
    if (!PyLong_CheckExact(ts_obj) || !plain_field(k, &key, &klen) || !plain_field(v, &value, &vlen))
        return 2;
    int overflow = 0;
    long long ts = PyLong_AsLongLongAndOverflow(ts_obj, &overflow);
    if (overflow || ts < -1)
        return 2;
    if (intern_names() < 0)
        return -1;
    long long base, last_delta, size, count, max_ts, batch_size;
    int have_base = get_ll(b, s_base_ts, &base);
    if (have_base < 0)
        return -1;
    if (!have_base) {
        PyObject *o = PyObject_GetAttr(b, s_base_ts);
        if (o == NULL)
            return -1;
        int is_none = o == Py_None;
        Py_DECREF(o);
        if (!is_none) /* a base beyond 64 bits: the Python path's */
            return 2;
        base = ts;
    }
    int r;
    if ((r = get_ll(b, s_last_delta, &last_delta)) <= 0 || (r = get_ll(b, s_size, &size)) <= 0 ||
        (r = get_ll(b, s_count, &count)) <= 0 || (r = get_ll(b, s_max_ts, &max_ts)) <= 0 ||
        (r = get_ll(b, s_batch_size, &batch_size)) <= 0)
        return r < 0 ? -1 : 2;
    int64_t tsd;
    if (__builtin_sub_overflow((int64_t)ts, (int64_t)base, &tsd) || last_delta + 1 > 0x7FFFFFFF || last_delta < -1)
        return 2;
    long long delta = last_delta + 1;
    Py_ssize_t body = 1 + uvarint_len(zigzag(tsd)) + uvarint_len(zigzag(delta)) +
                      (klen < 0 ? 1 : uvarint_len(zigzag(klen)) + klen) +
                      (vlen < 0 ? 1 : uvarint_len(zigzag(vlen)) + vlen) + 1;
    Py_ssize_t rsize = body + uvarint_len(zigzag(body));
    if (size + rsize > batch_size && count > 0)
        return 0;
    PyObject *parts = PyObject_GetAttr(b, s_parts);
    if (parts == NULL)
        return -1;
    if (!PyList_Check(parts)) {
        Py_DECREF(parts);
        return 2;
    }
    PyObject *blob = PyBytes_FromStringAndSize(NULL, rsize);
    if (blob == NULL) {
        Py_DECREF(parts);
        return -1;
    }
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(blob);
    p = put_uvarint(p, zigzag(body));
    *p++ = 0; /* attributes */
    p = put_uvarint(p, zigzag(tsd));
    p = put_uvarint(p, zigzag(delta));
    p = put_nullable(p, key, klen);
    p = put_nullable(p, value, vlen);
    *p = 0; /* no headers */
    r = PyList_Append(parts, blob);
    Py_DECREF(blob);
    Py_DECREF(parts);
    if (r < 0 || set_ll(b, s_size, size + rsize) < 0 || set_ll(b, s_count, count + 1) < 0 ||
        set_ll(b, s_last_delta, delta) < 0 || (!have_base && set_ll(b, s_base_ts, base) < 0) ||
        (ts > max_ts && set_ll(b, s_max_ts, ts) < 0))
        return -1;
    *count_out = count + 1;
    return 1;
}

PyObject *
crec_append_one(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "append_one(builder, timestamp_ms, key, value) takes 4 arguments");
        return NULL;
    }
    long long count;
    switch (append_impl(args[0], args[1], args[2], args[3], &count)) {
    case 1:
        Py_RETURN_TRUE;
    case 0:
        Py_RETURN_FALSE;
    case 2:
        Py_RETURN_NONE;
    default:
        return NULL;
    }
}

/* ---------------------------------------------------------------------------------------------------
 * batch_append(batch, timestamp_ms, key, value) -> index | False | None
 *
 *   The producer's lock-free append (RecordAccumulator.append_plain): unless ``batch.closed`` or
 *   ``batch.busy`` (a locked append is changing the builder in Python), appends the plain record to
 *   ``batch.builder`` as append_one does and answers its index in the batch; False when the batch is
 *   closed (drained, expired), busy or full; None when the fast path does not take the record.
 *   Nothing here runs Python code or releases the GIL, so the flag checks and the append are one step
 *   for every other thread: a sender that sets ``closed`` before it builds the batch's bytes never loses
 *   a record appended concurrently, and a locked append that sets ``busy`` before it reads the builder
 *   never interleaves with this one.
 */
PyObject *
crec_batch_append(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "batch_append(batch, timestamp_ms, key, value) takes 4 arguments");
        return NULL;
    }
    static PyObject *s_closed, *s_busy, *s_builder;
    if (s_builder == NULL) {
        s_closed = PyUnicode_InternFromString("closed");
        s_busy = PyUnicode_InternFromString("busy");
        s_builder = PyUnicode_InternFromString("builder");
        if (s_closed == NULL || s_busy == NULL || s_builder == NULL)
            return NULL;
    }
    for (int f = 0; f < 2; f++) { /* closed, then busy: either one keeps this append off */
        PyObject *flag = PyObject_GetAttr(args[0], f == 0 ? s_closed : s_busy);
        if (flag == NULL)
            return NULL;
        int set = flag == Py_True ? 1 : flag == Py_False ? 0 : -1;
        Py_DECREF(flag);
        if (set)
            return set > 0 ? Py_NewRef(Py_False) : Py_NewRef(Py_None); /* not a bool: the locked path's */
    }
    PyObject *b = PyObject_GetAttr(args[0], s_builder);
    if (b == NULL)
        return NULL;
    long long count = 0;
    int r = append_impl(b, args[1], args[2], args[3], &count);
    Py_DECREF(b);
    if (r == 1)
        return PyLong_FromLongLong(count - 1);
    if (r == 0)
        Py_RETURN_FALSE;
    if (r == 2)
        Py_RETURN_NONE;
    return NULL;
}
