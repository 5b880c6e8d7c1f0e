/* tilesafe.driver._launcher: the CUDA driver calls on the launch path (enqueue a kernel,
 * enqueue it as a programmatic dependent, enqueue a graph, ask whether a stream is idle, wait
 * for a stream: polling it briefly, then blocking), called straight from Python with plain
 * integers.
 *
 * The module links against nothing but Python's stable ABI (3.10+), so one build serves every
 * interpreter. It never loads the driver itself: driver/cuda.py asks the driver already
 * loaded by cuda.bindings for the entry points (cuGetProcAddress) and hands their addresses to
 * bind(). Every call returns the driver's CUresult as an int (0 is success); turning a
 * failure into an error is left to the caller. Without this module (no C compiler at install
 * time) driver/cuda.py makes the same calls through cuda.bindings.
 *
 * The structures below are the driver ABI's CUlaunchConfig and CUlaunchAttribute (cuda.h,
 * CUDA 12.0 and later); only the programmatic-serialization attribute is ever set.
 */
#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef void *CUfunction;
typedef void *CUstream;

#define LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION 6

typedef struct {
    int id;                     /* CUlaunchAttributeID */
    char pad[4];
    union {
        char bytes[64];
        int programmatic_stream_serialization_allowed;
    } value;
} LaunchAttribute;

typedef struct {
    unsigned int grid_x, grid_y, grid_z;
    unsigned int block_x, block_y, block_z;
    unsigned int shared_bytes;
    CUstream stream;
    LaunchAttribute *attributes;
    unsigned int attribute_count;
} LaunchConfig;

/* the driver's layout on 64-bit hosts */
_Static_assert(sizeof(LaunchAttribute) == 72, "CUlaunchAttribute is 72 bytes");
_Static_assert(offsetof(LaunchConfig, stream) == 32 && offsetof(LaunchConfig, attributes) == 40 &&
               offsetof(LaunchConfig, attribute_count) == 48, "CUlaunchConfig layout");

typedef CUresult (*LaunchKernelFn)(CUfunction, unsigned int, unsigned int, unsigned int,
                                   unsigned int, unsigned int, unsigned int, unsigned int,
                                   CUstream, void **, void **);
typedef CUresult (*LaunchKernelExFn)(const LaunchConfig *, CUfunction, void **, void **);
typedef CUresult (*StreamSynchronizeFn)(CUstream);
typedef CUresult (*GraphLaunchFn)(void *, CUstream);
typedef CUresult (*StreamQueryFn)(CUstream);

static LaunchKernelFn launch_kernel;
static LaunchKernelExFn launch_kernel_ex;
static StreamSynchronizeFn stream_synchronize;
static GraphLaunchFn graph_launch;
static StreamQueryFn stream_query;

#define ENTRY_POINTS 5

static int
as_address(PyObject *value, void **out)
{
    unsigned long long raw = PyLong_AsUnsignedLongLong(value);
    if (raw == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *out = (void *)(uintptr_t)raw;
    return 0;
}

static int
as_uint(PyObject *value, unsigned int *out)
{
    unsigned long raw = PyLong_AsUnsignedLong(value);
    if (raw == (unsigned long)-1 && PyErr_Occurred())
        return -1;
    if (raw > 0xFFFFFFFFul) {
        PyErr_SetString(PyExc_OverflowError, "grid extent does not fit in 32 bits");
        return -1;
    }
    *out = (unsigned int)raw;
    return 0;
}

static PyObject *
not_bound(void)
{
    PyErr_SetString(PyExc_RuntimeError,
                    "tilesafe.driver._launcher: bind() the driver entry points first");
    return NULL;
}

PyDoc_STRVAR(bind_doc,
"bind(cuLaunchKernel, cuLaunchKernelEx, cuStreamSynchronize, cuGraphLaunch,\n"
"     cuStreamQuery)\n\n"
"The driver entry points, as addresses.");

static PyObject *
bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    void *entries[ENTRY_POINTS];
    if (nargs != ENTRY_POINTS) {
        PyErr_SetString(PyExc_TypeError, "bind takes 5 addresses");
        return NULL;
    }
    for (int i = 0; i < ENTRY_POINTS; i++) {
        if (as_address(args[i], &entries[i]) < 0)
            return NULL;
        if (entries[i] == NULL) {
            PyErr_SetString(PyExc_ValueError, "bind: a driver entry point is NULL");
            return NULL;
        }
    }
    launch_kernel = (LaunchKernelFn)entries[0];
    launch_kernel_ex = (LaunchKernelExFn)entries[1];
    stream_synchronize = (StreamSynchronizeFn)entries[2];
    graph_launch = (GraphLaunchFn)entries[3];
    stream_query = (StreamQueryFn)entries[4];
    Py_RETURN_NONE;
}

PyDoc_STRVAR(launch_doc,
"launch(function, grid_x, grid_y, grid_z, stream, parameters, programmatic) -> CUresult\n\n"
"Enqueue a kernel (one thread per block: Tile IR kernels run one tile program per block)\n"
"on a stream. `parameters` is the address of the array of pointers to the arguments. A\n"
"programmatic launch may start while its predecessor on the stream finishes.");

static PyObject *
launch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    void *function, *stream, *parameters;
    unsigned int grid[3];
    int programmatic;
    CUresult result;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "launch takes 7 arguments");
        return NULL;
    }
    if (launch_kernel == NULL)
        return not_bound();
    if (as_address(args[0], &function) < 0 || as_uint(args[1], &grid[0]) < 0 ||
        as_uint(args[2], &grid[1]) < 0 || as_uint(args[3], &grid[2]) < 0 ||
        as_address(args[4], &stream) < 0 || as_address(args[5], &parameters) < 0)
        return NULL;
    programmatic = PyObject_IsTrue(args[6]);
    if (programmatic < 0)
        return NULL;
    if (programmatic) {
        LaunchAttribute attribute;
        LaunchConfig config;
        memset(&attribute, 0, sizeof attribute);
        attribute.id = LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attribute.value.programmatic_stream_serialization_allowed = 1;
        config.grid_x = grid[0];
        config.grid_y = grid[1];
        config.grid_z = grid[2];
        config.block_x = config.block_y = config.block_z = 1;
        config.shared_bytes = 0;
        config.stream = stream;
        config.attributes = &attribute;
        config.attribute_count = 1;
        result = launch_kernel_ex(&config, function, (void **)parameters, NULL);
    } else {
        result = launch_kernel(function, grid[0], grid[1], grid[2], 1, 1, 1, 0, stream,
                               (void **)parameters, NULL);
    }
    return PyLong_FromLong(result);
}

#define CUDA_ERROR_NOT_READY 600

static int64_t poll_nanoseconds = 20000;  /* see poll_then_wait and poll() */

static int64_t
monotonic_nanoseconds(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/* Small work completes within microseconds of its launch: polling the stream for up to
 * poll_nanoseconds sees that sooner than the driver's blocking wait returns; longer work is
 * then waited for as usual. */
static CUresult
poll_then_wait(CUstream stream)
{
    if (poll_nanoseconds <= 0)
        return stream_synchronize(stream);
    int64_t deadline = monotonic_nanoseconds() + poll_nanoseconds;
    do {
        CUresult state = stream_query(stream);
        if (state != CUDA_ERROR_NOT_READY)
            return state;  /* complete (0), or the error the wait would report */
    } while (monotonic_nanoseconds() < deadline);
    return stream_synchronize(stream);
}

PyDoc_STRVAR(synchronize_doc,
"synchronize(stream) -> CUresult\n\n"
"Wait for a stream's work (polling it for a while, see poll(), then blocking in the driver),\n"
"letting other Python threads run meanwhile.");

PyDoc_STRVAR(poll_doc,
"poll(nanoseconds) -> int\n\n"
"How long synchronize() polls a stream before it blocks in the driver (20000 at import; 0\n"
"blocks at once); returns the previous setting.");

static PyObject *
poll(PyObject *module, PyObject *nanoseconds)
{
    long long value = PyLong_AsLongLong(nanoseconds);
    if (value == -1 && PyErr_Occurred())
        return NULL;
    long long previous = poll_nanoseconds;
    poll_nanoseconds = value < 0 ? 0 : value;
    return PyLong_FromLongLong(previous);
}

static PyObject *
synchronize(PyObject *module, PyObject *stream_address)
{
    void *stream;
    CUresult result;
    if (stream_synchronize == NULL || stream_query == NULL)
        return not_bound();
    if (as_address(stream_address, &stream) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    result = poll_then_wait(stream);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(result);
}

PyDoc_STRVAR(launch_graph_doc,
"launch_graph(graph_exec, stream) -> CUresult\n\n"
"Enqueue an executable graph (a CUgraphExec) on a stream.");

static PyObject *
launch_graph(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    void *graph, *stream;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "launch_graph takes 2 arguments");
        return NULL;
    }
    if (graph_launch == NULL)
        return not_bound();
    if (as_address(args[0], &graph) < 0 || as_address(args[1], &stream) < 0)
        return NULL;
    return PyLong_FromLong(graph_launch(graph, stream));
}

PyDoc_STRVAR(query_doc,
"query(stream) -> CUresult\n\n"
"Whether a stream's work has all completed: 0 if so, CUDA_ERROR_NOT_READY (600) if not.");

static PyObject *
query(PyObject *module, PyObject *stream_address)
{
    void *stream;
    if (stream_query == NULL)
        return not_bound();
    if (as_address(stream_address, &stream) < 0)
        return NULL;
    return PyLong_FromLong(stream_query(stream));
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL, bind_doc},
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL, launch_doc},
    {"launch_graph", (PyCFunction)(void (*)(void))launch_graph, METH_FASTCALL,
     launch_graph_doc},
    {"query", query, METH_O, query_doc},
    {"synchronize", synchronize, METH_O, synchronize_doc},
    {"poll", poll, METH_O, poll_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT, "tilesafe.driver._launcher",
    "The CUDA driver calls of the launch path, called with plain integers.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__launcher(void)
{
    return PyModule_Create(&module_definition);
}
