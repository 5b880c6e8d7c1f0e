/* Loans (driver/ledger.py): the Loan type and the C versions of lend, release, release_all
 * and shared_or_new_loans, which the Python definitions in driver/ledger.py define. A loan
 * book is a list of loans (an allocation's ``loans``); a borrow is the tuple
 * (book, lo, hi, mutable, action). */
#include "fastpath.h"

#define LOAN(obj) ((LoanObject *)(obj))

static PyObject *
loan_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"book", "lo", "hi", "mutable", "holder", "where", "stream", NULL};
    PyObject *v[LOAN_FIELDS] = {NULL};
    v[LOAN_STREAM] = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOOO|O:Loan", names, &v[0], &v[1],
                                     &v[2], &v[3], &v[4], &v[5], &v[6]))
        return NULL;
    PyObject *self = type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    for (int i = 0; i < LOAN_FIELDS; i++)
        field_set(&LOAN(self)->f[i], v[i]);
    LOAN(self)->count = 1;
    return self;
}

FIELDS_FUNCS(loan, LOAN_FIELDS)

#define LOAN_MEMBER(name, field) \
    {name, T_OBJECT_EX, offsetof(LoanObject, f) + (field) * sizeof(PyObject *), 0, NULL}

static PyMemberDef loan_members[] = {
    LOAN_MEMBER("book", LOAN_BOOK), LOAN_MEMBER("lo", LOAN_LO), LOAN_MEMBER("hi", LOAN_HI),
    LOAN_MEMBER("mutable", LOAN_MUTABLE), LOAN_MEMBER("holder", LOAN_HOLDER),
    LOAN_MEMBER("where", LOAN_WHERE), LOAN_MEMBER("stream", LOAN_STREAM),
    {"count", T_PYSSIZET, offsetof(LoanObject, count), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject LoanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tilesafe._fastpath.Loan",
    .tp_basicsize = sizeof(LoanObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A borrow of [lo, hi) bytes of the memory whose loans `book` lists, by pending "
              "work `holder`; `count` uses of the same range by work on one stream share it.",
    .tp_new = loan_new,
    .tp_traverse = loan_traverse,
    .tp_clear = loan_clear,
    .tp_dealloc = loan_dealloc,
    .tp_members = loan_members,
};

static PyObject *
new_loan(PyObject *book, PyObject *lo, PyObject *hi, PyObject *mutable, PyObject *holder,
         PyObject *where, PyObject *stream)
{
    PyObject *loan = LoanType.tp_alloc(&LoanType, 0);
    if (loan == NULL)
        return NULL;
    PyObject *v[LOAN_FIELDS] = {book, lo, hi, mutable, holder, where, stream};
    for (int i = 0; i < LOAN_FIELDS; i++)
        field_set(&LOAN(loan)->f[i], v[i]);
    LOAN(loan)->count = 1;
    return loan;
}

/* ledger.lend: one more use of a loan of the same range on the same stream, or a new loan
 * appended to the book. A new reference. */
PyObject *
lend(PyObject *book, PyObject *lo, PyObject *hi, PyObject *mutable, PyObject *holder,
     PyObject *where, PyObject *stream)
{
    if (!PyList_Check(book)) {
        PyErr_SetString(PyExc_TypeError, "a loan book is a list");
        return NULL;
    }
    if (stream != Py_None) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(book); i++) {
            PyObject *loan = PyList_GET_ITEM(book, i);
            if (Py_TYPE(loan) != &LoanType || LOAN(loan)->f[LOAN_STREAM] != stream)
                continue;
            int same = PyObject_RichCompareBool(LOAN(loan)->f[LOAN_LO], lo, Py_EQ);
            if (same > 0)
                same = PyObject_RichCompareBool(LOAN(loan)->f[LOAN_HI], hi, Py_EQ);
            if (same > 0)
                same = PyObject_RichCompareBool(LOAN(loan)->f[LOAN_MUTABLE], mutable, Py_EQ);
            if (same < 0)
                return NULL;
            if (same) {
                LOAN(loan)->count++;
                Py_INCREF(loan);
                return loan;
            }
        }
    }
    PyObject *loan = new_loan(book, lo, hi, mutable, holder, where, stream);
    if (loan != NULL && PyList_Append(book, loan) < 0)
        Py_CLEAR(loan);
    return loan;
}

/* ledger.release: end one use of a loan (a shared loan ends with its last use) */
static int
release(PyObject *loan)
{
    if (Py_TYPE(loan) != &LoanType) {
        PyErr_SetString(PyExc_TypeError, "not a Loan");
        return -1;
    }
    if (LOAN(loan)->count > 1) {
        LOAN(loan)->count--;
        return 0;
    }
    LOAN(loan)->count = 0;
    PyObject *book = LOAN(loan)->f[LOAN_BOOK];
    if (book != NULL && PyList_Check(book)) {
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(book); i++) {
            if (PyList_GET_ITEM(book, i) == loan)
                return PySequence_DelItem(book, i);
        }
    }
    return 0;  /* already released */
}

/* ledger.release_all: release every loan of the list (under the ledger) and empty it */
int
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

/* ledger.shared_or_new_loans (the caller holds the ledger and has seen the ownership epoch
 * unchanged): when the loans kept in *stream_loans (a (stream, loans) pair) are of ``stream``
 * and all live, one more use each; else new loans of ``borrows`` (checked by the Python
 * take_loans when any book has loans), kept there. A new list. */
PyObject *
shared_or_new_loans(PyObject **stream_loans, PyObject *borrows, PyObject *holder,
                    PyObject *where, PyObject *stream)
{
    PyObject *last = *stream_loans;
    if (stream != Py_None && last != NULL && PyTuple_Check(last) && PyTuple_GET_SIZE(last) == 2 &&
        PyTuple_GET_ITEM(last, 0) == stream && PyTuple_Check(PyTuple_GET_ITEM(last, 1)) &&
        PyTuple_GET_SIZE(PyTuple_GET_ITEM(last, 1)) > 0) {
        PyObject *shared = PyTuple_GET_ITEM(last, 1);
        Py_ssize_t n = PyTuple_GET_SIZE(shared);
        int alive = 1;
        for (Py_ssize_t i = 0; i < n && alive; i++) {
            PyObject *loan = PyTuple_GET_ITEM(shared, i);
            if (Py_TYPE(loan) != &LoanType) {
                PyErr_SetString(PyExc_TypeError, "kept loans are not Loans");
                return NULL;
            }
            alive = LOAN(loan)->count > 0;
        }
        if (alive) {
            for (Py_ssize_t i = 0; i < n; i++)
                LOAN(PyTuple_GET_ITEM(shared, i))->count++;
            return PySequence_List(shared);
        }
    }
    if (!PyList_Check(borrows)) {
        PyErr_SetString(PyExc_TypeError, "the borrows of a launch plan are not a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(borrows);
    int checks = 0;  /* a book with loans: the Python take_loans checks them */
    for (Py_ssize_t i = 0; i < n && !checks; i++) {
        PyObject *borrow = PyList_GET_ITEM(borrows, i);
        checks = !PyTuple_Check(borrow) || PyTuple_GET_SIZE(borrow) != 5 ||
                 !PyList_Check(PyTuple_GET_ITEM(borrow, 0)) ||
                 PyList_GET_SIZE(PyTuple_GET_ITEM(borrow, 0)) > 0;
    }
    PyObject *loans;
    if (checks) {
        loans = PyObject_CallFunctionObjArgs(config.take_loans, borrows, holder, where, stream,
                                             NULL);
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
    if (loans != NULL && stream != Py_None) {
        PyObject *kept = PySequence_Tuple(loans);
        PyObject *pair = kept ? PyTuple_Pack(2, stream, kept) : NULL;
        Py_XDECREF(kept);
        if (pair == NULL) {
            Py_DECREF(loans);
            return NULL;
        }
        Py_XSETREF(*stream_loans, pair);
    }
    return loans;
}

/* ledger.shared_or_new_loans(owner, borrows, holder, where, stream) for Python callers (graph
 * replays): ``owner.stream_loans`` keeps the last loans on a stream. */
PyObject *
py_shared_or_new_loans(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "shared_or_new_loans(owner, borrows, holder, where, stream)");
        return NULL;
    }
    if (ensure_configured() < 0)
        return NULL;
    static PyObject *s_stream_loans;
    if (s_stream_loans == NULL &&
        (s_stream_loans = PyUnicode_InternFromString("stream_loans")) == NULL)
        return NULL;
    PyObject *kept = PyObject_GetAttr(args[0], s_stream_loans);
    if (kept == NULL)
        return NULL;
    PyObject *before = kept;
    PyObject *loans = shared_or_new_loans(&kept, args[1], args[2], args[3], args[4]);
    if (loans != NULL && kept != before && PyObject_SetAttr(args[0], s_stream_loans, kept) < 0)
        Py_CLEAR(loans);
    Py_DECREF(kept);
    return loans;
}
