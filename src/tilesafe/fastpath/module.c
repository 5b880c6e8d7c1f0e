/* tilesafe._fastpath: the compiled fast path of a repeated launch (module set-up, the
 * configuration each layer hands over, the ledger's lock, the user's call site).
 *
 * A launch that repeats the argument objects of an earlier one (a cached launch plan) needs
 * no validation, only its loans; calling the kernel, driving the op (sync, a .then chain, an
 * await) and waiting for the stream then run here without Python bytecode. The objects on
 * that path are this module's types (fastpath.h), and the Python classes derive from them:
 * no method is swapped and no other class's storage is read. Every case the fast path does
 * not handle (a first launch, a cpu device, a pending argument, an op driven twice, a
 * conflicting loan, a failure) goes to the Python method that defines it, before anything
 * was done. Each type has a Python definition of the same name (driver/ledger.py, ...), used
 * where this module was not built or TILESAFE_COMPILED_PATH=0.
 */
#include "fastpath.h"

Config config;
int configured = 0;

PyObject *s_stream, *s_where, *s_index, *s_execute, *s_launch, *s_run_prepared,
    *s_synchronize, *s_native_address, *s_kind, *s_driven, *s_consume, *s_only_enqueues,
    *s_then_how, *s_spend, *s_spend_why, *s_cuda, *s_unknown, *s_fn_launch, *s_fn_launch_ex,
    *s_fn_sync, *s_driver_launch, *s_on_complete, *s_perform, *s_platform, *s_enqueues_only,
    *s_early_epoch, *s_empty_tuple;

/* ---- fields ------------------------------------------------------------------------------ */

void
field_set(PyObject **slot, PyObject *value)
{
    PyObject *old = *slot;
    Py_XINCREF(value);
    *slot = value;
    Py_XDECREF(old);
}

int
fields_traverse(PyObject **f, int n, visitproc visit, void *arg)
{
    for (int i = 0; i < n; i++)
        Py_VISIT(f[i]);
    return 0;
}

void
fields_clear(PyObject **f, int n)
{
    for (int i = 0; i < n; i++)
        Py_CLEAR(f[i]);
}

/* ---- configuration ------------------------------------------------------------------------ */

typedef struct {
    const char *name;
    PyObject **target;
} ConfigKey;

static ConfigKey keys[] = {
    {"epoch", &config.epoch}, {"ledger", &config.ledger}, {"take_loans", &config.take_loans},
    {"driver_calls", &config.driver_calls}, {"fail", &config.fail},
    {"thread", &config.thread}, {"context_switches", &config.context_switches},
    {"current", &config.current}, {"pool_cycles", &config.pool_cycles},
    {"next_stream", &config.next_stream}, {"DeviceOp", &config.DeviceOp},
    {"drive", &config.drive}, {"ChainRest", &config.ChainRest},
    {"deviceop_sync", &config.deviceop_sync}, {"deviceop_execute", &config.deviceop_execute},
    {"Tensor", &config.Tensor}, {"Partition", &config.Partition},
    {"holders", &config.holders}, {"holder", &config.holder}, {"LaunchOp", &config.LaunchOp},
    {NULL, NULL},
};

/* When the ledger is driver._ledger.Ledger: its C acquire and release, called directly. */
typedef PyObject *(*LedgerFunction)(PyObject *, PyObject *);
static LedgerFunction ledger_acquire_c, ledger_release_c;
static PyObject *ledger_acquire_py, *ledger_release_py;

int
ensure_configured(void)
{
    if (configured)
        return 0;
    for (ConfigKey *key = keys; key->name != NULL; key++) {
        if (*key->target == NULL) {
            PyErr_Format(PyExc_RuntimeError, "tilesafe._fastpath: '%s' was not configured "
                         "(import tilesafe before using its parts)", key->name);
            return -1;
        }
    }
    configured = 1;
    return 0;
}

PyDoc_STRVAR(configure_doc,
"configure(**objects)\n\n"
"Hand over what the fast path uses of a layer (each layer calls it when imported; see\n"
"fastpath.h, Config). `ledger_functions` gives the C acquire and release of the ledger.");

static PyObject *
configure(PyObject *module, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) != 0 || kwargs == NULL) {
        PyErr_SetString(PyExc_TypeError, "configure takes keyword arguments only");
        return NULL;
    }
    PyObject *name, *value;
    Py_ssize_t position = 0;
    while (PyDict_Next(kwargs, &position, &name, &value)) {
        if (PyUnicode_CompareWithASCIIString(name, "ledger_functions") == 0) {
            ledger_acquire_c = ledger_release_c = NULL;
            if (value == Py_None)
                continue;
            if (!PyTuple_Check(value) || PyTuple_GET_SIZE(value) != 2) {
                PyErr_SetString(PyExc_TypeError, "ledger_functions is (acquire, release)");
                return NULL;
            }
            ledger_acquire_c = (LedgerFunction)PyLong_AsVoidPtr(PyTuple_GET_ITEM(value, 0));
            ledger_release_c = (LedgerFunction)PyLong_AsVoidPtr(PyTuple_GET_ITEM(value, 1));
            if (PyErr_Occurred())
                return NULL;
            continue;
        }
        ConfigKey *key = keys;
        while (key->name != NULL && PyUnicode_CompareWithASCIIString(name, key->name) != 0)
            key++;
        if (key->name == NULL) {
            PyErr_Format(PyExc_TypeError, "configure: unknown name %R", name);
            return NULL;
        }
        field_set(key->target, value);
        if (key->target == &config.ledger) {
            Py_XSETREF(ledger_acquire_py, PyObject_GetAttrString(value, "acquire"));
            Py_XSETREF(ledger_release_py, PyObject_GetAttrString(value, "release"));
            if (ledger_acquire_py == NULL || ledger_release_py == NULL)
                return NULL;
        } else if (key->target == &config.driver_calls) {
            Py_XSETREF(config.driver_calls_dict, PyObject_GenericGetDict(value, NULL));
            if (config.driver_calls_dict == NULL)
                return NULL;
        }
    }
    configured = 0;  /* checked again at the next use */
    Py_RETURN_NONE;
}

/* ---- the ledger's lock -------------------------------------------------------------------- */

int
ledger_acquire(void)
{
    PyObject *r = ledger_acquire_c ? ledger_acquire_c(config.ledger, NULL)
                                   : PyObject_CallNoArgs(ledger_acquire_py);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

void
ledger_release(void)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);  /* releasing must not lose a pending error */
    PyObject *r = ledger_release_c ? ledger_release_c(config.ledger, NULL)
                                   : PyObject_CallNoArgs(ledger_release_py);
    if (r == NULL)
        PyErr_WriteUnraisable(config.ledger);
    Py_XDECREF(r);
    PyErr_Restore(type, value, tb);
}

/* ---- helpers -------------------------------------------------------------------------- */

/* getattr(local, name, None), a new reference */
PyObject *
local_get(PyObject *local, PyObject *name)
{
    PyObject *value;
#if PY_VERSION_HEX >= 0x030D0000
    if (PyObject_GetOptionalAttr(local, name, &value) < 0)
        return NULL;
#else
    if (_PyObject_LookupAttr(local, name, &value) < 0)
        return NULL;
#endif
    if (value == NULL)
        Py_RETURN_NONE;
    return value;
}

/* getattr(driver.cuda._DRIVER_CALLS, name): its calls are instance attributes (a class
 * __getattr__ chooses them on first use), so the instance dict is looked at first. */
PyObject *
driver_call(PyObject *name)
{
    PyObject *call = PyDict_GetItemWithError(config.driver_calls_dict, name);
    if (call != NULL) {
        Py_INCREF(call);
        return call;
    }
    return PyErr_Occurred() ? NULL : PyObject_GetAttr(config.driver_calls, name);
}

/* driver.cuda._fail(err, what): raise the CudaError of a failed driver call */
PyObject *
fail(PyObject *err, PyObject *what)
{
    PyObject *r = PyObject_CallFunctionObjArgs(config.fail, err, what, NULL);
    Py_XDECREF(r);
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "a driver call failed");
    return NULL;
}

/* ---- caller_location ------------------------------------------------------------------- */

static PyObject *internal_files, *locations, *is_internal_fn, *location_type;

static PyObject *
location_of(PyObject *filename, int line)
{
    PyObject *number = PyLong_FromLong(line);
    PyObject *key = number ? PyTuple_Pack(2, filename, number) : NULL;
    if (key == NULL) {
        Py_XDECREF(number);
        return NULL;
    }
    PyObject *location = PyDict_GetItemWithError(locations, key);
    if (location != NULL) {
        Py_INCREF(location);
    } else if (!PyErr_Occurred()) {
        location = PyObject_CallFunctionObjArgs(location_type, filename, number, NULL);
        if (location != NULL && PyDict_SetItem(locations, key, location) < 0)
            Py_CLEAR(location);
    }
    Py_DECREF(key);
    Py_DECREF(number);
    return location;
}

/* What a frame at (code, instruction) resolved to: its Location, or NULL for tilesafe's own
 * code. Direct-mapped; an entry holds its code object, so the address is not reused. */
#define SITES 512
static struct {
    PyCodeObject *code;
    int lasti;
    PyObject *location;
} sites[SITES];

static size_t
site_of(PyCodeObject *code, int lasti)
{
    return (((size_t)code >> 4) ^ (size_t)lasti * 2654435761u) % SITES;
}

static void
remember_site(PyCodeObject *code, int lasti, PyObject *location)
{
    size_t at = site_of(code, lasti);
    PyCodeObject *old_code = sites[at].code;
    PyObject *old_location = sites[at].location;
    Py_INCREF(code);
    Py_XINCREF(location);
    sites[at].code = code;
    sites[at].lasti = lasti;
    sites[at].location = location;
    Py_XDECREF(old_code);
    Py_XDECREF(old_location);
}

/* The file:line of the innermost frame that is not tilesafe's own code (_callsite.py's walk) */
PyObject *
caller_location(void)
{
    PyFrameObject *frame = PyEval_GetFrame();
    Py_XINCREF(frame);
    while (frame != NULL) {
        PyCodeObject *code = PyFrame_GetCode(frame);
        int lasti = PyFrame_GetLasti(frame);
        size_t at = site_of(code, lasti);
        if (sites[at].code == code && sites[at].lasti == lasti) {
            PyObject *site = sites[at].location;
            Py_DECREF(code);
            if (site != NULL) {
                Py_DECREF(frame);
                Py_INCREF(site);
                return site;
            }
            PyFrameObject *back = PyFrame_GetBack(frame);
            Py_DECREF(frame);
            frame = back;
            continue;
        }
        PyObject *filename = code->co_filename;
        Py_INCREF(filename);
        PyObject *flag = PyDict_GetItemWithError(internal_files, filename);
        int internal;
        if (flag != NULL) {
            internal = PyObject_IsTrue(flag);
        } else if (PyErr_Occurred()) {
            internal = -1;
        } else {
            PyObject *answer = PyObject_CallOneArg(is_internal_fn, filename);
            internal = answer ? PyObject_IsTrue(answer) : -1;
            Py_XDECREF(answer);
        }
        if (internal < 0) {
            Py_DECREF(code);
            Py_DECREF(filename);
            Py_DECREF(frame);
            return NULL;
        }
        if (!internal) {
            PyObject *location = location_of(filename, PyFrame_GetLineNumber(frame));
            if (location != NULL)
                remember_site(code, lasti, location);
            Py_DECREF(code);
            Py_DECREF(filename);
            Py_DECREF(frame);
            return location;
        }
        remember_site(code, lasti, NULL);
        Py_DECREF(code);
        Py_DECREF(filename);
        PyFrameObject *back = PyFrame_GetBack(frame);
        Py_DECREF(frame);
        frame = back;
    }
    return PyObject_CallFunction(location_type, "Oi", s_unknown, 0);
}

PyDoc_STRVAR(setup_callsite_doc,
"setup_callsite(internal_files, locations, is_internal, Location)\n\n"
"The caches and helpers of tilesafe._callsite that caller_location() shares.");

static PyObject *
setup_callsite(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyDict_Check(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "setup_callsite(internal_files: dict, locations: "
                        "dict, is_internal, Location)");
        return NULL;
    }
    PyObject **targets[4] = {&internal_files, &locations, &is_internal_fn, &location_type};
    for (int i = 0; i < 4; i++)
        field_set(targets[i], args[i]);
    Py_RETURN_NONE;
}

static PyObject *
py_caller_location(PyObject *module, PyObject *unused)
{
    if (location_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tilesafe._fastpath: setup_callsite() first");
        return NULL;
    }
    return caller_location();
}

/* ---- the module ------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"shared_or_new_loans", (PyCFunction)(void (*)(void))py_shared_or_new_loans, METH_FASTCALL,
     "driver.ledger.shared_or_new_loans in C: the live loans of repeated work on the same "
     "stream, one more use each, or new loans of `borrows`."},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     configure_doc},
    {"setup_callsite", (PyCFunction)(void (*)(void))setup_callsite, METH_FASTCALL,
     setup_callsite_doc},
    {"caller_location", py_caller_location, METH_NOARGS,
     "The file:line of the innermost frame that is not tilesafe's own code."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT, "tilesafe._fastpath",
    "The compiled fast path of a repeated launch (see src/tilesafe/fastpath/module.c).", -1,
    methods, NULL, NULL, NULL, NULL,
};

static int
intern(PyObject **out, const char *text)
{
    if (*out == NULL)
        *out = PyUnicode_InternFromString(text);
    return *out ? 0 : -1;
}

PyMODINIT_FUNC
PyInit__fastpath(void)
{
    if (intern(&s_stream, "stream") || intern(&s_where, "where") || intern(&s_index, "index") ||
        intern(&s_execute, "_execute") || intern(&s_launch, "launch") ||
        intern(&s_run_prepared, "_run_prepared") || intern(&s_synchronize, "synchronize") ||
        intern(&s_native_address, "native_address") || intern(&s_kind, "kind") ||
        intern(&s_driven, "driven") || intern(&s_consume, "_consume") ||
        intern(&s_only_enqueues, "_only_enqueues") ||
        intern(&s_then_how, "extended with .then()") || intern(&s_spend, "_spend") ||
        intern(&s_spend_why, "was borrowed by a launch that completed") ||
        intern(&s_cuda, "cuda") || intern(&s_unknown, "<unknown>") ||
        intern(&s_fn_launch, "cuLaunchKernel") || intern(&s_fn_launch_ex, "cuLaunchKernelEx") ||
        intern(&s_fn_sync, "cuStreamSynchronize") ||
        intern(&s_driver_launch, "driver_launch") || intern(&s_on_complete, "on_complete") ||
        intern(&s_perform, "_perform") || intern(&s_platform, "_platform") ||
        intern(&s_enqueues_only, "enqueues_only") || intern(&s_early_epoch, "_early_epoch"))
        return NULL;
    if (s_empty_tuple == NULL && (s_empty_tuple = PyTuple_New(0)) == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module_definition);
    if (m == NULL)
        return NULL;
    struct {
        const char *name;
        PyTypeObject *type;
    } types[] = {
        {"Loan", &LoanType}, {"StreamCore", &StreamCoreType}, {"OpCore", &OpCoreType},
        {"ChainCore", &ChainCoreType}, {"LaunchPlan", &LaunchPlanType},
        {"PreparedLaunch", &PreparedLaunchType}, {"LaunchCore", &LaunchCoreType},
        {"KernelCore", &KernelCoreType}, {NULL, NULL},
    };
    for (int i = 0; types[i].name != NULL; i++) {
        if (PyType_Ready(types[i].type) < 0) {
            Py_DECREF(m);
            return NULL;
        }
        Py_INCREF(types[i].type);
        if (PyModule_AddObject(m, types[i].name, (PyObject *)types[i].type) < 0) {
            Py_DECREF(types[i].type);
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
