/* DeviceOps (deviceops/deviceop.py): OpCore, every op's state (device, where it was driven,
 * the function and label of an op made from one), and ChainCore, a .then chain's first op and
 * steps with its step loop (then, _perform, _enqueue_while_only_enqueueing). */
#include "fastpath.h"

OP_FUNCS(op, OP_FIELDS)
OP_FUNCS(chain, CHAIN_FIELDS)

static PyMemberDef op_members[] = {
    OP_MEMBER("device", OP_DEVICE), OP_MEMBER("_driven_at", OP_DRIVEN_AT),
    OP_MEMBER("_run", OP_RUN), OP_MEMBER("_label", OP_LABEL),
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject OpCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tilesafe._fastpath.OpCore",
    .tp_basicsize = OP_SIZE(OP_FIELDS),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .tp_doc = "What every DeviceOp keeps (the base of tilesafe.DeviceOp).",
    .tp_new = PyType_GenericNew,
    .tp_traverse = op_traverse,
    .tp_clear = op_clear,
    .tp_dealloc = op_dealloc,
    .tp_members = op_members,
    .tp_weaklistoffset = offsetof(OpObject, weakreflist),
};

/* ---- driving ---------------------------------------------------------------------------- */

static PyObject *last_driven;  /* (how, where) tuples are immutable: a drive loop shares one */

/* op._driven_at = (how, where) */
int
mark_driven(PyObject *op, PyObject *how, PyObject *where)
{
    if (last_driven == NULL || PyTuple_GET_ITEM(last_driven, 0) != how ||
        PyTuple_GET_ITEM(last_driven, 1) != where) {
        PyObject *driven = PyTuple_Pack(2, how, where);
        if (driven == NULL)
            return -1;
        Py_XSETREF(last_driven, driven);
    }
    field_set(&OPFIELD(op, OP_DRIVEN_AT), last_driven);
    return 0;
}

/* driver.cuda._CONTEXT_SWITCHES[0]: bumped by make_current */
long
context_switches(void)
{
    return PyLong_AsLong(PyList_GET_ITEM(config.context_switches, 0));
}

static int
is_device_op(PyObject *value)
{
    return PyObject_IsInstance(value, config.DeviceOp);
}

/* Whether running ``op`` on ``stream`` only enqueues device work (DeviceOp._only_enqueues;
 * a result that is no DeviceOp passes through a chain): 1, 0, or -1 with an error set. */
static int
only_enqueues(PyObject *op, PyObject *stream)
{
    if (PyObject_TypeCheck(op, &LaunchCoreType))
        return launch_only_enqueues(op, stream);
    int pending = is_device_op(op);
    if (pending <= 0)
        return pending < 0 ? -1 : 1;
    PyObject *answer = PyObject_CallMethodOneArg(op, s_only_enqueues, stream);
    if (answer == NULL)
        return -1;
    int yes = PyObject_IsTrue(answer);
    Py_DECREF(answer);
    return yes;
}

/* ---- ChainCore ------------------------------------------------------------------------- */

/* The steps of a chain on ``stream``, after its first op (whose result is ``first``). The
 * drive's location is looked up once (a step that drives ops of its own puts it back before
 * it returns), and so is the thread's current context, again only after a step or launch
 * made another one current. With ``resume_at`` (not NULL), the steps stop at the first op
 * that does more than enqueue, which is returned unrun with *resume_at set to the index of
 * the step after it (-1: every step ran). deviceop._run_steps defines it. */
static PyObject *
run_steps(PyObject *chain, PyObject *stream, PyObject *first, Py_ssize_t *resume_at)
{
    PyObject *where = local_get(config.drive, s_where);
    if (where == NULL)
        return NULL;
    long switches = context_switches();
    PyObject *index = local_get(config.thread, s_index);
    if (index == NULL || (switches == -1 && PyErr_Occurred())) {
        Py_XDECREF(index);
        Py_DECREF(where);
        return NULL;
    }
    PyObject *result = PyObject_TypeCheck(first, &LaunchCoreType)
                           ? execute_launch(first, stream, where, index)
                           : PyObject_CallMethodOneArg(first, s_execute, stream);
    PyObject *steps = OPFIELD(chain, CHAIN_STEPS);
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
            Py_SETREF(index, local_get(config.thread, s_index));
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
        if (PyObject_TypeCheck(result, &LaunchCoreType)) {
            Py_SETREF(result, execute_launch(result, stream, where, index));
        } else {
            int pending = is_device_op(result);
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

static int
chain_ready(PyObject *chain)
{
    if (ensure_configured() < 0)
        return -1;
    PyObject *steps = OPFIELD(chain, CHAIN_STEPS), *first = OPFIELD(chain, CHAIN_FIRST);
    if (steps == NULL || !PyList_Check(steps) || first == NULL) {
        PyErr_SetString(PyExc_TypeError, "a chain's first op and steps are not set");
        return -1;
    }
    return 0;
}

/* ChainCore._perform: the first op, then each step's function and the op it returns, all on
 * ``stream`` */
static PyObject *
chain_perform(PyObject *chain, PyObject *stream)
{
    if (chain_ready(chain) < 0)
        return NULL;
    return run_steps(chain, stream, OPFIELD(chain, CHAIN_FIRST), NULL);
}

/* ChainCore._enqueue_while_only_enqueueing: (True, result) when every step only enqueued,
 * else (False, rest), rest being the chain itself (its first op does more) or a _ChainRest */
static PyObject *
chain_enqueue_while(PyObject *chain, PyObject *stream)
{
    if (chain_ready(chain) < 0)
        return NULL;
    PyObject *first = OPFIELD(chain, CHAIN_FIRST);
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
    PyObject *result = run_steps(chain, stream, first, &resume_at);
    if (result == NULL)
        return NULL;
    if (resume_at < 0) {
        PyObject *finished = PyTuple_Pack(2, Py_True, result);
        Py_DECREF(result);
        return finished;
    }
    PyObject *start = PyLong_FromSsize_t(resume_at);
    PyObject *rest = start ? PyObject_CallFunctionObjArgs(config.ChainRest, chain, result,
                                                         start, NULL) : NULL;
    Py_XDECREF(start);
    Py_DECREF(result);
    if (rest == NULL)
        return NULL;
    PyObject *unfinished = PyTuple_Pack(2, Py_False, rest);
    Py_DECREF(rest);
    return unfinished;
}

/* ChainCore.then: this chain is consumed and a new one (of the same class) takes its steps
 * with ``fn`` appended */
static PyObject *
chain_then(PyObject *chain, PyObject *fn)
{
    if (chain_ready(chain) < 0)
        return NULL;
    if (OPFIELD(chain, OP_DRIVEN_AT) != NULL && OPFIELD(chain, OP_DRIVEN_AT) != Py_None) {
        /* DeviceOp._consume raises the error of a second use */
        PyObject *r = PyObject_CallMethodOneArg(chain, s_consume, s_then_how);
        if (r != NULL) {
            Py_DECREF(r);
            PyErr_SetString(PyExc_RuntimeError, "a driven chain was extended");
        }
        return NULL;
    }
    PyObject *where = caller_location();
    if (where == NULL)
        return NULL;
    int marked = mark_driven(chain, s_then_how, where);
    Py_DECREF(where);
    PyObject *steps = OPFIELD(chain, CHAIN_STEPS);
    if (marked < 0 || PyList_Append(steps, fn) < 0)
        return NULL;
    PyObject *length = PyLong_FromSsize_t(PyList_GET_SIZE(steps));
    PyTypeObject *type = Py_TYPE(chain);
    PyObject *next = length ? type->tp_alloc(type, 0) : NULL;
    if (next == NULL) {
        Py_XDECREF(length);
        return NULL;
    }
    field_set(&OPFIELD(next, OP_RUN), Py_None);
    field_set(&OPFIELD(next, OP_LABEL), Py_None);
    field_set(&OPFIELD(next, OP_DRIVEN_AT), Py_None);
    field_set(&OPFIELD(next, OP_DEVICE), OPFIELD(chain, OP_DEVICE));
    field_set(&OPFIELD(next, CHAIN_FIRST), OPFIELD(chain, CHAIN_FIRST));
    field_set(&OPFIELD(next, CHAIN_STEPS), steps);
    OPFIELD(next, CHAIN_LENGTH) = length;
    return next;
}

static PyMemberDef chain_members[] = {
    OP_MEMBER("_first", CHAIN_FIRST), OP_MEMBER("_steps", CHAIN_STEPS),
    OP_MEMBER("_length", CHAIN_LENGTH),
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef chain_methods[] = {
    {"then", chain_then, METH_O,
     "Extend the chain (see DeviceOp.then); this chain is consumed and hands its steps on."},
    {"_perform", chain_perform, METH_O, "Run the first op and every step on the stream."},
    {"_enqueue_while_only_enqueueing", chain_enqueue_while, METH_O,
     "Run the chain's steps while each only enqueues device work (see DeviceOp)."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject ChainCoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tilesafe._fastpath.ChainCore",
    .tp_basicsize = OP_SIZE(CHAIN_FIELDS),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A .then chain's first op and steps, run as a loop (the base of the chain op).",
    .tp_base = &OpCoreType,
    .tp_new = PyType_GenericNew,
    .tp_traverse = chain_traverse,
    .tp_clear = chain_clear,
    .tp_dealloc = chain_dealloc,
    .tp_members = chain_members,
    .tp_methods = chain_methods,
};
