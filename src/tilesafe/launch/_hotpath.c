/* tilesafe.launch._hotpath: the repeated-launch path in C.
 *
 * A launch whose arguments are the very objects of an earlier launch (a cached launch plan,
 * see launch/checks.py) needs no validation, only its loans; this module does that path and
 * the few steps around it without running Python bytecode:
 *
 *   Kernel.__call__        a launch op from a cached plan (with its loans)
 *   LaunchOp._execute      enqueue it inside a pipeline (consume, launch, register loans)
 *   LaunchOp.sync          enqueue it on the next pool stream and wait
 *   LaunchOp.__del__       give the loans back if the op was never driven
 *   _Chain.then            extend a chain
 *   _Chain._perform        run a chain: its first op, then each step and the op it returns
 *   Stream.synchronize     wait for a stream and end the loans of the work it ran
 *   caller_location        the user's file:line (the first frame outside the package)
 *
 * It works on tilesafe's own Python objects: their __slots__ are read and written at the
 * offsets their member descriptors give (looked up once, in setup()). The Python code stays
 * the definition: every case this path does not handle (a first launch, a cpu device, a
 * pending argument, an op driven twice, a conflicting loan, a failure) is handed to the
 * Python method it replaces, before anything was done. launch/hotpath.py installs the methods;
 * without a C compiler they stay Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>

/* ---- what setup() hands over ------------------------------------------------------------ */

static PyTypeObject *LaunchOpType, *PreparedType, *PlanType, *LoanType, *AllocationType,
    *ChainType, *StreamType, *PackedType, *TensorType, *PartitionType, *ReplayBorrowsType;
static PyObject *DeviceOpType;
static PyObject *Epoch;              /* driver.ledger._EPOCH, a one-item list */
static PyObject *LedgerAcquire, *LedgerRelease;
static PyObject *CurrentLocal;       /* driver.stream._CURRENT (.stream) */
static PyObject *DriveLocal;         /* deviceops.deviceop._DRIVE (.where) */
static PyObject *ThreadLocal;        /* driver.cuda._THREAD (.index) */
static PyObject *Holders;            /* launch.checks._HOLDERS */
static PyObject *HolderFn, *TakeLoansFn, *FailFn, *NextStreamFn;
static PyObject *DriverCalls;        /* driver.cuda._DRIVER_CALLS (.launch, .synchronize) */
static PyObject *DriverCallsDict;    /* its instance __dict__, where its calls are set */
static PyObject *PoolCycles;         /* driver.stream._POOL._cycles */
static PyObject *ContextSwitches;    /* driver.cuda._CONTEXT_SWITCHES, a one-item list */
static PyObject *SlowExecute, *SlowPerform, *SlowSync, *SlowThen, *SlowSynchronize,
    *SlowChainPerform, *SlowReplayLend, *SlowChainEnqueueWhile, *ChainRestType;
static PyObject *InternalFiles, *Locations, *IsInternalFn, *LocationType;

/* interned names and constants */
static PyObject *s_stream, *s_where, *s_index, *s_execute, *s_unsafe, *s_plans, *s_name, *s_launch,
    *s_launch_count, *s_run_prepared, *s_synchronize, *s_native_address, *s_kind,
    *s_enqueues_only, *s_driven, *s_consume, *s_only_enqueues, *s_then_how, *s_spend, *s_spend_why, *s_cuda, *s_unknown,
    *s_fn_launch, *s_fn_launch_ex, *s_fn_sync;

/* slot offsets */
static Py_ssize_t op_run, op_label, op_device, op_driven_at, op_kernel, op_args, op_grid,
    op_where, op_early, op_early_stream;
static Py_ssize_t pl_spec, pl_grid, pl_args, pl_loans, pl_where, pl_device, pl_plan;
static Py_ssize_t plan_args, plan_epoch, plan_spec, plan_grid, plan_device, plan_borrows,
    plan_bound, plan_borrowed, plan_stream_loans;
static Py_ssize_t loan_allocation, loan_lo, loan_hi, loan_mutable, loan_holder, loan_where,
    loan_stream, loan_count;
static Py_ssize_t alloc_loans;
static Py_ssize_t chain_first, chain_steps, chain_length;
static Py_ssize_t rb_borrows, rb_checked_epoch, rb_stream_loans;
static Py_ssize_t st_device, st_pending, st_spent, st_native_address;
static Py_ssize_t pk_function, pk_grid, pk_index, pk_address, pk_programmatic;

static PyObject *One;
static int ready = 0;

#define SLOT(obj, offset) (*(PyObject **)((char *)(obj) + (offset)))

/* the slot's value as a borrowed reference, None when unset */
static inline PyObject *
get(PyObject *obj, Py_ssize_t offset)
{
    PyObject *value = SLOT(obj, offset);
    return value ? value : Py_None;
}

static inline void
set(PyObject *obj, Py_ssize_t offset, PyObject *value)
{
    PyObject *old = SLOT(obj, offset);
    Py_INCREF(value);
    SLOT(obj, offset) = value;
    Py_XDECREF(old);
}

/* set, stealing the reference to value */
static inline void
put(PyObject *obj, Py_ssize_t offset, PyObject *value)
{
    PyObject *old = SLOT(obj, offset);
    SLOT(obj, offset) = value;
    Py_XDECREF(old);
}

static PyObject *
new_instance(PyTypeObject *type)
{
    return type->tp_alloc(type, 0);
}

/* getattr(local, name, None), a new reference */
static PyObject *
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

/* When the ledger is driver._ledger.Ledger: its C acquire and release, called directly. */
typedef PyObject *(*LedgerFunction)(PyObject *, PyObject *);
static LedgerFunction LedgerAcquireC, LedgerReleaseC;
static PyObject *Ledger;

static int
ledger_acquire(void)
{
    PyObject *r = LedgerAcquireC ? LedgerAcquireC(Ledger, NULL)
                                 : PyObject_CallNoArgs(LedgerAcquire);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static void
ledger_release(void)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);  /* releasing must not lose a pending error */
    PyObject *r = LedgerReleaseC ? LedgerReleaseC(Ledger, NULL)
                                 : PyObject_CallNoArgs(LedgerRelease);
    if (r == NULL)
        PyErr_WriteUnraisable(LedgerRelease);
    Py_XDECREF(r);
    PyErr_Restore(type, value, tb);
}

/* ---- caller_location ------------------------------------------------------------------- */

static PyObject *
location_of(PyObject *filename, int line)
{
    PyObject *number = PyLong_FromLong(line);
    if (number == NULL)
        return NULL;
    PyObject *key = PyTuple_Pack(2, filename, number);
    if (key == NULL) {
        Py_DECREF(number);
        return NULL;
    }
    PyObject *location = PyDict_GetItemWithError(Locations, key);
    if (location != NULL) {
        Py_INCREF(location);
    } else if (!PyErr_Occurred()) {
        location = PyObject_CallFunctionObjArgs(LocationType, filename, number, NULL);
        if (location != NULL && PyDict_SetItem(Locations, key, location) < 0)
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

static PyObject *
cached_site(PyCodeObject *code, int lasti, int *found)
{
    size_t at = (((size_t)code >> 4) ^ (size_t)lasti * 2654435761u) % SITES;
    *found = sites[at].code == code && sites[at].lasti == lasti;
    return sites[at].location;
}

static void
remember_site(PyCodeObject *code, int lasti, PyObject *location)
{
    size_t at = (((size_t)code >> 4) ^ (size_t)lasti * 2654435761u) % SITES;
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

static PyObject *
caller_location(void)
{
    PyFrameObject *frame = PyEval_GetFrame();
    Py_XINCREF(frame);
    while (frame != NULL) {
        PyCodeObject *code = PyFrame_GetCode(frame);
        int lasti = PyFrame_GetLasti(frame), found;
        PyObject *site = cached_site(code, lasti, &found);
        if (found) {
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
        PyObject *flag = PyDict_GetItemWithError(InternalFiles, filename);
        int internal;
        if (flag != NULL) {
            internal = PyObject_IsTrue(flag);
        } else if (PyErr_Occurred()) {
            internal = -1;
        } else {
            PyObject *answer = PyObject_CallOneArg(IsInternalFn, filename);
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
    return PyObject_CallFunction(LocationType, "Oi", s_unknown, 0);
}

PyDoc_STRVAR(setup_callsite_doc,
"setup_callsite(internal_files, locations, is_internal, Location)\n\n"
"The caches and helpers of tilesafe._callsite that caller_location() shares.");

static PyObject *
setup_callsite(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyDict_Check(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "setup_callsite(internal_files: dict, locations: dict, is_internal, "
                        "Location)");
        return NULL;
    }
    if (s_unknown == NULL && (s_unknown = PyUnicode_InternFromString("<unknown>")) == NULL)
        return NULL;
    PyObject **targets[4] = {&InternalFiles, &Locations, &IsInternalFn, &LocationType};
    for (int i = 0; i < 4; i++) {
        Py_INCREF(args[i]);
        Py_XSETREF(*targets[i], args[i]);
    }
    Py_RETURN_NONE;
}

static PyObject *
py_caller_location(PyObject *module, PyObject *unused)
{
    if (LocationType == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tilesafe.launch._hotpath: setup_callsite() first");
        return NULL;
    }
    return caller_location();
}

/* ---- loans ----------------------------------------------------------------------------- */

static int
loan_count_of(PyObject *loan, long *count)
{
    *count = PyLong_AsLong(get(loan, loan_count));
    return (*count == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int
set_count(PyObject *loan, long count)
{
    PyObject *value = PyLong_FromLong(count);
    if (value == NULL)
        return -1;
    put(loan, loan_count, value);
    return 0;
}

/* Allocation.lend: a use of an existing loan of the same range on the same stream, or a new
 * loan appended to the allocation's list. A new reference. */
static PyObject *
lend(PyObject *alloc, PyObject *lo, PyObject *hi, PyObject *mutable, PyObject *holder,
     PyObject *where, PyObject *stream)
{
    PyObject *loans = get(alloc, alloc_loans);
    if (!PyList_Check(loans)) {
        PyErr_SetString(PyExc_TypeError, "an allocation's loans are not a list");
        return NULL;
    }
    if (stream != Py_None) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(loans); i++) {
            PyObject *loan = PyList_GET_ITEM(loans, i);
            if (Py_TYPE(loan) != LoanType || get(loan, loan_stream) != stream)
                continue;
            int same = PyObject_RichCompareBool(get(loan, loan_lo), lo, Py_EQ);
            if (same > 0)
                same = PyObject_RichCompareBool(get(loan, loan_hi), hi, Py_EQ);
            if (same > 0)
                same = PyObject_RichCompareBool(get(loan, loan_mutable), mutable, Py_EQ);
            if (same < 0)
                return NULL;
            if (same) {
                long count;
                if (loan_count_of(loan, &count) < 0 || set_count(loan, count + 1) < 0)
                    return NULL;
                Py_INCREF(loan);
                return loan;
            }
        }
    }
    PyObject *loan = new_instance(LoanType);
    if (loan == NULL)
        return NULL;
    set(loan, loan_allocation, alloc);
    set(loan, loan_lo, lo);
    set(loan, loan_hi, hi);
    set(loan, loan_mutable, mutable);
    set(loan, loan_holder, holder);
    set(loan, loan_where, where);
    set(loan, loan_stream, stream);
    if (set_count(loan, 1) < 0 || PyList_Append(loans, loan) < 0) {
        Py_DECREF(loan);
        return NULL;
    }
    return loan;
}

/* Allocation.release */
static int
release(PyObject *loan)
{
    long count;
    if (Py_TYPE(loan) != LoanType) {
        PyErr_SetString(PyExc_TypeError, "not a Loan");
        return -1;
    }
    if (loan_count_of(loan, &count) < 0)
        return -1;
    if (count > 1)
        return set_count(loan, count - 1);
    if (set_count(loan, 0) < 0)
        return -1;
    PyObject *loans = get(get(loan, loan_allocation), alloc_loans);
    if (PyList_Check(loans)) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(loans); i++) {
            if (PyList_GET_ITEM(loans, i) == loan)
                return PySequence_DelItem(loans, i);
        }
    }
    return 0;  /* already released */
}

/* driver.ledger.release_all */
static int
release_all(PyObject *loans)
{
    if (ledger_acquire() < 0)
        return -1;
    int status = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(loans) && status == 0; i++)
        status = release(PyList_GET_ITEM(loans, i));
    if (status == 0)
        status = PyList_SetSlice(loans, 0, PyList_GET_SIZE(loans), NULL);
    ledger_release();
    return status;
}

static PyObject *
holder_of(PyObject *kernel_name)
{
    PyObject *holder = PyDict_GetItemWithError(Holders, kernel_name);
    if (holder != NULL) {
        Py_INCREF(holder);
        return holder;
    }
    return PyErr_Occurred() ? NULL : PyObject_CallOneArg(HolderFn, kernel_name);
}

/* driver.ledger.shared_or_new_loans (called with the ledger held): the loans kept in
 * ``owner``'s slot at ``stream_loans_at`` (a (stream, loans) pair) when they are of ``stream``
 * and all live, one more use each; else new loans of ``borrows``, kept there. ``holder``
 * (borrowed) names the work, or NULL: the holder of ``kernel``'s launches. A new list. */
static PyObject *
shared_or_new_loans(PyObject *owner, Py_ssize_t stream_loans_at, PyObject *borrows,
                    PyObject *kernel, PyObject *holder, PyObject *where, PyObject *stream)
{
    PyObject *last = get(owner, stream_loans_at);
    if (stream != Py_None && PyTuple_Check(last) && PyTuple_GET_SIZE(last) == 2 &&
        PyTuple_GET_ITEM(last, 0) == stream && PyTuple_Check(PyTuple_GET_ITEM(last, 1)) &&
        PyTuple_GET_SIZE(PyTuple_GET_ITEM(last, 1)) > 0) {
        PyObject *shared = PyTuple_GET_ITEM(last, 1);
        Py_ssize_t n = PyTuple_GET_SIZE(shared);
        int alive = 1;
        for (Py_ssize_t i = 0; i < n && alive; i++) {
            long count;
            PyObject *loan = PyTuple_GET_ITEM(shared, i);
            if (Py_TYPE(loan) != LoanType || loan_count_of(loan, &count) < 0)
                return NULL;
            alive = count > 0;
        }
        if (alive) {
            for (Py_ssize_t i = 0; i < n; i++) {
                long count;
                PyObject *loan = PyTuple_GET_ITEM(shared, i);
                if (loan_count_of(loan, &count) < 0 || set_count(loan, count + 1) < 0)
                    return NULL;
            }
            return PySequence_List(shared);
        }
    }
    if (!PyList_Check(borrows)) {
        PyErr_SetString(PyExc_TypeError, "the borrows of a launch plan or replay are not a list");
        return NULL;
    }
    if (holder != NULL) {
        Py_INCREF(holder);
    } else {
        PyObject *kernel_name = PyObject_GetAttr(kernel, s_name);
        holder = kernel_name ? holder_of(kernel_name) : NULL;
        Py_XDECREF(kernel_name);
        if (holder == NULL)
            return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(borrows);
    int checks = 0;  /* any allocation with loans: Python's _take_loans checks them */
    for (Py_ssize_t i = 0; i < n && !checks; i++) {
        PyObject *borrow = PyList_GET_ITEM(borrows, i);
        PyObject *loans_now;
        checks = !PyTuple_Check(borrow) || PyTuple_GET_SIZE(borrow) != 5 ||
                 Py_TYPE(PyTuple_GET_ITEM(borrow, 0)) != AllocationType ||
                 !PyList_Check(loans_now = get(PyTuple_GET_ITEM(borrow, 0), alloc_loans)) ||
                 PyList_GET_SIZE(loans_now) > 0;
    }
    PyObject *loans;
    if (checks) {
        loans = PyObject_CallFunctionObjArgs(TakeLoansFn, borrows, holder, where, stream, NULL);
    } else {
        loans = PyList_New(n);
        for (Py_ssize_t i = 0; loans != NULL && i < n; i++) {
            PyObject *b = PyList_GET_ITEM(borrows, i);
            PyObject *loan = lend(PyTuple_GET_ITEM(b, 0), PyTuple_GET_ITEM(b, 1),
                                  PyTuple_GET_ITEM(b, 2), PyTuple_GET_ITEM(b, 3), holder,
                                  where, stream);
            if (loan == NULL)
                Py_CLEAR(loans);
            else
                PyList_SET_ITEM(loans, i, loan);
        }
    }
    Py_DECREF(holder);
    if (loans != NULL && stream != Py_None) {
        PyObject *kept = PySequence_Tuple(loans);
        PyObject *pair = kept ? PyTuple_Pack(2, stream, kept) : NULL;
        Py_XDECREF(kept);
        if (pair == NULL) {
            Py_DECREF(loans);
            return NULL;
        }
        put(owner, stream_loans_at, pair);
    }
    return loans;
}

/* launch.checks._plan_loans (called with the ledger held). A new list. */
static PyObject *
plan_loans(PyObject *plan, PyObject *kernel, PyObject *where, PyObject *stream)
{
    return shared_or_new_loans(plan, plan_stream_loans, get(plan, plan_borrows), kernel, NULL,
                               where, stream);
}

/* The Python ReplayBorrows.lend, called with the same arguments */
static PyObject *
slow_replay_lend(PyObject *borrows, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *call[4] = {borrows, NULL, NULL, NULL};
    if (nargs > 3)
        nargs = 3;  /* more arguments than the method takes: its TypeError names them */
    for (Py_ssize_t i = 0; i < nargs; i++)
        call[i + 1] = args[i];
    return PyObject_Vectorcall(SlowReplayLend, call, nargs + 1, NULL);
}

/* ReplayBorrows.lend(holder, where, stream): while the ownership epoch is that of the last
 * checks, no argument can have moved, so only the loans are taken; else the Python method. */
static PyObject *
replay_lend(PyObject *borrows, PyObject *const *args, Py_ssize_t nargs)
{
    if (Py_TYPE(borrows) != ReplayBorrowsType || nargs != 3)
        return slow_replay_lend(borrows, args, nargs);
    if (ledger_acquire() < 0)
        return NULL;
    int same = PyObject_RichCompareBool(get(borrows, rb_checked_epoch),
                                        PyList_GET_ITEM(Epoch, 0), Py_EQ);
    PyObject *loans = same > 0
        ? shared_or_new_loans(borrows, rb_stream_loans, get(borrows, rb_borrows), NULL, args[0],
                              args[1], args[2])
        : NULL;
    ledger_release();
    if (same == 0)
        return slow_replay_lend(borrows, args, nargs);
    return loans;
}

/* ---- Kernel.__call__ ------------------------------------------------------------------- */

/* The plan cached under the key (ids of args, None) -- launch.checks._prepare's key for a
 * launch without an explicit grid -- found by comparing ids, without building the key. A
 * borrowed reference, or NULL. */
static PyObject *
find_plan(PyObject *plans, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t position = 0;
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
            if (!PyLong_CheckExact(id) || PyLong_AsVoidPtr(id) != (void *)args[i])
                break;
        }
        if (PyErr_Occurred())
            return NULL;
        if (i == nargs)
            return plan;
    }
    return NULL;
}

/* The prepared launch of a cached plan, or None on a miss (the ledger is held). */
static PyObject *
prepare_from_plan(PyObject *kernel, PyObject *const *args, Py_ssize_t nargs, PyObject *where,
                  PyObject *stream)
{
    PyObject *plans = PyObject_GetAttr(kernel, s_plans);
    if (plans == NULL)
        return NULL;
    if (!PyDict_Check(plans)) {
        Py_DECREF(plans);
        Py_RETURN_NONE;
    }
    PyObject *plan = find_plan(plans, args, nargs);
    Py_XINCREF(plan);
    Py_DECREF(plans);
    if (plan == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    int current = Py_TYPE(plan) == PlanType;
    if (current)
        current = PyObject_RichCompareBool(get(plan, plan_epoch), PyList_GET_ITEM(Epoch, 0),
                                           Py_EQ);
    if (current <= 0) {
        Py_DECREF(plan);
        if (current < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    PyObject *loans = plan_loans(plan, kernel, where, stream);
    PyObject *prepared = loans ? new_instance(PreparedType) : NULL;
    if (prepared == NULL) {
        Py_XDECREF(loans);
        Py_DECREF(plan);
        return NULL;
    }
    set(prepared, pl_spec, get(plan, plan_spec));
    set(prepared, pl_grid, get(plan, plan_grid));
    set(prepared, pl_args, get(plan, plan_args));
    put(prepared, pl_loans, loans);
    set(prepared, pl_where, where);
    set(prepared, pl_device, get(plan, plan_device));
    put(prepared, pl_plan, plan);
    return prepared;
}

static PyObject *
slow_launch(PyObject *kernel, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *launch = PyObject_GetAttr(kernel, s_launch);
    if (launch == NULL)
        return NULL;
    PyObject *op = PyObject_Vectorcall(launch, args, nargs, NULL);
    Py_DECREF(launch);
    return op;
}

static PyObject *
kernel_call(PyObject *kernel, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *unsafe = PyObject_GetAttr(kernel, s_unsafe);
    if (unsafe == NULL)
        return NULL;
    int is_unsafe = PyObject_IsTrue(unsafe);
    Py_DECREF(unsafe);
    if (is_unsafe < 0)
        return NULL;
    if (is_unsafe)  /* the Python path refuses it outside ts.unsafe() */
        return slow_launch(kernel, args, nargs);
    for (Py_ssize_t i = 0; i < nargs; i++) {
        PyTypeObject *type = Py_TYPE(args[i]);
        if (type == TensorType || type == PartitionType)
            continue;
        int pending = PyObject_IsInstance(args[i], DeviceOpType);
        if (pending < 0)
            return NULL;
        if (pending)  /* an argument still to be produced */
            return slow_launch(kernel, args, nargs);
    }
    PyObject *where = caller_location();
    if (where == NULL)
        return NULL;
    PyObject *stream = local_get(CurrentLocal, s_stream);
    if (stream == NULL || ledger_acquire() < 0) {
        Py_DECREF(where);
        Py_XDECREF(stream);
        return NULL;
    }
    PyObject *prepared = prepare_from_plan(kernel, args, nargs, where, stream);
    ledger_release();
    if (prepared == Py_None) {
        Py_DECREF(prepared);
        Py_DECREF(where);
        Py_DECREF(stream);
        return slow_launch(kernel, args, nargs);
    }
    PyObject *op = prepared ? new_instance(LaunchOpType) : NULL;
    if (op == NULL) {
        Py_XDECREF(prepared);
        Py_DECREF(where);
        Py_DECREF(stream);
        return NULL;
    }
    set(op, op_run, Py_None);
    set(op, op_label, Py_None);
    set(op, op_driven_at, Py_None);
    set(op, op_device, get(prepared, pl_device));
    set(op, op_kernel, kernel);
    set(op, op_args, get(prepared, pl_args));
    set(op, op_grid, Py_None);
    put(op, op_where, where);
    put(op, op_early, prepared);
    put(op, op_early_stream, stream);
    return op;
}

/* ---- running a prepared launch --------------------------------------------------------- */

static PyObject *last_cuda_device;  /* devices are immutable: remember the last cuda one */

static int
is_cuda(PyObject *device)
{
    if (device == last_cuda_device)
        return 1;
    PyObject *kind = PyObject_GetAttr(device, s_kind);
    if (kind == NULL)
        return -1;
    int cuda = PyUnicode_Check(kind) && PyUnicode_Compare(kind, s_cuda) == 0;
    Py_DECREF(kind);
    if (cuda) {
        Py_INCREF(device);
        Py_XSETREF(last_cuda_device, device);
    }
    return cuda;
}

/* launch.checks.recover with spend=True, for a launch that has a plan */
static int
recover(PyObject *prepared, PyObject *stream)
{
    PyObject *loans = get(prepared, pl_loans);
    PyObject *borrowed = get(get(prepared, pl_plan), plan_borrowed);
    PyObject *pending = get(stream, st_pending);
    if (!PyList_Check(loans) || !PyList_Check(borrowed) || !PyList_Check(pending)) {
        PyErr_SetString(PyExc_TypeError, "recover: unexpected launch state");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(loans); i++) {
        PyObject *loan = PyList_GET_ITEM(loans, i);
        if (Py_TYPE(loan) == LoanType)
            set(loan, loan_stream, stream);
        else if (PyObject_SetAttr(loan, s_stream, stream) < 0)
            return -1;
    }
    Py_ssize_t end = PyList_GET_SIZE(pending);
    if (PyList_SetSlice(pending, end, end, loans) < 0)
        return -1;
    if (PyList_GET_SIZE(borrowed) > 0) {
        PyObject *spent = get(stream, st_spent);
        if (!PyList_Check(spent)) {
            PyErr_SetString(PyExc_TypeError, "recover: a stream's spent list is not a list");
            return -1;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(borrowed); i++) {
            PyObject *entry = PyTuple_Pack(2, PyList_GET_ITEM(borrowed, i),
                                           get(prepared, pl_where));
            if (entry == NULL || PyList_Append(spent, entry) < 0) {
                Py_XDECREF(entry);
                return -1;
            }
            Py_DECREF(entry);
        }
    }
    return 0;
}

/* The packed launch of a prepared cuda launch ready to enqueue from here (a borrowed
 * reference), or NULL with no error set when the Python path must run it. ``thread_index``:
 * driver.cuda._THREAD.index when the caller knows it (borrowed), else NULL. */
static PyObject *
ready_packed(PyObject *prepared, PyObject *stream, PyObject *thread_index, int *failed)
{
    *failed = 0;
    PyObject *device = get(prepared, pl_device);
    PyObject *plan = get(prepared, pl_plan);
    if (Py_TYPE(stream) != StreamType || Py_TYPE(plan) != PlanType ||
        !PyLong_Check(get(stream, st_native_address)))
        return NULL;
    PyObject *stream_device = get(stream, st_device);
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
    PyObject *packed = get(plan, plan_bound);
    if (Py_TYPE(packed) != PackedType)
        return NULL;
    /* the device's context must be current on this thread (driver.cuda.launch_packed) */
    PyObject *index = thread_index;
    if (index != NULL)
        Py_INCREF(index);
    else if ((index = local_get(ThreadLocal, s_index)) == NULL) {
        *failed = 1;
        return NULL;
    }
    int same = PyObject_RichCompareBool(index, get(packed, pk_index), Py_EQ);
    Py_DECREF(index);
    if (same <= 0) {
        *failed = same < 0;
        return NULL;
    }
    return packed;
}

/* getattr(driver.cuda._DRIVER_CALLS, name): its calls are instance attributes (a class
 * __getattr__ chooses them on first use), so the instance dict is looked at first. */
static PyObject *
driver_call(PyObject *name)
{
    PyObject *call = PyDict_GetItemWithError(DriverCallsDict, name);
    if (call != NULL) {
        Py_INCREF(call);
        return call;
    }
    return PyErr_Occurred() ? NULL : PyObject_GetAttr(DriverCalls, name);
}

static PyObject *
fail(PyObject *err, PyObject *what)
{
    PyObject *r = PyObject_CallFunctionObjArgs(FailFn, err, what, NULL);
    Py_XDECREF(r);
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "a driver call failed");
    return NULL;
}

/* Kernel._run_prepared(prepared, stream): the launch itself when it is ready to enqueue,
 * else the Python method. */
static PyObject *
run_prepared(PyObject *kernel, PyObject *prepared, PyObject *stream, PyObject *thread_index)
{
    int failed;
    PyObject *packed = ready_packed(prepared, stream, thread_index, &failed);
    if (packed == NULL) {
        if (failed)
            return NULL;
        return PyObject_CallMethodObjArgs(kernel, s_run_prepared, prepared, stream, NULL);
    }
    PyObject *grid = get(packed, pk_grid);
    PyObject *launch = driver_call(s_launch);
    if (launch == NULL)
        return NULL;
    if (!PyTuple_Check(grid) || PyTuple_GET_SIZE(grid) != 3) {
        Py_DECREF(launch);
        PyErr_SetString(PyExc_TypeError, "a packed launch's grid is not 3 extents");
        return NULL;
    }
    PyObject *programmatic = get(packed, pk_programmatic);
    PyObject *call[7] = {get(packed, pk_function), PyTuple_GET_ITEM(grid, 0),
                         PyTuple_GET_ITEM(grid, 1), PyTuple_GET_ITEM(grid, 2),
                         get(stream, st_native_address), get(packed, pk_address), programmatic};
    PyObject *err = PyObject_Vectorcall(launch, call, 7, NULL);
    Py_DECREF(launch);
    int ok = 0;
    if (err != NULL) {
        int nonzero = PyObject_IsTrue(err);
        ok = nonzero == 0;
        if (ok) {
            PyObject *count = PyObject_GetAttr(kernel, s_launch_count);
            PyObject *more = count ? PyNumber_Add(count, One) : NULL;
            ok = more != NULL && PyObject_SetAttr(kernel, s_launch_count, more) == 0;
            Py_XDECREF(count);
            Py_XDECREF(more);
        }
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
    if (err != NULL && ok && recovered == 0) {
        Py_DECREF(err);
        PyObject *args = get(prepared, pl_args);
        Py_INCREF(args);
        return args;
    }
    if (err != NULL && !PyErr_Occurred()) {  /* the driver refused: a CudaError */
        int programmatic_launch = PyObject_IsTrue(programmatic);
        fail(err, programmatic_launch > 0 ? s_fn_launch_ex : s_fn_launch);
    }
    Py_XDECREF(err);
    return NULL;
}

/* ---- LaunchOp -------------------------------------------------------------------------- */

static PyObject *last_driven;  /* (how, where) tuples are immutable: a drive loop shares one */

static int
mark_driven(PyObject *op, PyObject *how, PyObject *where)
{
    if (last_driven == NULL || PyTuple_GET_ITEM(last_driven, 0) != how ||
        PyTuple_GET_ITEM(last_driven, 1) != where) {
        PyObject *driven = PyTuple_Pack(2, how, where);
        if (driven == NULL)
            return -1;
        Py_XSETREF(last_driven, driven);
    }
    set(op, op_driven_at, last_driven);
    return 0;
}

/* LaunchOp._execute with the drive's location already looked up (``drive_where``, borrowed:
 * _DRIVE.where, or None outside a drive) and maybe the thread's context (see ready_packed) */
static PyObject *
execute_launch(PyObject *op, PyObject *stream, PyObject *drive_where, PyObject *thread_index)
{
    if (Py_TYPE(op) != LaunchOpType || get(op, op_driven_at) != Py_None)
        return PyObject_CallFunctionObjArgs(SlowExecute, op, stream, NULL);
    PyObject *where = drive_where;
    int given = PyObject_IsTrue(where);
    if (given < 0)
        return NULL;
    if (given)
        Py_INCREF(where);
    else if ((where = caller_location()) == NULL)
        return NULL;
    int marked = mark_driven(op, s_driven, where);
    Py_DECREF(where);
    if (marked < 0)
        return NULL;
    PyObject *prepared = get(op, op_early), *early_stream = get(op, op_early_stream);
    if (Py_TYPE(prepared) != PreparedType || (early_stream != Py_None && early_stream != stream))
        return PyObject_CallFunctionObjArgs(SlowPerform, op, stream, NULL);
    return run_prepared(get(op, op_kernel), prepared, stream, thread_index);
}

static PyObject *
launch_execute(PyObject *op, PyObject *stream)
{
    PyObject *where = local_get(DriveLocal, s_where);
    if (where == NULL)
        return NULL;
    PyObject *result = execute_launch(op, stream, where, NULL);
    Py_DECREF(where);
    return result;
}

/* driver.cuda._CONTEXT_SWITCHES[0]: bumped by make_current */
static long
context_switches(void)
{
    return PyLong_AsLong(PyList_GET_ITEM(ContextSwitches, 0));
}

/* Whether running ``op`` on ``stream`` only enqueues device work (DeviceOp._only_enqueues;
 * a result that is no DeviceOp passes through a chain): 1, 0, or -1 with an error set. A
 * launch ready to enqueue is recognized here; other ops are asked. */
static int
only_enqueues(PyObject *op, PyObject *stream)
{
    if (Py_TYPE(op) == LaunchOpType) {
        PyObject *early = get(op, op_early), *early_stream = get(op, op_early_stream);
        if (Py_TYPE(early) != PreparedType || (early_stream != Py_None && early_stream != stream))
            return 0;
        PyObject *plan = get(early, pl_plan);
        if (Py_TYPE(plan) != PlanType)
            return 0;
        PyObject *bound = get(plan, plan_bound);
        if (Py_TYPE(bound) == PackedType)
            return 1;
        if (bound == Py_None)
            return 0;
        PyObject *flag = PyObject_GetAttr(bound, s_enqueues_only);
        if (flag == NULL)
            return -1;
        int yes = PyObject_IsTrue(flag);
        Py_DECREF(flag);
        return yes;
    }
    int pending = PyObject_IsInstance(op, DeviceOpType);
    if (pending <= 0)
        return pending < 0 ? -1 : 1;
    PyObject *answer = PyObject_CallMethodOneArg(op, s_only_enqueues, stream);
    if (answer == NULL)
        return -1;
    int yes = PyObject_IsTrue(answer);
    Py_DECREF(answer);
    return yes;
}

/* The steps of a chain on ``stream``, after its first op (whose result is ``first``). The
 * drive's location is looked up once (a step that drives ops of its own puts it back before
 * it returns), and so is the thread's current context, again only after a step or launch
 * made another one current. With ``resume_at`` (not NULL), the steps stop at the first op
 * that does more than enqueue, which is returned unrun with *resume_at set to the index of
 * the step after it (-1: every step ran). */
static PyObject *
chain_steps_run(PyObject *chain, PyObject *stream, PyObject *first, Py_ssize_t *resume_at)
{
    PyObject *where = local_get(DriveLocal, s_where);
    if (where == NULL)
        return NULL;
    long switches = context_switches();
    PyObject *index = local_get(ThreadLocal, s_index);
    if (index == NULL || (switches == -1 && PyErr_Occurred())) {
        Py_XDECREF(index);
        Py_DECREF(where);
        return NULL;
    }
    PyObject *result = Py_TYPE(first) == LaunchOpType
        ? execute_launch(first, stream, where, index)
        : PyObject_CallMethodOneArg(first, s_execute, stream);
    PyObject *steps = get(chain, chain_steps);
    Py_INCREF(steps);
    if (resume_at != NULL)
        *resume_at = -1;
    for (Py_ssize_t i = 0; result != NULL && i < PyList_GET_SIZE(steps); i++) {
        PyObject *fn = PyList_GET_ITEM(steps, i);
        Py_INCREF(fn);
        PyObject *next = PyObject_CallOneArg(fn, result);
        Py_DECREF(fn);
        Py_SETREF(result, next);
        if (result == NULL)
            break;
        long now = context_switches();
        if (now != switches) {  /* made current by the step, or by the last launch */
            switches = now;
            Py_SETREF(index, local_get(ThreadLocal, s_index));
            if (index == NULL || (now == -1 && PyErr_Occurred())) {
                Py_CLEAR(result);
                break;
            }
        }
        if (resume_at != NULL) {
            int enqueues = only_enqueues(result, stream);
            if (enqueues < 0) {
                Py_CLEAR(result);
                break;
            }
            if (!enqueues) {
                *resume_at = i + 1;
                break;
            }
        }
        if (Py_TYPE(result) == LaunchOpType) {
            Py_SETREF(result, execute_launch(result, stream, where, index));
        } else {
            int pending = PyObject_IsInstance(result, DeviceOpType);
            if (pending < 0)
                Py_CLEAR(result);
            else if (pending)
                Py_SETREF(result, PyObject_CallMethodOneArg(result, s_execute, stream));
        }
    }
    Py_DECREF(steps);
    Py_XDECREF(index);
    Py_DECREF(where);
    return result;
}

/* _Chain._perform: the first op, then each step's function and the op it returns, all on
 * ``stream``. */
static PyObject *
chain_perform(PyObject *chain, PyObject *stream)
{
    if (Py_TYPE(chain) != ChainType || !PyList_Check(get(chain, chain_steps)))
        return PyObject_CallFunctionObjArgs(SlowChainPerform, chain, stream, NULL);
    return chain_steps_run(chain, stream, get(chain, chain_first), NULL);
}

/* _Chain._enqueue_while_only_enqueueing: (True, result) when every step only enqueued, else
 * (False, rest), rest being the chain itself (its first op does more) or a _ChainRest. */
static PyObject *
chain_enqueue_while(PyObject *chain, PyObject *stream)
{
    if (Py_TYPE(chain) != ChainType || !PyList_Check(get(chain, chain_steps)))
        return PyObject_CallFunctionObjArgs(SlowChainEnqueueWhile, chain, stream, NULL);
    PyObject *first = get(chain, chain_first);
    int enqueues = only_enqueues(first, stream);
    if (enqueues < 0)
        return NULL;
    if (!enqueues)
        return PyTuple_Pack(2, Py_False, chain);
    PyObject *consumed = PyObject_CallMethodOneArg(chain, s_consume, s_driven);
    if (consumed == NULL)
        return NULL;
    Py_DECREF(consumed);
    Py_ssize_t resume_at;
    PyObject *result = chain_steps_run(chain, stream, first, &resume_at);
    if (result == NULL)
        return NULL;
    if (resume_at < 0) {
        PyObject *finished = PyTuple_Pack(2, Py_True, result);
        Py_DECREF(result);
        return finished;
    }
    PyObject *start = PyLong_FromSsize_t(resume_at);
    PyObject *rest = start ? PyObject_CallFunctionObjArgs(ChainRestType, chain, result, start,
                                                         NULL) : NULL;
    Py_XDECREF(start);
    Py_DECREF(result);
    if (rest == NULL)
        return NULL;
    PyObject *unfinished = PyTuple_Pack(2, Py_False, rest);
    Py_DECREF(rest);
    return unfinished;
}

static PyObject *last_pool_device, *last_pool_key;  /* the pool key of the last device */

/* driver.stream.next_stream: the next stream of a full pool, keyed by (kind, index) */
static PyObject *
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
        Py_INCREF(device);
        Py_XSETREF(last_pool_device, device);
        Py_XSETREF(last_pool_key, key);
    }
    PyObject *cycle = PyDict_GetItemWithError(PoolCycles, last_pool_key);
    if (cycle != NULL) {
        PyObject *stream = PyIter_Next(cycle);
        if (stream != NULL || PyErr_Occurred())
            return stream;
    } else if (PyErr_Occurred()) {
        return NULL;
    }
    return PyObject_CallOneArg(NextStreamFn, device);
}

static PyObject *stream_synchronize(PyObject *stream, PyObject *unused);

/* stream.synchronize() (the compiled method itself for a Stream: it is installed with this
 * one) */
static PyObject *
synchronize_stream(PyObject *stream)
{
    PyObject *r = Py_TYPE(stream) == StreamType ? stream_synchronize(stream, NULL)
                                                : PyObject_CallMethodNoArgs(stream, s_synchronize);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
}

static PyObject *
launch_sync(PyObject *op, PyObject *unused)
{
    PyObject *prepared = Py_TYPE(op) == LaunchOpType ? get(op, op_early) : Py_None;
    if (Py_TYPE(prepared) != PreparedType || get(op, op_driven_at) != Py_None ||
        get(op, op_early_stream) != Py_None)
        return PyObject_CallOneArg(SlowSync, op);
    Py_INCREF(prepared);
    PyObject *stream = next_stream(get(op, op_device));
    PyObject *where = stream ? caller_location() : NULL;
    if (where == NULL || mark_driven(op, s_driven, where) < 0) {
        Py_XDECREF(where);
        Py_XDECREF(stream);
        Py_DECREF(prepared);
        return NULL;
    }
    Py_DECREF(where);
    PyObject *result = run_prepared(get(op, op_kernel), prepared, stream, NULL);
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

static PyObject *
launch_del(PyObject *op, PyObject *unused)
{
    PyObject *prepared = get(op, op_early);
    if (prepared == Py_None || get(op, op_driven_at) != Py_None)
        Py_RETURN_NONE;
    PyObject *loans = Py_TYPE(prepared) == PreparedType ? get(prepared, pl_loans) : Py_None;
    if (PyList_Check(loans) && PyList_GET_SIZE(loans) > 0 && release_all(loans) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ---- _Chain.then ----------------------------------------------------------------------- */

static PyObject *
chain_then(PyObject *chain, PyObject *fn)
{
    if (Py_TYPE(chain) != ChainType || get(chain, op_driven_at) != Py_None ||
        !PyList_Check(get(chain, chain_steps)))
        return PyObject_CallFunctionObjArgs(SlowThen, chain, fn, NULL);
    PyObject *where = caller_location();
    if (where == NULL)
        return NULL;
    int marked = mark_driven(chain, s_then_how, where);
    Py_DECREF(where);
    PyObject *steps = get(chain, chain_steps);
    if (marked < 0 || PyList_Append(steps, fn) < 0)
        return NULL;
    PyObject *length = PyLong_FromSsize_t(PyList_GET_SIZE(steps));
    PyObject *next = length ? new_instance(ChainType) : NULL;
    if (next == NULL) {
        Py_XDECREF(length);
        return NULL;
    }
    set(next, op_run, Py_None);
    set(next, op_label, Py_None);
    set(next, op_driven_at, Py_None);
    set(next, op_device, get(chain, op_device));
    set(next, chain_first, get(chain, chain_first));
    set(next, chain_steps, steps);
    put(next, chain_length, length);
    return next;
}

/* ---- Stream.synchronize ---------------------------------------------------------------- */

static int
restore_front(PyObject *stream, Py_ssize_t offset, PyObject *items)
{
    PyObject *list = get(stream, offset);
    return PyList_Check(list) ? PyList_SetSlice(list, 0, 0, items) : -1;
}

static PyObject *
stream_synchronize(PyObject *stream, PyObject *unused)
{
    if (Py_TYPE(stream) != StreamType || !PyList_Check(get(stream, st_pending)) ||
        !PyList_Check(get(stream, st_spent)))
        return PyObject_CallOneArg(SlowSynchronize, stream);
    int cuda = is_cuda(get(stream, st_device));
    if (cuda < 0)
        return NULL;
    PyObject *fresh_pending = PyList_New(0), *fresh_spent = PyList_New(0);
    if (fresh_pending == NULL || fresh_spent == NULL) {
        Py_XDECREF(fresh_pending);
        Py_XDECREF(fresh_spent);
        return NULL;
    }
    PyObject *pending = get(stream, st_pending), *spent = get(stream, st_spent);
    Py_INCREF(pending);
    Py_INCREF(spent);
    put(stream, st_pending, fresh_pending);
    put(stream, st_spent, fresh_spent);
    int waited = 1;
    if (cuda > 0) {
        PyObject *address = get(stream, st_native_address);
        if (PyLong_Check(address))
            Py_INCREF(address);
        else
            address = PyObject_GetAttr(stream, s_native_address);
        PyObject *sync = address ? driver_call(s_synchronize) : NULL;
        PyObject *err = sync ? PyObject_CallOneArg(sync, address) : NULL;
        Py_XDECREF(sync);
        Py_XDECREF(address);
        int nonzero = err ? PyObject_IsTrue(err) : -1;
        if (nonzero != 0) {
            waited = 0;
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            if (restore_front(stream, st_pending, pending) < 0 ||
                restore_front(stream, st_spent, spent) < 0)
                PyErr_Clear();
            PyErr_Restore(type, value, tb);
            if (nonzero > 0)
                fail(err, s_fn_sync);
        }
        Py_XDECREF(err);
    }
    PyObject *result = NULL;
    if (waited && release_all(pending) == 0) {
        result = Py_None;
        Py_INCREF(result);
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(spent); i++) {
            PyObject *entry = PyList_GET_ITEM(spent, i);
            if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) {
                PyErr_SetString(PyExc_TypeError, "a stream's spent partitions are pairs");
                Py_CLEAR(result);
                break;
            }
            PyObject *r = PyObject_CallMethodObjArgs(PyTuple_GET_ITEM(entry, 0), s_spend,
                                                     s_spend_why, PyTuple_GET_ITEM(entry, 1),
                                                     NULL);
            if (r == NULL) {
                Py_CLEAR(result);
                break;
            }
            Py_DECREF(r);
        }
    }
    Py_DECREF(pending);
    Py_DECREF(spent);
    return result;
}

/* ---- setup and installation ------------------------------------------------------------ */

static int
slot_offset(PyObject *type, const char *name, Py_ssize_t *offset)
{
    PyObject *descr = PyObject_GetAttrString(type, name);
    if (descr == NULL)
        return -1;
    int ok = Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
             ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX;
    if (ok)
        *offset = ((PyMemberDescrObject *)descr)->d_member->offset;
    else
        PyErr_Format(PyExc_TypeError, "%R.%s is not a __slots__ member", type, name);
    Py_DECREF(descr);
    return ok ? 0 : -1;
}

typedef struct {
    const char *name;
    Py_ssize_t *offset;
} SlotName;

static int
offsets(PyObject *type, const SlotName *names)
{
    for (; names->name != NULL; names++) {
        if (slot_offset(type, names->name, names->offset) < 0)
            return -1;
    }
    return 0;
}

static int
take(PyObject *config, const char *key, PyObject **out)
{
    PyObject *value = PyDict_GetItemString(config, key);
    if (value == NULL) {
        PyErr_Format(PyExc_KeyError, "setup: missing %s", key);
        return -1;
    }
    Py_INCREF(value);
    Py_XSETREF(*out, value);
    return 0;
}

static int
take_type(PyObject *config, const char *key, PyTypeObject **out)
{
    PyObject *value = NULL;
    if (take(config, key, &value) < 0)
        return -1;
    if (!PyType_Check(value)) {
        Py_DECREF(value);
        PyErr_Format(PyExc_TypeError, "setup: %s is not a class", key);
        return -1;
    }
    Py_XSETREF(*out, (PyTypeObject *)value);
    return 0;
}

static int
intern(PyObject **out, const char *text)
{
    if (*out == NULL)
        *out = PyUnicode_InternFromString(text);
    return *out ? 0 : -1;
}

PyDoc_STRVAR(setup_doc,
"setup(config)\n\n"
"Hand over the classes, functions and state the compiled path works on (a dict; see\n"
"launch/hotpath.py). Checks that every slot it touches is a __slots__ member.");

static PyObject *
setup(PyObject *module, PyObject *config)
{
    if (!PyDict_Check(config)) {
        PyErr_SetString(PyExc_TypeError, "setup takes a dict");
        return NULL;
    }
    ready = 0;
    if (One == NULL && (One = PyLong_FromLong(1)) == NULL)
        return NULL;
    if (intern(&s_stream, "stream") || intern(&s_where, "where") || intern(&s_index, "index") ||
        intern(&s_execute, "_execute") ||
        intern(&s_unsafe, "_unsafe") || intern(&s_plans, "_plans") || intern(&s_name, "name") ||
        intern(&s_launch, "launch") || intern(&s_launch_count, "launch_count") ||
        intern(&s_run_prepared, "_run_prepared") || intern(&s_synchronize, "synchronize") ||
        intern(&s_native_address, "native_address") || intern(&s_kind, "kind") ||
        intern(&s_enqueues_only, "enqueues_only") || intern(&s_driven, "driven") ||
        intern(&s_consume, "_consume") || intern(&s_only_enqueues, "_only_enqueues") ||
        intern(&s_then_how, "extended with .then()") || intern(&s_spend, "_spend") ||
        intern(&s_spend_why, "was borrowed by a launch that completed") ||
        intern(&s_cuda, "cuda") || intern(&s_unknown, "<unknown>") ||
        intern(&s_fn_launch, "cuLaunchKernel") || intern(&s_fn_launch_ex, "cuLaunchKernelEx") ||
        intern(&s_fn_sync, "cuStreamSynchronize"))
        return NULL;
    if (take_type(config, "LaunchOp", &LaunchOpType) || take_type(config, "PreparedLaunch",
            &PreparedType) || take_type(config, "LaunchPlan", &PlanType) ||
        take_type(config, "Loan", &LoanType) || take_type(config, "Chain", &ChainType) ||
        take_type(config, "Allocation", &AllocationType) ||
        take_type(config, "Stream", &StreamType) ||
        take_type(config, "PackedLaunch", &PackedType) ||
        take_type(config, "Tensor", &TensorType) ||
        take_type(config, "Partition", &PartitionType) ||
        take_type(config, "ReplayBorrows", &ReplayBorrowsType) ||
        take(config, "DeviceOp", &DeviceOpType) || take(config, "epoch", &Epoch) ||
        take(config, "current", &CurrentLocal) || take(config, "drive", &DriveLocal) ||
        take(config, "thread", &ThreadLocal) || take(config, "holders", &Holders) ||
        take(config, "holder", &HolderFn) || take(config, "take_loans", &TakeLoansFn) ||
        take(config, "fail", &FailFn) ||
        take(config, "next_stream", &NextStreamFn) ||
        take(config, "driver_calls", &DriverCalls) ||
        take(config, "pool_cycles", &PoolCycles) ||
        take(config, "slow_execute", &SlowExecute) ||
        take(config, "slow_perform", &SlowPerform) || take(config, "slow_sync", &SlowSync) ||
        take(config, "slow_then", &SlowThen) ||
        take(config, "slow_synchronize", &SlowSynchronize) ||
        take(config, "ledger", &Ledger) ||
        take(config, "slow_chain_perform", &SlowChainPerform) ||
        take(config, "slow_replay_lend", &SlowReplayLend) ||
        take(config, "slow_chain_enqueue_while", &SlowChainEnqueueWhile) ||
        take(config, "ChainRest", &ChainRestType) ||
        take(config, "context_switches", &ContextSwitches))
        return NULL;
    Py_XSETREF(LedgerAcquire, PyObject_GetAttrString(Ledger, "acquire"));
    Py_XSETREF(LedgerRelease, PyObject_GetAttrString(Ledger, "release"));
    if (LedgerAcquire == NULL || LedgerRelease == NULL)
        return NULL;
    PyObject *functions = PyDict_GetItemString(config, "ledger_functions");
    LedgerAcquireC = LedgerReleaseC = NULL;
    if (functions != NULL && functions != Py_None) {
        if (!PyTuple_Check(functions) || PyTuple_GET_SIZE(functions) != 2) {
            PyErr_SetString(PyExc_TypeError, "setup: ledger_functions is (acquire, release)");
            return NULL;
        }
        LedgerAcquireC = (LedgerFunction)PyLong_AsVoidPtr(PyTuple_GET_ITEM(functions, 0));
        LedgerReleaseC = (LedgerFunction)PyLong_AsVoidPtr(PyTuple_GET_ITEM(functions, 1));
        if (PyErr_Occurred())
            return NULL;
    }
    if (LocationType == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "setup: setup_callsite() first");
        return NULL;
    }
    Py_XSETREF(DriverCallsDict, PyObject_GenericGetDict(DriverCalls, NULL));
    if (DriverCallsDict == NULL)
        return NULL;
    if (!PyList_Check(Epoch) || PyList_GET_SIZE(Epoch) != 1 || !PyDict_Check(Holders) ||
        !PyDict_Check(PoolCycles) || !PyList_Check(ContextSwitches) ||
        PyList_GET_SIZE(ContextSwitches) != 1) {
        PyErr_SetString(PyExc_TypeError, "setup: unexpected state objects");
        return NULL;
    }
    const SlotName op[] = {{"_run", &op_run}, {"_label", &op_label}, {"device", &op_device},
        {"_driven_at", &op_driven_at}, {"_kernel", &op_kernel}, {"_args", &op_args},
        {"_grid", &op_grid}, {"_where", &op_where}, {"_early", &op_early},
        {"_early_stream", &op_early_stream}, {NULL, NULL}};
    const SlotName prepared[] = {{"specialization", &pl_spec}, {"grid", &pl_grid},
        {"args", &pl_args}, {"loans", &pl_loans}, {"where", &pl_where},
        {"device", &pl_device}, {"plan", &pl_plan}, {NULL, NULL}};
    const SlotName plan[] = {{"args", &plan_args}, {"epoch", &plan_epoch},
        {"specialization", &plan_spec}, {"grid", &plan_grid}, {"device", &plan_device},
        {"borrows", &plan_borrows}, {"bound", &plan_bound},
        {"borrowed_partitions", &plan_borrowed}, {"stream_loans", &plan_stream_loans},
        {NULL, NULL}};
    const SlotName loan[] = {{"allocation", &loan_allocation}, {"lo", &loan_lo},
        {"hi", &loan_hi}, {"mutable", &loan_mutable}, {"holder", &loan_holder},
        {"where", &loan_where}, {"stream", &loan_stream}, {"count", &loan_count},
        {NULL, NULL}};
    const SlotName chain[] = {{"_first", &chain_first}, {"_steps", &chain_steps},
        {"_length", &chain_length}, {NULL, NULL}};
    const SlotName stream[] = {{"device", &st_device}, {"_pending", &st_pending},
        {"_spent", &st_spent}, {"_native_address", &st_native_address}, {NULL, NULL}};
    const SlotName packed[] = {{"function", &pk_function}, {"grid", &pk_grid},
        {"index", &pk_index}, {"address", &pk_address}, {"programmatic", &pk_programmatic},
        {NULL, NULL}};
    const SlotName allocation[] = {{"loans", &alloc_loans}, {NULL, NULL}};
    const SlotName replay_borrows[] = {{"borrows", &rb_borrows},
        {"checked_epoch", &rb_checked_epoch}, {"stream_loans", &rb_stream_loans}, {NULL, NULL}};
    Py_ssize_t chain_run, chain_label, chain_device, chain_driven;
    const SlotName chain_base[] = {{"_run", &chain_run}, {"_label", &chain_label},
        {"device", &chain_device}, {"_driven_at", &chain_driven}, {NULL, NULL}};
    if (offsets((PyObject *)LaunchOpType, op) || offsets((PyObject *)PreparedType, prepared) ||
        offsets((PyObject *)PlanType, plan) || offsets((PyObject *)LoanType, loan) ||
        offsets((PyObject *)ChainType, chain) || offsets((PyObject *)StreamType, stream) ||
        offsets((PyObject *)PackedType, packed) ||
        offsets((PyObject *)AllocationType, allocation) ||
        offsets((PyObject *)ReplayBorrowsType, replay_borrows) ||
        offsets((PyObject *)ChainType, chain_base))
        return NULL;
    /* both op classes share DeviceOp's slots (written through the LaunchOp offsets) */
    if (chain_run != op_run || chain_label != op_label || chain_device != op_device ||
        chain_driven != op_driven_at) {
        PyErr_SetString(PyExc_TypeError, "setup: _Chain and LaunchOp lay out DeviceOp apart");
        return NULL;
    }
    ready = 1;
    Py_RETURN_NONE;
}

static PyMethodDef kernel_call_def = {
    "__call__", (PyCFunction)(void (*)(void))kernel_call, METH_FASTCALL,
    "A lazy launch of the kernel with these arguments (see Kernel.launch)."};
static PyMethodDef launch_execute_def = {
    "_execute", launch_execute, METH_O, "Run on the stream (once)."};
static PyMethodDef launch_sync_def = {
    "sync", launch_sync, METH_NOARGS,
    "Run on the device's next pool stream and wait for it."};
static PyMethodDef launch_del_def = {
    "__del__", launch_del, METH_NOARGS,
    "An op dropped without being driven (or recorded) gives its loans back."};
static PyMethodDef chain_then_def = {
    "then", chain_then, METH_O, "Extend the chain with another step (see DeviceOp.then)."};
static PyMethodDef chain_perform_def = {
    "_perform", chain_perform, METH_O, "Run the first op and every step on the stream."};
static PyMethodDef chain_enqueue_while_def = {
    "_enqueue_while_only_enqueueing", chain_enqueue_while, METH_O,
    "Run the chain's steps while each only enqueues device work (see DeviceOp)."};
static PyMethodDef stream_synchronize_def = {
    "synchronize", stream_synchronize, METH_NOARGS,
    "Wait for the stream's work, then end the loans registered before the wait."};

static PyMethodDef replay_lend_def = {
    "lend", (PyCFunction)(void (*)(void))replay_lend, METH_FASTCALL,
    "Check the arguments and lend each distinct tensor once, for one replay on the stream."};

static PyMethodDef *const installable[] = {&kernel_call_def, &launch_execute_def,
    &launch_sync_def, &launch_del_def, &chain_then_def, &chain_perform_def,
    &chain_enqueue_while_def, &stream_synchronize_def, &replay_lend_def, NULL};

PyDoc_STRVAR(method_doc,
"method(cls, name) -> descriptor\n\n"
"The compiled version of the method `name` of `cls`, as a method descriptor to set on the\n"
"class. Known: Kernel.__call__, LaunchOp._execute/sync/__del__, _Chain.then/_perform/\n"
"_enqueue_while_only_enqueueing, "
"Stream.synchronize and ReplayBorrows.lend (setup() first).");

static PyObject *
method(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[0]) || !PyUnicode_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "method(cls, name)");
        return NULL;
    }
    if (!ready) {
        PyErr_SetString(PyExc_RuntimeError, "tilesafe.launch._hotpath: setup() first");
        return NULL;
    }
    for (PyMethodDef *const *def = installable; *def != NULL; def++) {
        if (PyUnicode_CompareWithASCIIString(args[1], (*def)->ml_name) == 0)
            return PyDescr_NewMethod((PyTypeObject *)args[0], *def);
    }
    PyErr_Format(PyExc_KeyError, "no compiled method %R", args[1]);
    return NULL;
}

static PyMethodDef methods[] = {
    {"setup", setup, METH_O, setup_doc},
    {"method", (PyCFunction)(void (*)(void))method, METH_FASTCALL, method_doc},
    {"setup_callsite", (PyCFunction)(void (*)(void))setup_callsite, METH_FASTCALL,
     setup_callsite_doc},
    {"caller_location", py_caller_location, METH_NOARGS,
     "The file:line of the innermost frame that is not tilesafe's own code."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT, "tilesafe.launch._hotpath",
    "The repeated-launch path in C (see launch/hotpath.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__hotpath(void)
{
    return PyModule_Create(&module_definition);
}
