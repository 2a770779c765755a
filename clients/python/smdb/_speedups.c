/* Optional C accelerator of the smdb client (built by setup.py when a compiler and the Python
 * headers are there; the pure-Python code in _frame.py is the fallback and the reference).
 *
 * crc32c(data) -> int: CRC32C (Castagnoli) of a bytes-like object; the SSE4.2 instruction when
 * the CPU has it (x86-64, checked once at import), else slicing-by-8 tables.
 * frame(text) -> bytes: one RCP1 frame (header + UTF-8 payload) around a str.
 * split(data, pos, max_payload) -> (payloads, pos, bad): the payloads of the whole, valid
 * frames in data[pos:]; stops at a frame cut short (bad False) or at one with a bad magic, a
 * length over max_payload or a CRC mismatch (bad True: the caller's decoder raises for it). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define POLY 0x82F63B78u /* CRC32C, reflected */

static uint32_t table[8][256];

static void make_tables(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = table[0][n];
        for (int t = 1; t < 8; t++) {
            c = table[0][c & 0xFF] ^ (c >> 8);
            table[t][n] = c;
        }
    }
}

static uint32_t crc_sw(uint32_t crc, const unsigned char *p, size_t n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    while (n && ((uintptr_t)p & 7)) {
        crc = table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc;
        crc = table[7][w & 0xFF] ^ table[6][(w >> 8) & 0xFF] ^ table[5][(w >> 16) & 0xFF] ^
              table[4][(w >> 24) & 0xFF] ^ table[3][(w >> 32) & 0xFF] ^ table[2][(w >> 40) & 0xFF] ^
              table[1][(w >> 48) & 0xFF] ^ table[0][w >> 56];
        p += 8;
        n -= 8;
    }
#endif
    /* The tail (and every byte on a big-endian host). */
    while (n--) crc = table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_HW 1
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        n -= 8;
    }
    crc = (uint32_t)c;
    while (n--) crc = __builtin_ia32_crc32qi(crc, *p++);
    return crc;
}
#else
#define HAVE_HW 0
#endif

static int use_hw = 0;

static uint32_t crc32c_of(const void *p, Py_ssize_t n) {
#if HAVE_HW
    if (use_hw) return crc_hw(0xFFFFFFFFu, p, (size_t)n) ^ 0xFFFFFFFFu;
#endif
    return crc_sw(0xFFFFFFFFu, p, (size_t)n) ^ 0xFFFFFFFFu;
}

/* Above this many bytes the GIL is let go while the CRC runs. */
#define NOGIL_BYTES (256 * 1024)

static PyObject *py_crc32c(PyObject *self, PyObject *arg) {
    uint32_t crc;
    if (PyBytes_CheckExact(arg) && PyBytes_GET_SIZE(arg) < NOGIL_BYTES) {
        crc = crc32c_of(PyBytes_AS_STRING(arg), PyBytes_GET_SIZE(arg));
        return PyLong_FromUnsignedLong(crc);
    }
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0) return NULL;
    if (b.len >= NOGIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS crc = crc32c_of(b.buf, b.len);
        Py_END_ALLOW_THREADS
    } else {
        crc = crc32c_of(b.buf, b.len);
    }
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(crc);
}

static PyObject *py_frame(PyObject *self, PyObject *arg) {
    Py_ssize_t n;
    const char *text = PyUnicode_AsUTF8AndSize(arg, &n);
    if (text == NULL) return NULL;
    if ((uint64_t)n > 0xFFFFFFFFu) {
        PyErr_SetString(PyExc_ValueError, "frame payload over 4 GiB");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, n + 16);
    if (out == NULL) return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    uint32_t len = (uint32_t)n, crc = crc32c_of(text, n);
    memcpy(p, "RCP1\0\0\0\0", 8);
    p[8] = len >> 24; p[9] = len >> 16; p[10] = len >> 8; p[11] = len;
    p[12] = crc >> 24; p[13] = crc >> 16; p[14] = crc >> 8; p[15] = crc;
    memcpy(p + 16, text, n);
    return out;
}

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static PyObject *py_split(PyObject *self, PyObject *args) {
    Py_buffer b;
    Py_ssize_t pos, max_payload;
    if (!PyArg_ParseTuple(args, "y*nn:split", &b, &pos, &max_payload)) return NULL;
    PyObject *list = PyList_New(0);
    if (list == NULL) goto fail;
    const unsigned char *d = b.buf;
    int bad = 0;
    if (pos < 0) pos = 0;
    while (b.len - pos >= 16) {
        const unsigned char *h = d + pos;
        uint32_t len = be32(h + 8);
        if (memcmp(h, "RCP1", 4) != 0 || (Py_ssize_t)len > max_payload) { bad = 1; break; }
        if (b.len - pos - 16 < (Py_ssize_t)len) break;
        if (crc32c_of(h + 16, len) != be32(h + 12)) { bad = 1; break; }
        PyObject *payload = PyBytes_FromStringAndSize((const char *)h + 16, len);
        if (payload == NULL || PyList_Append(list, payload) < 0) {
            Py_XDECREF(payload);
            goto fail;
        }
        Py_DECREF(payload);
        pos += 16 + (Py_ssize_t)len;
    }
    PyBuffer_Release(&b);
    PyObject *r = Py_BuildValue("(NnO)", list, pos, bad ? Py_True : Py_False);
    return r;
fail:
    Py_XDECREF(list);
    PyBuffer_Release(&b);
    return NULL;
}

static PyObject *py_implementation(PyObject *self, PyObject *unused) {
    return PyUnicode_FromString(use_hw ? "sse4.2" : "slicing-by-8");
}

static PyMethodDef methods[] = {
    {"crc32c", py_crc32c, METH_O, "crc32c(data) -> int: CRC32C (Castagnoli) of a bytes-like object."},
    {"frame", py_frame, METH_O, "frame(text) -> bytes: one RCP1 frame (flags zero) around the UTF-8 of a str."},
    {"split", py_split, METH_VARARGS,
     "split(data, pos, max_payload) -> (payloads, pos, bad): the payloads of the whole, valid frames "
     "in data[pos:], the offset after them, and whether the frame there is invalid."},
    {"crc32c_method", py_implementation, METH_NOARGS,
     "crc32c_method() -> str: 'sse4.2' (the CPU's instruction) or 'slicing-by-8' (tables)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "smdb._speedups", "Optional C accelerator of the smdb client.", -1, methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    make_tables();
#if HAVE_HW
    __builtin_cpu_init();
    use_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    if (getenv("SMDB_CRC32C_NO_SSE42") != NULL) use_hw = 0;
#endif
    return PyModule_Create(&module);
}
