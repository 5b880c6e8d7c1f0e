/* Launch plans (launch/checks.py): LaunchPlan, a validated launch reusable while the same
 * argument objects are passed again and no ownership changed since, and PreparedLaunch, one
 * launch of a plan with its loans. */
#include "fastpath.h"

/* ---- LaunchPlan -------------------------------------------------------------------------- */

FIELDS_FUNCS(plan, PLAN_FIELDS)

static PyObject *
plan_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"args", "epoch", "specialization", "grid", "device", "borrows",
                            "borrowed_partitions", "result", NULL};
    PyObject *v[8];
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOOOO:LaunchPlan", names, &v[0], &v[1],
                                     &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]))
        return NULL;
    PyObject *self = type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    for (int i = 0; i < 8; i++)  /* PLAN_ARGS .. PLAN_RESULT */
        field_set(&FIELD(self, i), v[i]);
    PyObject *none_pair = PyTuple_Pack(2, Py_None, s_empty_tuple);
    if (none_pair == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    field_set(&FIELD(self, PLAN_BOUND), Py_None);
    FIELD(self, PLAN_STREAM_LOANS) = none_pair;
    field_set(&FIELD(self, PLAN_DRIVER), Py_None);
    return self;
}

static PyObject *
plan_get_bound(PyObject *self, void *closure)
{
    PyObject *bound = FIELD(self, PLAN_BOUND) ? FIELD(self, PLAN_BOUND) : Py_None;
    Py_INCREF(bound);
    return bound;
}

/* setting ``bound`` also keeps its driver launch (PackedLaunch.driver_launch), if it has one */
static int
plan_set_bound(PyObject *self, PyObject *value, void *closure)
{
    if (value == NULL)
        value = Py_None;
    PyObject *driver = Py_None;
    Py_INCREF(driver);
    if (value != Py_None) {
        Py_DECREF(driver);
        driver = local_get(value, s_driver_launch);
        if (driver == NULL)
            return -1;
        if (driver != Py_None &&
            (!PyTuple_Check(driver) || PyTuple_GET_SIZE(driver) != DRIVER_ITEMS)) {
            Py_DECREF(driver);
            PyErr_SetString(PyExc_TypeError, "driver_launch is (function, gx, gy, gz, "
                            "parameters, programmatic, device index)");
            return -1;
        }
    }
    field_set(&FIELD(self, PLAN_BOUND), value);
    Py_XSETREF(FIELD(self, PLAN_DRIVER), driver);
    return 0;
}

static PyGetSetDef plan_getset[] = {
    {"bound", plan_get_bound, plan_set_bound,
     "The backend's launch with its arguments marshalled (made at the first run).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef plan_members[] = {
    FIELDS_MEMBER("args", PLAN_ARGS), FIELDS_MEMBER("epoch", PLAN_EPOCH),
    FIELDS_MEMBER("specialization", PLAN_SPEC), FIELDS_MEMBER("grid", PLAN_GRID),
    FIELDS_MEMBER("device", PLAN_DEVICE), FIELDS_MEMBER("borrows", PLAN_BORROWS),
    FIELDS_MEMBER("borrowed_partitions", PLAN_BORROWED), FIELDS_MEMBER("result", PLAN_RESULT),
    FIELDS_MEMBER("stream_loans", PLAN_STREAM_LOANS),
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject LaunchPlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tilesafe._fastpath.LaunchPlan",
    .tp_basicsize = FIELDS_SIZE(PLAN_FIELDS),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "What validating a launch found, reusable while the same argument objects are "
              "passed again and no ownership changed since (see launch/checks.py).",
    .tp_new = plan_new,
    .tp_traverse = plan_traverse,
    .tp_clear = plan_clear,
    .tp_dealloc = plan_dealloc,
    .tp_members = plan_members,
    .tp_getset = plan_getset,
};

/* ---- PreparedLaunch ---------------------------------------------------------------------- */

FIELDS_FUNCS(prepared, PREP_FIELDS)

static PyObject *
prepared_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"specialization", "grid", "args", "loans", "where", "device",
                            "plan", NULL};
    PyObject *v[PREP_FIELDS] = {NULL};
    v[PREP_PLAN] = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOO|O:PreparedLaunch", names, &v[0],
                                     &v[1], &v[2], &v[3], &v[4], &v[5], &v[6]))
        return NULL;
    PyObject *self = type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    for (int i = 0; i < PREP_FIELDS; i++)
        field_set(&FIELD(self, i), v[i]);
    return self;
}

static PyMemberDef prepared_members[] = {
    FIELDS_MEMBER("specialization", PREP_SPEC), FIELDS_MEMBER("grid", PREP_GRID),
    FIELDS_MEMBER("args", PREP_ARGS), FIELDS_MEMBER("loans", PREP_LOANS),
    FIELDS_MEMBER("where", PREP_WHERE), FIELDS_MEMBER("device", PREP_DEVICE),
    FIELDS_MEMBER("plan", PREP_PLAN),
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject PreparedLaunchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tilesafe._fastpath.PreparedLaunch",
    .tp_basicsize = FIELDS_SIZE(PREP_FIELDS),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A validated launch: specialization, grid, arguments, loans, the user's line, "
              "device and plan (see launch/checks.py).",
    .tp_new = prepared_new,
    .tp_traverse = prepared_traverse,
    .tp_clear = prepared_clear,
    .tp_dealloc = prepared_dealloc,
    .tp_members = prepared_members,
};

