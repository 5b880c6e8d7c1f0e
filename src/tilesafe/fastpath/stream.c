/* Streams (driver/stream.py): StreamCore, the state of a stream that the host needs (its
 * device, the loans of work enqueued on it and the partitions that work spends, its driver
 * handle), with on_complete and synchronize; and next_stream, a device's pool stream. */
#include "fastpath.h"

FIELDS_FUNCS(stream, STREAM_FIELDS)

static PyObject *last_cuda_device;  /* devices are immutable: remember the last cuda one */

/* whether ``device`` is a cuda device (its kind): 1, 0, or -1 with an error */
int
is_cuda(PyObject *device)
{
    if (device == last_cuda_device)
        return 1;
    PyObject *kind = PyObject_GetAttr(device, s_kind);
    if (kind == NULL)
        return -1;
    int cuda = PyUnicode_Check(kind) && PyUnicode_Compare(kind, s_cuda) == 0;
    Py_DECREF(kind);
    if (cuda)
        field_set(&last_cuda_device, device);
    return cuda;
}

/* StreamCore.on_complete for a StreamCore (else the method): the loans end, and the borrowed
 * partitions are spent, when the stream is next synchronized. */
int
register_completion(PyObject *stream, PyObject *loans, PyObject *borrowed, PyObject *where)
{
    if (!PyObject_TypeCheck(stream, &StreamCoreType)) {
        PyObject *r = PyObject_CallMethodObjArgs(stream, s_on_complete, loans, borrowed, where,
                                                 NULL);
        Py_XDECREF(r);
        return r ? 0 : -1;
    }
    PyObject *pending = FIELD(stream, STREAM_PENDING), *spent = FIELD(stream, STREAM_SPENT);
    if (pending == NULL || !PyList_Check(pending) || spent == NULL || !PyList_Check(spent) ||
        !PyList_Check(loans) || !PyList_Check(borrowed)) {
        PyErr_SetString(PyExc_TypeError, "on_complete: unexpected stream or launch state");
        return -1;
    }
    Py_ssize_t end = PyList_GET_SIZE(pending);
    if (PyList_SetSlice(pending, end, end, loans) < 0)
        return -1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(borrowed); i++) {
        PyObject *entry = PyTuple_Pack(2, PyList_GET_ITEM(borrowed, i), where);
        if (entry == NULL || PyList_Append(spent, entry) < 0) {
            Py_XDECREF(entry);
            return -1;
        }
        Py_DECREF(entry);
    }
    return 0;
}

static PyObject *
stream_on_complete(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "on_complete(loans, borrowed_partitions, where)");
        return NULL;
    }
    PyObject *loans = PySequence_List(args[0]);
    PyObject *borrowed = loans ? PySequence_List(args[1]) : NULL;
    int status = borrowed ? register_completion(self, loans, borrowed, args[2]) : -1;
    Py_XDECREF(loans);
    Py_XDECREF(borrowed);
    if (status < 0)
        return NULL;
    Py_RETURN_NONE;
}

static int
restore_front(PyObject *list, PyObject *items)
{
    return PyList_Check(list) ? PyList_SetSlice(list, 0, 0, items) : -1;
}

/* The device's wait: the driver's stream wait on cuda, else the platform's synchronize. */
static int
wait_for(PyObject *stream)
{
    int cuda = is_cuda(FIELD(stream, STREAM_DEVICE));
    if (cuda < 0)
        return -1;
    if (!cuda) {
        PyObject *platform = PyObject_GetAttr(stream, s_platform);
        PyObject *r = platform ? PyObject_CallMethodOneArg(platform, s_synchronize, stream)
                               : NULL;
        Py_XDECREF(platform);
        Py_XDECREF(r);
        return r ? 0 : -1;
    }
    PyObject *address = FIELD(stream, STREAM_NATIVE_ADDRESS);
    if (address != NULL && PyLong_Check(address))
        Py_INCREF(address);
    else
        address = PyObject_GetAttr(stream, s_native_address);
    PyObject *sync = address ? driver_call(s_synchronize) : NULL;
    PyObject *err = sync ? PyObject_CallOneArg(sync, address) : NULL;
    Py_XDECREF(sync);
    Py_XDECREF(address);
    int nonzero = err ? PyObject_IsTrue(err) : -1;
    if (nonzero > 0)
        fail(err, s_fn_sync);
    Py_XDECREF(err);
    return nonzero == 0 ? 0 : -1;
}

/* StreamCore.synchronize: wait, then end the loans registered before the wait began (a
 * failed wait keeps them), then spend the partitions those launches borrowed. */
static PyObject *
stream_synchronize(PyObject *self, PyObject *unused)
{
    if (ensure_configured() < 0)
        return NULL;
    PyObject *pending = FIELD(self, STREAM_PENDING), *spent = FIELD(self, STREAM_SPENT);
    if (pending == NULL || spent == NULL || !PyList_Check(pending) || !PyList_Check(spent)) {
        PyErr_SetString(PyExc_TypeError, "a stream's pending loans are not lists");
        return NULL;
    }
    PyObject *fresh_pending = PyList_New(0), *fresh_spent = PyList_New(0);
    if (fresh_pending == NULL || fresh_spent == NULL) {
        Py_XDECREF(fresh_pending);
        Py_XDECREF(fresh_spent);
        return NULL;
    }
    Py_INCREF(pending);
    Py_INCREF(spent);
    Py_XSETREF(FIELD(self, STREAM_PENDING), fresh_pending);
    Py_XSETREF(FIELD(self, STREAM_SPENT), fresh_spent);
    PyObject *result = NULL;
    if (wait_for(self) < 0) {  /* still pending */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        if (restore_front(FIELD(self, STREAM_PENDING), pending) < 0 ||
            restore_front(FIELD(self, STREAM_SPENT), spent) < 0)
            PyErr_Clear();
        PyErr_Restore(type, value, tb);
    } else {
        /* every item is handed back whatever the others raise, and before the loans end (so
           no launch in another thread takes a borrowed partition in between); then the loans
           end, and the first error is raised */
        PyObject *type = NULL, *value = NULL, *tb = NULL;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(spent); i++) {
            PyObject *entry = PyList_GET_ITEM(spent, i);
            PyObject *r = NULL;
            if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2)
                PyErr_SetString(PyExc_TypeError, "a stream's spent partitions are pairs");
            else
                r = PyObject_CallMethodObjArgs(PyTuple_GET_ITEM(entry, 0), s_spend,
                                               s_spend_why, PyTuple_GET_ITEM(entry, 1), NULL);
            if (r != NULL)
                Py_DECREF(r);
            else if (type == NULL)
                PyErr_Fetch(&type, &value, &tb);
            else
                PyErr_Clear();
        }
        if (release_all(pending) < 0) {  /* (its error is raised; a spend's is dropped) */
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(tb);
        } else if (type != NULL) {
            PyErr_Restore(type, value, tb);
        } else {
            result = Py_None;
            Py_INCREF(result);
        }
    }
    Py_DECREF(pending);
    Py_DECREF(spent);
    return result;
}

/* stream.synchronize(), the compiled method itself for a StreamCore */
PyObject *
synchronize_stream(PyObject *stream)
{
    PyObject *r = PyObject_TypeCheck(stream, &StreamCoreType)
                      ? stream_synchronize(stream, NULL)
                      : PyObject_CallMethodNoArgs(stream, s_synchronize);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
}

static PyObject *last_pool_device, *last_pool_key;  /* the pool key of the last device */

/* driver.stream.next_stream: the next stream of a full pool, keyed by (kind, index), else
 * the Python function */
PyObject *
next_stream(PyObject *device)
{
    if (device != last_pool_device) {
        PyObject *kind = PyObject_GetAttr(device, s_kind);
        PyObject *index = kind ? PyObject_GetAttr(device, s_index) : NULL;
        PyObject *key = index ? PyTuple_Pack(2, kind, index) : NULL;
        Py_XDECREF(kind);
        Py_XDECREF(index);
        if (key == NULL)
            return NULL;
        field_set(&last_pool_device, device);
        Py_XSETREF(last_pool_key, key);
    }
    PyObject *cycle = PyDict_GetItemWithError(config.pool_cycles, last_pool_key);
    if (cycle != NULL) {
        PyObject *stream = PyIter_Next(cycle);
        if (stream != NULL || PyErr_Occurred())
            return stream;
    } else if (PyErr_Occurred()) {
        return NULL;
    }
    return PyObject_CallOneArg(config.next_stream, device);
}

static PyMemberDef stream_members[] = {
    FIELDS_MEMBER("device", STREAM_DEVICE), FIELDS_MEMBER("_pending", STREAM_PENDING),
    FIELDS_MEMBER("_spent", STREAM_SPENT),
    FIELDS_MEMBER("_native_address", STREAM_NATIVE_ADDRESS),
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef stream_methods[] = {
    {"on_complete", (PyCFunction)(void (*)(void))stream_on_complete, METH_FASTCALL,
     "Release `loans` and end the borrow of `borrowed_partitions` when this stream is next "
     "synchronized (the point where the host knows the work is complete)."},
    {"synchronize", stream_synchronize, METH_NOARGS,
     "Wait until all work enqueued on this stream is complete, then end the loans of the "
     "work enqueued before the wait began."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject StreamCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tilesafe._fastpath.StreamCore",
    .tp_basicsize = FIELDS_SIZE(STREAM_FIELDS),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .tp_doc = "What a stream keeps for the host (the base of tilesafe.Stream).",
    .tp_new = PyType_GenericNew,
    .tp_traverse = stream_traverse,
    .tp_clear = stream_clear,
    .tp_dealloc = stream_dealloc,
    .tp_members = stream_members,
    .tp_methods = stream_methods,
};
