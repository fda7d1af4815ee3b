/* yr.datasystem._pybuffer: the base type that gives the Python SDK's buffer
 * classes (object_client.Buffer, kv_client.ReadOnlyBuffer and
 * StateValueBuffer) the buffer protocol, so memoryview(buf),
 * numpy.frombuffer(buf), struct.unpack_from(fmt, buf) and
 * pickle.loads(..., buffers=[buf]) read the pinned bytes in place.
 *
 * A class written in Python can only export a buffer through __buffer__
 * (PEP 688), which CPython honours from 3.12 on. On older versions this type's
 * bf_getbuffer does what 3.12's slot does: it calls the object's __buffer__
 * with the request's flags, which returns a memoryview over library-owned
 * memory (python/yr/datasystem/_native.py, pinned_view), and exports that
 * memoryview's buffer. view->obj is then the memoryview, so the pin lives
 * for as long as the consumer holds the view, and the release goes through
 * the memoryview's own bf_releasebuffer; this type needs none. A writable
 * request on a read-only buffer is refused by __buffer__ (BufferError) and,
 * whatever __buffer__ returns, by the memoryview itself.
 *
 * On 3.12 and later a Python subclass that defines __buffer__ replaces this
 * slot with CPython's own, which does the same. Built against 3.11 or later
 * it uses only the stable ABI (CMake sets Py_LIMITED_API), so one file serves
 * every later CPython. It links nothing but the interpreter it is loaded
 * into; the package falls back to plain Python classes when it is absent. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *dunder_buffer; /* interned "__buffer__" */

static int base_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    PyObject *fl = PyLong_FromLong(flags);
    if (fl == NULL) return -1;
    PyObject *mv = PyObject_CallMethodObjArgs(self, dunder_buffer, fl, NULL);
    Py_DECREF(fl);
    if (mv == NULL) return -1;
    /* PEP 688: __buffer__ returns a memoryview. Anything else is a bug in
     * the subclass, named here rather than exported blindly. */
    if (!PyMemoryView_Check(mv)) {
        PyObject *tp = PyObject_Type(self);
        PyObject *rtp = PyObject_Type(mv);
        if (tp != NULL && rtp != NULL)
            PyErr_Format(PyExc_TypeError, "__buffer__ of %S returned %S, not a memoryview", tp,
                         rtp);
        Py_XDECREF(tp);
        Py_XDECREF(rtp);
        Py_DECREF(mv);
        return -1;
    }
    /* The view takes its own reference to mv (view->obj); ours goes. */
    int rc = PyObject_GetBuffer(mv, view, flags);
    Py_DECREF(mv);
    return rc;
}

/* A heap type's instances hold a reference to their type, which the base's
 * dealloc drops (CPython's subtype_dealloc leaves it to a heap base). */
static void base_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    tp_free(self);
    Py_DECREF(tp);
}

static PyType_Slot base_slots[] = {
    {Py_bf_getbuffer, (void *)base_getbuffer},
    {Py_tp_dealloc, (void *)base_dealloc},
    {Py_tp_doc, (void *)"Base of the datasystem buffer classes: exports the memoryview "
                        "their __buffer__ returns through the buffer protocol."},
    {0, NULL},
};

static PyType_Spec base_spec = {
    .name = "yr.datasystem._pybuffer.BufferBase",
    .basicsize = 0, /* an object's header and nothing more */
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .slots = base_slots,
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "yr.datasystem._pybuffer",
    .m_doc = "The buffer protocol for yr.datasystem's buffer classes.",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__pybuffer(void);

PyMODINIT_FUNC PyInit__pybuffer(void)
{
    if (dunder_buffer == NULL) {
        dunder_buffer = PyUnicode_InternFromString("__buffer__");
        if (dunder_buffer == NULL) return NULL;
    }
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    PyObject *tp = PyType_FromSpec(&base_spec);
    if (tp == NULL || PyModule_AddObject(m, "BufferBase", tp) < 0) {
        Py_XDECREF(tp);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
