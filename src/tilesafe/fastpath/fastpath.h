/* tilesafe._fastpath: shared declarations of the compiled fast path (see module.c).
 *
 * The module owns the state of the objects a repeated launch touches, as C types that the
 * Python classes derive from (each has a Python definition of the same name and behaviour,
 * used when this module was not built):
 *
 *   Loan            driver/ledger.py        a borrow of a byte range (ledger.c)
 *   StreamCore      driver/stream.py        a stream's pending loans and its wait (stream.c)
 *   OpCore          deviceops/deviceop.py   every DeviceOp's state (ops.c)
 *   ChainCore       deviceops/deviceop.py   a .then chain and its step loop (ops.c)
 *   LaunchPlan      launch/checks.py        a validated launch, reusable (launch.c)
 *   PreparedLaunch  launch/checks.py        one launch of a plan, with its loans (launch.c)
 *   LaunchCore      launch/op.py            a launch op: sync, _execute, drop (launch.c)
 *   KernelCore      kernel.py               a kernel's call on a cached plan (launch.c)
 *
 * Each object's fields are an array of references (``f``), named by the enums below and
 * exposed to Python as members of the same names as the Python definitions' slots. The C code
 * reads only these types' own fields; everything else it reaches through Python attributes
 * and calls, or through the objects each layer hands over with configure().
 */
#ifndef TILESAFE_FASTPATH_H
#define TILESAFE_FASTPATH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>

/* ---- layouts ---------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *f[1];  /* (really as many as the type has fields) */
} FieldsObject;

typedef struct {
    PyObject_HEAD
    PyObject *weakreflist;
    PyObject *f[1];
} OpObject;

#define FIELD(obj, i) (((FieldsObject *)(obj))->f[i])
#define OPFIELD(obj, i) (((OpObject *)(obj))->f[i])
#define FIELDS_SIZE(n) (offsetof(FieldsObject, f) + (n) * sizeof(PyObject *))
#define OP_SIZE(n) (offsetof(OpObject, f) + (n) * sizeof(PyObject *))

enum { LOAN_BOOK, LOAN_LO, LOAN_HI, LOAN_MUTABLE, LOAN_HOLDER, LOAN_WHERE, LOAN_STREAM,
       LOAN_FIELDS };
typedef struct {
    PyObject_HEAD
    PyObject *f[LOAN_FIELDS];
    Py_ssize_t count;
} LoanObject;

enum { STREAM_DEVICE, STREAM_PENDING, STREAM_SPENT, STREAM_NATIVE_ADDRESS, STREAM_FIELDS };

enum { OP_DEVICE, OP_DRIVEN_AT, OP_RUN, OP_LABEL, OP_FIELDS };
enum { CHAIN_FIRST = OP_FIELDS, CHAIN_STEPS, CHAIN_LENGTH, CHAIN_FIELDS };
enum { LAUNCH_KERNEL = OP_FIELDS, LAUNCH_ARGS, LAUNCH_GRID, LAUNCH_WHERE, LAUNCH_EARLY,
       LAUNCH_EARLY_STREAM, LAUNCH_FIELDS };

enum { PLAN_ARGS, PLAN_EPOCH, PLAN_SPEC, PLAN_GRID, PLAN_DEVICE, PLAN_BORROWS, PLAN_BORROWED,
       PLAN_RESULT, PLAN_BOUND, PLAN_STREAM_LOANS, PLAN_DRIVER, PLAN_FIELDS };
enum { PREP_SPEC, PREP_GRID, PREP_ARGS, PREP_LOANS, PREP_WHERE, PREP_DEVICE, PREP_PLAN,
       PREP_FIELDS };

enum { KERNEL_NAME, KERNEL_UNSAFE, KERNEL_PLANS, KERNEL_FIELDS };
typedef struct {
    PyObject_HEAD
    PyObject *f[KERNEL_FIELDS];
    Py_ssize_t launch_count;
} KernelObject;

/* the driver launch tuple of a plan (PackedLaunch.driver_launch) */
enum { DRIVER_FUNCTION, DRIVER_GX, DRIVER_GY, DRIVER_GZ, DRIVER_ADDRESS, DRIVER_PROGRAMMATIC,
       DRIVER_INDEX, DRIVER_ITEMS };

extern PyTypeObject LoanType, StreamCoreType, OpCoreType, ChainCoreType, LaunchPlanType,
    PreparedLaunchType, LaunchCoreType, KernelCoreType;

void field_set(PyObject **slot, PyObject *value);  /* new reference to value, old released */
int fields_traverse(PyObject **f, int n, visitproc visit, void *arg);
void fields_clear(PyObject **f, int n);

#define FIELDS_MEMBER(name, field) \
    {name, T_OBJECT_EX, offsetof(FieldsObject, f) + (field) * sizeof(PyObject *), 0, NULL}
#define OP_MEMBER(name, field) \
    {name, T_OBJECT_EX, offsetof(OpObject, f) + (field) * sizeof(PyObject *), 0, NULL}

/* the traverse, clear and dealloc of a type whose fields are an array of N references */
#define FIELDS_FUNCS(prefix, N)                                                            \
    static int prefix##_traverse(PyObject *self, visitproc visit, void *arg)              \
    {                                                                                      \
        return fields_traverse(((FieldsObject *)self)->f, N, visit, arg);                  \
    }                                                                                      \
    static int prefix##_clear(PyObject *self)                                              \
    {                                                                                      \
        fields_clear(((FieldsObject *)self)->f, N);                                        \
        return 0;                                                                          \
    }                                                                                      \
    static void prefix##_dealloc(PyObject *self)                                           \
    {                                                                                      \
        PyObject_GC_UnTrack(self);                                                         \
        prefix##_clear(self);                                                              \
        Py_TYPE(self)->tp_free(self);                                                      \
    }

/* the traverse, clear and dealloc of an op type (with a weak reference list) of N fields */
static inline int
op_traverse_n(PyObject *self, visitproc visit, void *arg, int n)
{
    return fields_traverse(((OpObject *)self)->f, n, visit, arg);
}

static inline void
op_dealloc_n(PyObject *self, int n)
{
    PyObject_GC_UnTrack(self);
    if (((OpObject *)self)->weakreflist != NULL)
        PyObject_ClearWeakRefs(self);
    fields_clear(((OpObject *)self)->f, n);
    Py_TYPE(self)->tp_free(self);
}

#define OP_FUNCS(prefix, N)                                                                \
    static int prefix##_traverse(PyObject *self, visitproc visit, void *arg)              \
    {                                                                                      \
        return op_traverse_n(self, visit, arg, N);                                         \
    }                                                                                      \
    static int prefix##_clear(PyObject *self)                                              \
    {                                                                                      \
        fields_clear(((OpObject *)self)->f, N);                                            \
        return 0;                                                                          \
    }                                                                                      \
    static void prefix##_dealloc(PyObject *self) { op_dealloc_n(self, N); }

/* ---- what the layers hand over (configure) --------------------------------------------- */

typedef struct {
    PyObject *epoch;            /* driver.ledger._EPOCH, a one-item list */
    PyObject *ledger;           /* driver.ledger.LEDGER */
    PyObject *take_loans;       /* driver.ledger.take_loans (checks, raises BorrowError) */
    PyObject *driver_calls;     /* driver.cuda._DRIVER_CALLS */
    PyObject *driver_calls_dict;/* its instance dict, where its calls are set */
    PyObject *fail;             /* driver.cuda._fail(err, what): raises CudaError */
    PyObject *thread;           /* driver.cuda._THREAD (.index) */
    PyObject *context_switches; /* driver.cuda._CONTEXT_SWITCHES, a one-item list */
    PyObject *current;          /* driver.stream._CURRENT (.stream) */
    PyObject *pool_cycles;      /* driver.stream._POOL._cycles */
    PyObject *next_stream;      /* driver.stream.next_stream */
    PyObject *DeviceOp;         /* deviceops.deviceop.DeviceOp */
    PyObject *drive;            /* deviceops.deviceop._DRIVE (.where) */
    PyObject *ChainRest;        /* deviceops.deviceop._ChainRest */
    PyObject *deviceop_sync;    /* DeviceOp.sync (a launch that is not ready hands over) */
    PyObject *deviceop_execute; /* DeviceOp._execute */
    PyObject *Tensor;           /* host.tensor.Tensor */
    PyObject *Partition;        /* host.partition.Partition */
    PyObject *holders;          /* launch.checks._HOLDERS */
    PyObject *holder;           /* launch.checks._holder */
    PyObject *LaunchOp;         /* launch.op.LaunchOp */
} Config;

extern Config config;
extern int configured;

/* interned names */
extern PyObject *s_stream, *s_where, *s_index, *s_execute, *s_launch, *s_run_prepared,
    *s_synchronize, *s_native_address, *s_kind, *s_driven, *s_consume, *s_only_enqueues,
    *s_then_how, *s_spend, *s_spend_why, *s_cuda, *s_unknown, *s_fn_launch, *s_fn_launch_ex,
    *s_fn_sync, *s_driver_launch, *s_on_complete, *s_perform, *s_platform, *s_enqueues_only,
    *s_early_epoch, *s_empty_tuple;

/* ---- module.c ---------------------------------------------------------------------------- */
int ensure_configured(void);
int ledger_acquire(void);
void ledger_release(void);
PyObject *local_get(PyObject *local, PyObject *name);
PyObject *caller_location(void);
PyObject *driver_call(PyObject *name);
PyObject *fail(PyObject *err, PyObject *what);

/* ---- ledger.c ---------------------------------------------------------------------------- */
PyObject *lend(PyObject *book, PyObject *lo, PyObject *hi, PyObject *mutable, PyObject *holder,
               PyObject *where, PyObject *stream);
int release_all(PyObject *loans);
PyObject *shared_or_new_loans(PyObject **stream_loans, PyObject *borrows, PyObject *holder,
                              PyObject *where, PyObject *stream);
PyObject *py_shared_or_new_loans(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* ---- stream.c ---------------------------------------------------------------------------- */
PyObject *next_stream(PyObject *device);
PyObject *synchronize_stream(PyObject *stream);
int register_completion(PyObject *stream, PyObject *loans, PyObject *borrowed, PyObject *where);
int is_cuda(PyObject *device);

/* ---- ops.c ------------------------------------------------------------------------------- */
int mark_driven(PyObject *op, PyObject *how, PyObject *where);
long context_switches(void);

/* ---- launch.c ---------------------------------------------------------------------------- */
PyObject *execute_launch(PyObject *op, PyObject *stream, PyObject *drive_where,
                         PyObject *thread_index);
int launch_only_enqueues(PyObject *op, PyObject *stream);

#endif
