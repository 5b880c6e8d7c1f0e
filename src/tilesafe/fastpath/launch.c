/* Launches (launch/op.py, kernel.py): a launch from a cached plan (its loans, the driver
 * call, the recovery of its arguments), LaunchCore (a launch op: sync, _execute,
 * _only_enqueues, and giving the loans back when dropped undriven) and KernelCore (a kernel's
 * call: a launch op from a cached plan). The plans themselves are plan.c's. */
#include "fastpath.h"

/* ---- a launch from a plan ---------------------------------------------------------------- */

static PyObject *
holder_of(PyObject *kernel_name)
{
    PyObject *holder = PyDict_GetItemWithError(config.holders, kernel_name);
    if (holder != NULL) {
        Py_INCREF(holder);
        return holder;
    }
    return PyErr_Occurred() ? NULL : PyObject_CallOneArg(config.holder, kernel_name);
}

/* The plan cached under the key (ids of args, None) -- launch.checks._prepare's key for a
 * launch without an explicit grid -- found by comparing ids, without building the key. A
 * borrowed reference, or NULL (an error set or not). */
static PyObject *
find_plan(PyObject *plans, PyObject *args)
{
    Py_ssize_t nargs = PyTuple_GET_SIZE(args), position = 0;
    PyObject *key, *plan;
    while (PyDict_Next(plans, &position, &key, &plan)) {
        if (!PyTuple_Check(key) || PyTuple_GET_SIZE(key) != 2 ||
            PyTuple_GET_ITEM(key, 1) != Py_None)
            continue;
        PyObject *ids = PyTuple_GET_ITEM(key, 0);
        if (!PyTuple_Check(ids) || PyTuple_GET_SIZE(ids) != nargs)
            continue;
        Py_ssize_t i = 0;
        for (; i < nargs; i++) {
            PyObject *id = PyTuple_GET_ITEM(ids, i);
            if (!PyLong_CheckExact(id) || PyLong_AsVoidPtr(id) != PyTuple_GET_ITEM(args, i))
                break;
        }
        if (PyErr_Occurred())
            return NULL;
        if (i == nargs)
            return plan;
    }
    return NULL;
}

/* The prepared launch of a cached plan whose validation is still current, with its loans
 * (launch.checks._prepare's hit), or None on a miss; the caller holds the ledger. */
static PyObject *
prepare_from_plan(PyObject *kernel, PyObject *args, PyObject *where, PyObject *stream)
{
    KernelObject *k = (KernelObject *)kernel;
    PyObject *plans = k->f[KERNEL_PLANS];
    if (plans == NULL || !PyDict_Check(plans))
        Py_RETURN_NONE;
    PyObject *plan = find_plan(plans, args);
    if (plan == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    if (Py_TYPE(plan) != &LaunchPlanType)
        Py_RETURN_NONE;
    int current = PyObject_RichCompareBool(FIELD(plan, PLAN_EPOCH),
                                           PyList_GET_ITEM(config.epoch, 0), Py_EQ);
    if (current <= 0) {
        if (current < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    Py_INCREF(plan);
    PyObject *holder = holder_of(k->f[KERNEL_NAME]);
    PyObject *loans = holder ? shared_or_new_loans(&FIELD(plan, PLAN_STREAM_LOANS),
                                                   FIELD(plan, PLAN_BORROWS), holder, where,
                                                   stream) : NULL;
    Py_XDECREF(holder);
    PyObject *prepared = loans ? PreparedLaunchType.tp_alloc(&PreparedLaunchType, 0) : NULL;
    if (prepared == NULL) {
        Py_XDECREF(loans);
        Py_DECREF(plan);
        return NULL;
    }
    field_set(&FIELD(prepared, PREP_SPEC), FIELD(plan, PLAN_SPEC));
    field_set(&FIELD(prepared, PREP_GRID), FIELD(plan, PLAN_GRID));
    field_set(&FIELD(prepared, PREP_ARGS), FIELD(plan, PLAN_ARGS));
    FIELD(prepared, PREP_LOANS) = loans;
    field_set(&FIELD(prepared, PREP_WHERE), where);
    field_set(&FIELD(prepared, PREP_DEVICE), FIELD(plan, PLAN_DEVICE));
    FIELD(prepared, PREP_PLAN) = plan;
    return prepared;
}

/* The driver launch of a prepared launch that is ready to enqueue from here (a borrowed
 * tuple), or NULL with *failed 0 when the Python path must run it. ``thread_index``:
 * driver.cuda._THREAD.index when the caller knows it (borrowed), else NULL. */
static PyObject *
ready_driver_launch(PyObject *prepared, PyObject *stream, PyObject *thread_index, int *failed)
{
    *failed = 0;
    PyObject *device = FIELD(prepared, PREP_DEVICE), *plan = FIELD(prepared, PREP_PLAN);
    if (!PyObject_TypeCheck(stream, &StreamCoreType) || plan == NULL ||
        Py_TYPE(plan) != &LaunchPlanType || FIELD(plan, PLAN_DRIVER) == NULL ||
        FIELD(plan, PLAN_DRIVER) == Py_None || FIELD(stream, STREAM_NATIVE_ADDRESS) == NULL ||
        !PyLong_Check(FIELD(stream, STREAM_NATIVE_ADDRESS)))
        return NULL;
    PyObject *stream_device = FIELD(stream, STREAM_DEVICE);
    if (stream_device != device) {  /* equal devices need not be one object */
        int same = PyObject_RichCompareBool(stream_device, device, Py_EQ);
        if (same <= 0) {
            *failed = same < 0;
            return NULL;
        }
    }
    int cuda = is_cuda(device);
    if (cuda <= 0) {
        *failed = cuda < 0;
        return NULL;
    }
    PyObject *driver = FIELD(plan, PLAN_DRIVER);
    /* the device's context must be current on this thread (driver.cuda.launch_packed) */
    PyObject *index = thread_index;
    if (index != NULL)
        Py_INCREF(index);
    else if ((index = local_get(config.thread, s_index)) == NULL) {
        *failed = 1;
        return NULL;
    }
    int same = PyObject_RichCompareBool(index, PyTuple_GET_ITEM(driver, DRIVER_INDEX), Py_EQ);
    Py_DECREF(index);
    if (same <= 0) {
        *failed = same < 0;
        return NULL;
    }
    return driver;
}

/* launch.checks.recover for a launch with a plan: the loans are the stream's until its next
 * synchronize, and the plan's borrowed partitions are spent then */
static int
recover(PyObject *prepared, PyObject *stream)
{
    PyObject *loans = FIELD(prepared, PREP_LOANS);
    PyObject *borrowed = FIELD(FIELD(prepared, PREP_PLAN), PLAN_BORROWED);
    if (loans == NULL || !PyList_Check(loans)) {
        PyErr_SetString(PyExc_TypeError, "recover: a launch's loans are not a list");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(loans); i++) {
        PyObject *loan = PyList_GET_ITEM(loans, i);
        if (Py_TYPE(loan) == &LoanType)
            field_set(&((LoanObject *)loan)->f[LOAN_STREAM], stream);
        else if (PyObject_SetAttr(loan, s_stream, stream) < 0)
            return -1;
    }
    return register_completion(stream, loans, borrowed, FIELD(prepared, PREP_WHERE));
}

/* The error being raised carries the launch's arguments back (err.arguments), as
 * Kernel._run_prepared's does. */
static void
hand_back(PyObject *args)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL && args != NULL && PyObject_SetAttrString(value, "arguments", args) < 0)
        PyErr_Clear();
    if (tb != NULL && value != NULL)
        PyException_SetTraceback(value, tb);
    PyErr_Restore(type, value, tb);
}

static int
count_launch(PyObject *kernel)
{
    if (PyObject_TypeCheck(kernel, &KernelCoreType)) {
        ((KernelObject *)kernel)->launch_count++;
        return 0;
    }
    PyErr_SetString(PyExc_TypeError, "a launch's kernel is not a KernelCore");
    return -1;
}

/* Kernel._run_prepared(prepared, stream): one driver call when the launch is ready to
 * enqueue from here, else the Python method. */
static PyObject *
run_prepared(PyObject *kernel, PyObject *prepared, PyObject *stream, PyObject *thread_index)
{
    int failed;
    PyObject *driver = ready_driver_launch(prepared, stream, thread_index, &failed);
    if (driver == NULL) {
        if (failed)
            return NULL;
        return PyObject_CallMethodObjArgs(kernel, s_run_prepared, prepared, stream, NULL);
    }
    PyObject *launch = driver_call(s_launch);
    if (launch == NULL)
        return NULL;
    PyObject *call[7] = {PyTuple_GET_ITEM(driver, DRIVER_FUNCTION),
                         PyTuple_GET_ITEM(driver, DRIVER_GX), PyTuple_GET_ITEM(driver, DRIVER_GY),
                         PyTuple_GET_ITEM(driver, DRIVER_GZ),
                         FIELD(stream, STREAM_NATIVE_ADDRESS),
                         PyTuple_GET_ITEM(driver, DRIVER_ADDRESS),
                         PyTuple_GET_ITEM(driver, DRIVER_PROGRAMMATIC)};
    PyObject *err = PyObject_Vectorcall(launch, call, 7, NULL);
    Py_DECREF(launch);
    int ok = 0;
    if (err != NULL) {
        ok = PyObject_IsTrue(err) == 0;
        if (ok)
            ok = count_launch(kernel) == 0;
    }
    /* the loans are registered whatever happened (Python: finally: recover) */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    int recovered = recover(prepared, stream);
    if (type != NULL) {
        if (recovered < 0)
            PyErr_Clear();
        PyErr_Restore(type, value, tb);
    }
    if (err != NULL && ok && recovered == 0) {  /* what launch.checks.recover hands back */
        Py_DECREF(err);
        PyObject *plan = FIELD(prepared, PREP_PLAN);  /* no plan: the arguments, as given */
        PyObject *result = plan != Py_None ? FIELD(plan, PLAN_RESULT) : FIELD(prepared, PREP_ARGS);
        Py_INCREF(result);
        return result;
    }
    if (err != NULL && !PyErr_Occurred()) {  /* the driver refused: a CudaError */
        int programmatic = PyObject_IsTrue(PyTuple_GET_ITEM(driver, DRIVER_PROGRAMMATIC));
        fail(err, programmatic > 0 ? s_fn_launch_ex : s_fn_launch);
    }
    Py_XDECREF(err);
    hand_back(FIELD(prepared, PREP_ARGS));
    return NULL;
}

/* ---- LaunchCore -------------------------------------------------------------------------- */

static int
launch_traverse(PyObject *self, visitproc visit, void *arg)
{
    return op_traverse_n(self, visit, arg, LAUNCH_FIELDS);
}

static int
launch_clear(PyObject *self)
{
    fields_clear(((OpObject *)self)->f, LAUNCH_FIELDS);
    return 0;
}

static void
launch_dealloc(PyObject *self)
{
    if (PyObject_CallFinalizerFromDealloc(self) < 0)
        return;  /* resurrected */
    op_dealloc_n(self, LAUNCH_FIELDS);
}

static int
is_prepared(PyObject *value)
{
    return value != NULL && Py_TYPE(value) == &PreparedLaunchType;
}

static int
undriven(PyObject *op)
{
    PyObject *driven = OPFIELD(op, OP_DRIVEN_AT);
    return driven == NULL || driven == Py_None;
}

/* whether a launch validated inside a pipeline step was validated at the current ownership
 * epoch (its ``_early_epoch``); -1 with an error set */
static int
validated_at_this_epoch(PyObject *op)
{
    PyObject *epoch = PyObject_GetAttr(op, s_early_epoch);
    if (epoch == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return -1;
        PyErr_Clear();
        return 0;
    }
    int same = PyObject_RichCompareBool(epoch, PyList_GET_ITEM(config.epoch, 0), Py_EQ);
    Py_DECREF(epoch);
    return same;
}

/* LaunchOp._execute with the drive's location already looked up (``drive_where``, borrowed:
 * _DRIVE.where, or None outside a drive) and maybe the thread's context */
PyObject *
execute_launch(PyObject *op, PyObject *stream, PyObject *drive_where, PyObject *thread_index)
{
    if (!undriven(op))  /* DeviceOp._execute raises the error of a second drive */
        return PyObject_CallFunctionObjArgs(config.deviceop_execute, op, stream, NULL);
    PyObject *where = drive_where;
    int given = PyObject_IsTrue(where);
    if (given < 0)
        return NULL;
    if (given)
        Py_INCREF(where);
    else if ((where = caller_location()) == NULL)
        return NULL;
    if (!undriven(op)) {  /* driven by another thread meanwhile (caller_location runs Python):
                           * the check and the mark below run with no Python code between */
        Py_DECREF(where);
        return PyObject_CallFunctionObjArgs(config.deviceop_execute, op, stream, NULL);
    }
    int marked = mark_driven(op, s_driven, where);
    Py_DECREF(where);
    if (marked < 0)
        return NULL;
    PyObject *prepared = OPFIELD(op, LAUNCH_EARLY), *early_stream = OPFIELD(op,
                                                                            LAUNCH_EARLY_STREAM);
    if (!is_prepared(prepared) ||
        (early_stream != NULL && early_stream != Py_None && early_stream != stream))
        return PyObject_CallMethodOneArg(op, s_perform, stream);
    if (early_stream != NULL && early_stream != Py_None) {
        /* validated inside a pipeline step: LaunchOp._perform checks again where the
         * ownership epoch changed since */
        int same = validated_at_this_epoch(op);
        if (same < 0)
            return NULL;
        if (!same)
            return PyObject_CallMethodOneArg(op, s_perform, stream);
    }
    return run_prepared(OPFIELD(op, LAUNCH_KERNEL), prepared, stream, thread_index);
}

static PyObject *
launch_execute(PyObject *op, PyObject *stream)
{
    if (ensure_configured() < 0)
        return NULL;
    PyObject *where = local_get(config.drive, s_where);
    if (where == NULL)
        return NULL;
    PyObject *result = execute_launch(op, stream, where, NULL);
    Py_DECREF(where);
    return result;
}

/* LaunchCore.sync: a launch validated at creation runs on the device's next pool stream and
 * is waited for; any other goes through DeviceOp.sync */
static PyObject *
launch_sync(PyObject *op, PyObject *unused)
{
    if (ensure_configured() < 0)
        return NULL;
    PyObject *prepared = OPFIELD(op, LAUNCH_EARLY), *early_stream = OPFIELD(op,
                                                                            LAUNCH_EARLY_STREAM);
    if (!is_prepared(prepared) || !undriven(op) ||
        (early_stream != NULL && early_stream != Py_None))
        return PyObject_CallOneArg(config.deviceop_sync, op);
    Py_INCREF(prepared);
    PyObject *stream = next_stream(OPFIELD(op, OP_DEVICE));
    PyObject *where = stream ? caller_location() : NULL;
    if (where != NULL && !undriven(op)) {  /* driven by another thread meanwhile: the
                                            * DeviceOp path raises the second drive's error */
        Py_DECREF(where);
        Py_DECREF(stream);
        Py_DECREF(prepared);
        return PyObject_CallOneArg(config.deviceop_sync, op);
    }
    if (where == NULL || mark_driven(op, s_driven, where) < 0) {
        Py_XDECREF(where);
        Py_XDECREF(stream);
        Py_DECREF(prepared);
        return NULL;
    }
    Py_DECREF(where);
    PyObject *result = run_prepared(OPFIELD(op, LAUNCH_KERNEL), prepared, stream, NULL);
    Py_DECREF(prepared);
    /* finally: stream.synchronize() (its error, if any, wins as in Python) */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *synced = synchronize_stream(stream);
    Py_DECREF(stream);
    if (synced == NULL) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        Py_XDECREF(result);
        return NULL;
    }
    Py_DECREF(synced);
    PyErr_Restore(type, value, tb);
    return result;
}

/* LaunchCore._only_enqueues: validated at creation (outside a pipeline or inside the one on
 * ``stream``) and bound to a backend launch that only enqueues */
int
launch_only_enqueues(PyObject *op, PyObject *stream)
{
    PyObject *early = OPFIELD(op, LAUNCH_EARLY), *early_stream = OPFIELD(op, LAUNCH_EARLY_STREAM);
    if (!is_prepared(early) ||
        (early_stream != NULL && early_stream != Py_None && early_stream != stream))
        return 0;
    PyObject *plan = FIELD(early, PREP_PLAN);
    if (plan == NULL || Py_TYPE(plan) != &LaunchPlanType)
        return 0;
    if (FIELD(plan, PLAN_DRIVER) != NULL && FIELD(plan, PLAN_DRIVER) != Py_None)
        return 1;
    PyObject *bound = FIELD(plan, PLAN_BOUND);
    if (bound == NULL || bound == Py_None)
        return 0;
    PyObject *flag = PyObject_GetAttr(bound, s_enqueues_only);
    if (flag == NULL)
        return -1;
    int yes = PyObject_IsTrue(flag);
    Py_DECREF(flag);
    return yes;
}

static PyObject *
launch_only_enqueues_method(PyObject *op, PyObject *stream)
{
    int yes = launch_only_enqueues(op, stream);
    return yes < 0 ? NULL : PyBool_FromLong(yes);
}

/* an op dropped without being driven (or recorded) gives its loans back */
static void
launch_finalize(PyObject *op)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *early = OPFIELD(op, LAUNCH_EARLY);
    if (is_prepared(early) && undriven(op)) {
        PyObject *loans = FIELD(early, PREP_LOANS);
        if (loans != NULL && PyList_Check(loans) && PyList_GET_SIZE(loans) > 0 &&
            (!configured && ensure_configured() < 0 ? -1 : release_all(loans)) < 0)
            PyErr_WriteUnraisable(op);
    }
    PyErr_Restore(type, value, tb);
}

static PyMemberDef launch_members[] = {
    OP_MEMBER("_kernel", LAUNCH_KERNEL), OP_MEMBER("_args", LAUNCH_ARGS),
    OP_MEMBER("_grid", LAUNCH_GRID), OP_MEMBER("_where", LAUNCH_WHERE),
    OP_MEMBER("_early", LAUNCH_EARLY), OP_MEMBER("_early_stream", LAUNCH_EARLY_STREAM),
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef launch_methods[] = {
    {"sync", launch_sync, METH_NOARGS, "Run on the device's next pool stream and wait."},
    {"_execute", launch_execute, METH_O, "Run on the stream (once)."},
    {"_only_enqueues", launch_only_enqueues_method, METH_O,
     "Whether running it on the stream is one enqueue."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject LaunchCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tilesafe._fastpath.LaunchCore",
    .tp_basicsize = OP_SIZE(LAUNCH_FIELDS),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .tp_doc = "What a launch op keeps, and how it is driven (the base of LaunchOp).",
    .tp_base = &OpCoreType,
    .tp_new = PyType_GenericNew,
    .tp_traverse = launch_traverse,
    .tp_clear = launch_clear,
    .tp_dealloc = launch_dealloc,
    .tp_finalize = launch_finalize,
    .tp_members = launch_members,
    .tp_methods = launch_methods,
};

/* ---- KernelCore -------------------------------------------------------------------------- */

FIELDS_FUNCS(kernel, KERNEL_FIELDS)

static PyObject *
launch_the_long_way(PyObject *kernel, PyObject *args, PyObject *kwargs)
{
    PyObject *launch = PyObject_GetAttr(kernel, s_launch);
    if (launch == NULL)
        return NULL;
    PyObject *op = PyObject_Call(launch, args, kwargs);
    Py_DECREF(launch);
    return op;
}

/* KernelCore.__call__: a launch op from a cached plan (with its loans), else Kernel.launch */
static PyObject *
kernel_call(PyObject *kernel, PyObject *args, PyObject *kwargs)
{
    if (ensure_configured() < 0)
        return NULL;
    KernelObject *k = (KernelObject *)kernel;
    if ((kwargs != NULL && PyDict_GET_SIZE(kwargs) > 0) || k->f[KERNEL_UNSAFE] == NULL ||
        k->f[KERNEL_NAME] == NULL)
        return launch_the_long_way(kernel, args, kwargs);
    int unsafe = PyObject_IsTrue(k->f[KERNEL_UNSAFE]);
    if (unsafe < 0)
        return NULL;
    if (unsafe)  /* Kernel.launch refuses it outside ts.unsafe() */
        return launch_the_long_way(kernel, args, kwargs);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); i++) {
        PyObject *arg = PyTuple_GET_ITEM(args, i), *type = (PyObject *)Py_TYPE(arg);
        if (type == config.Tensor || type == config.Partition)
            continue;
        int pending = PyObject_IsInstance(arg, config.DeviceOp);
        if (pending < 0)
            return NULL;
        if (pending)  /* an argument still to be produced */
            return launch_the_long_way(kernel, args, kwargs);
    }
    PyObject *where = caller_location();
    if (where == NULL)
        return NULL;
    PyObject *stream = local_get(config.current, s_stream);
    if (stream == NULL || ledger_acquire() < 0) {
        Py_DECREF(where);
        Py_XDECREF(stream);
        return NULL;
    }
    PyObject *prepared = prepare_from_plan(kernel, args, where, stream);
    ledger_release();
    if (prepared == NULL && PyErr_ExceptionMatches(PyExc_Exception)) {
        /* refused (a conflicting loan): Kernel.launch raises it again, with the arguments */
        PyErr_Clear();
        prepared = Py_None;
        Py_INCREF(prepared);
    }
    if (prepared == Py_None) {
        Py_DECREF(prepared);
        Py_DECREF(where);
        Py_DECREF(stream);
        return launch_the_long_way(kernel, args, kwargs);
    }
    PyTypeObject *op_type = (PyTypeObject *)config.LaunchOp;
    PyObject *op = NULL;
    if (prepared != NULL) {
        if (!PyType_Check(config.LaunchOp) || !PyType_IsSubtype(op_type, &LaunchCoreType))
            PyErr_SetString(PyExc_TypeError, "the configured LaunchOp is no LaunchCore");
        else
            op = op_type->tp_alloc(op_type, 0);
    }
    if (op == NULL) {
        Py_XDECREF(prepared);
        Py_DECREF(where);
        Py_DECREF(stream);
        return NULL;
    }
    field_set(&OPFIELD(op, OP_RUN), Py_None);
    field_set(&OPFIELD(op, OP_LABEL), Py_None);
    field_set(&OPFIELD(op, OP_DRIVEN_AT), Py_None);
    field_set(&OPFIELD(op, OP_DEVICE), FIELD(prepared, PREP_DEVICE));
    field_set(&OPFIELD(op, LAUNCH_KERNEL), kernel);
    field_set(&OPFIELD(op, LAUNCH_ARGS), FIELD(prepared, PREP_ARGS));
    field_set(&OPFIELD(op, LAUNCH_GRID), Py_None);
    OPFIELD(op, LAUNCH_WHERE) = where;
    OPFIELD(op, LAUNCH_EARLY) = prepared;
    OPFIELD(op, LAUNCH_EARLY_STREAM) = stream;
    /* validated inside a pipeline step: the ownership epoch it was validated at (see
     * LaunchOp._perform) */
    if (stream != Py_None &&
        PyObject_SetAttr(op, s_early_epoch, PyList_GET_ITEM(config.epoch, 0)) < 0) {
        Py_DECREF(op);
        return NULL;
    }
    return op;
}

static PyMemberDef kernel_members[] = {
    {"name", T_OBJECT_EX, offsetof(KernelObject, f) + KERNEL_NAME * sizeof(PyObject *), 0,
     NULL},
    {"_unsafe", T_OBJECT_EX, offsetof(KernelObject, f) + KERNEL_UNSAFE * sizeof(PyObject *), 0,
     NULL},
    {"_plans", T_OBJECT_EX, offsetof(KernelObject, f) + KERNEL_PLANS * sizeof(PyObject *), 0,
     NULL},
    {"launch_count", T_PYSSIZET, offsetof(KernelObject, launch_count), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject KernelCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tilesafe._fastpath.KernelCore",
    .tp_basicsize = sizeof(KernelObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .tp_doc = "What launching a kernel needs at every call (the base of tilesafe.Kernel).",
    .tp_new = PyType_GenericNew,
    .tp_call = kernel_call,
    .tp_traverse = kernel_traverse,
    .tp_clear = kernel_clear,
    .tp_dealloc = kernel_dealloc,
    .tp_members = kernel_members,
};
