/* tilesafe.driver._ledger: the ownership ledger's lock (driver.ledger.LEDGER) in C.
 *
 * A re-entrant lock with the interface of threading.RLock that tilesafe uses (acquire(),
 * release(), the context manager protocol), whose acquire and release take no arguments to
 * parse, and whose state the compiled fast path (tilesafe._fastpath) takes without a Python
 * call: every launch takes it once. Python's stable ABI; without a C compiler driver/ledger.py
 * uses threading.RLock.
 *
 * The GIL guards the lock's state: owner, count and waiters are only read and written by a
 * thread holding the GIL, so taking a free ledger is two stores and no system call. A thread
 * that finds the ledger held by another waits, with the GIL released, on `wakeup` (a lock
 * kept locked, released by the owner's last release when someone waits); the wait is timed,
 * so a wakeup lost between two releases only delays it by a millisecond. (Free-threaded
 * builds cannot build the stable ABI, so they use threading.RLock.)
 */
#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x030A0000
#include <Python.h>
#include <pythread.h>

#define WAIT_MICROSECONDS 1000

typedef struct {
    PyObject_HEAD
    PyThread_type_lock wakeup;
    unsigned long owner;  /* the owning thread's ident while count > 0 */
    unsigned long count;
    unsigned long waiters;
} Ledger;

static int
ledger_init(PyObject *self, PyObject *args, PyObject *kwargs)
{
    Ledger *ledger = (Ledger *)self;
    if (PyTuple_Size(args) != 0 || (kwargs != NULL && PyDict_Size(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "Ledger() takes no arguments");
        return -1;
    }
    if (ledger->wakeup == NULL) {
        ledger->wakeup = PyThread_allocate_lock();
        if (ledger->wakeup == NULL) {
            PyErr_SetString(PyExc_MemoryError, "cannot allocate the ledger's lock");
            return -1;
        }
        PyThread_acquire_lock(ledger->wakeup, NOWAIT_LOCK);  /* kept locked */
    }
    return 0;
}

static void
ledger_dealloc(PyObject *self)
{
    Ledger *ledger = (Ledger *)self;
    PyTypeObject *type = Py_TYPE(self);
    if (ledger->wakeup != NULL) {
        PyThread_release_lock(ledger->wakeup);
        PyThread_free_lock(ledger->wakeup);
    }
    freefunc free_object = (freefunc)PyType_GetSlot(type, Py_tp_free);
    free_object(self);
    Py_DECREF(type);
}

static PyObject *
ledger_acquire(PyObject *self, PyObject *unused)
{
    Ledger *ledger = (Ledger *)self;
    unsigned long me = PyThread_get_thread_ident();
    if (ledger->wakeup == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the ledger was not initialized");
        return NULL;
    }
    if (ledger->count > 0 && ledger->owner == me) {
        ledger->count++;
        Py_RETURN_TRUE;
    }
    while (ledger->count > 0) {  /* another thread holds it */
        ledger->waiters++;
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock_timed(ledger->wakeup, WAIT_MICROSECONDS, 0);
        Py_END_ALLOW_THREADS
        ledger->waiters--;
    }
    ledger->owner = me;
    ledger->count = 1;
    Py_RETURN_TRUE;
}

static PyObject *
ledger_release(PyObject *self, PyObject *unused)
{
    Ledger *ledger = (Ledger *)self;
    if (ledger->count == 0 || ledger->owner != PyThread_get_thread_ident()) {
        PyErr_SetString(PyExc_RuntimeError, "cannot release the ledger: this thread does not "
                        "hold it");
        return NULL;
    }
    if (--ledger->count == 0) {
        ledger->owner = 0;
        if (ledger->waiters > 0)
            PyThread_release_lock(ledger->wakeup);  /* wakes one waiter, which locks it again */
    }
    Py_RETURN_NONE;
}

static PyObject *
ledger_exit(PyObject *self, PyObject *args)
{
    return ledger_release(self, NULL);
}

static PyObject *
ledger_is_owned(PyObject *self, PyObject *unused)
{
    Ledger *ledger = (Ledger *)self;
    return PyBool_FromLong(ledger->count > 0 && ledger->owner == PyThread_get_thread_ident());
}

static PyMethodDef ledger_methods[] = {
    {"acquire", ledger_acquire, METH_NOARGS,
     "Take the ledger (waiting, with the GIL released, while another thread holds it)."},
    {"release", ledger_release, METH_NOARGS, "Give one level of the ledger back."},
    {"__enter__", ledger_acquire, METH_NOARGS, NULL},
    {"__exit__", ledger_exit, METH_VARARGS, NULL},
    {"_is_owned", ledger_is_owned, METH_NOARGS, "Whether this thread holds the ledger."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot ledger_slots[] = {
    {Py_tp_doc, "The ownership ledger's re-entrant lock (see driver.ledger.LEDGER)."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, ledger_init},
    {Py_tp_dealloc, ledger_dealloc},
    {Py_tp_methods, ledger_methods},
    {0, NULL},
};

static PyType_Spec ledger_spec = {
    "tilesafe.driver._ledger.Ledger", sizeof(Ledger), 0, Py_TPFLAGS_DEFAULT, ledger_slots,
};

/* For the compiled fast path (tilesafe._fastpath): the C functions behind acquire and release. */
static PyObject *
ledger_functions(PyObject *module, PyObject *unused)
{
    return Py_BuildValue("(NN)", PyLong_FromVoidPtr((void *)ledger_acquire),
                         PyLong_FromVoidPtr((void *)ledger_release));
}

static PyMethodDef module_methods[] = {
    {"functions", ledger_functions, METH_NOARGS,
     "The addresses of the C acquire and release functions (for the compiled launch path)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_ledger", "The ownership ledger's lock in C.", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__ledger(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    PyObject *type = PyType_FromSpec(&ledger_spec);
    if (type == NULL || PyModule_AddObject(m, "Ledger", type) < 0) {
        Py_XDECREF(type);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
