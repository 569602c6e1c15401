/* storage._crecords, the leader's side: the record walk of LogValidator. See _crecords.c for the module. */
#include <stdarg.h>
#include "_crecords.h"

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

PyObject *
crec_validate_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
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
