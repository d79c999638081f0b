/* The replay's loop over the device's activities in C, between two waits of the host (replay/engine.py, _simulate):
 * each activity starts when its launch (moved by the host's shift), its stream's previous activity (plus the queue
 * gap) and the activity it waited on allow, plus what nothing explains. The same arithmetic as the Python loop, in
 * doubles: the caller takes this road only when every integer it reads is below 2**52 in magnitude, where the
 * Python loop's exact integer sums and comparisons give the same doubles. Optional: without a compiler the Python
 * loop runs. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

typedef struct {
    Py_buffer view;
    int held;
} Buf;

static int take(PyObject *obj, Buf *buf, Py_ssize_t itemsize, Py_ssize_t n, int writable, const char *what) {
    if (PyObject_GetBuffer(obj, &buf->view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    buf->held = 1;
    if (buf->view.len != itemsize * n) {
        PyErr_Format(PyExc_ValueError, "run: %s holds %zd bytes, not %zd", what, buf->view.len, itemsize * n);
        return -1;
    }
    return 0;
}

/* run(lo, hi, shift, index, at_launch, prev, gap, dep, dep_done, dep_end, delay, length, new_start, new_end)
 * Places lo..hi of the walk: index, prev, gap, dep, dep_end, delay int64; dep_done bool (one byte); at_launch and
 * length float64, all by place; new_start and new_end float64 by activity, written. */
static PyObject *run(PyObject *self, PyObject *args) {
    Py_ssize_t lo, hi;
    double shift;
    PyObject *objs[11];
    if (!PyArg_ParseTuple(args, "nndOOOOOOOOOOO", &lo, &hi, &shift, &objs[0], &objs[1], &objs[2], &objs[3],
                          &objs[4], &objs[5], &objs[6], &objs[7], &objs[8], &objs[9], &objs[10]))
        return NULL;
    static const char *names[11] = {"index", "at_launch", "prev", "gap", "dep", "dep_done", "dep_end", "delay",
                                    "length", "new_start", "new_end"};
    static const Py_ssize_t sizes[11] = {8, 8, 8, 8, 8, 1, 8, 8, 8, 8, 8};
    Buf bufs[11];
    memset(bufs, 0, sizeof bufs);
    PyObject *result = NULL;
    if (PyObject_GetBuffer(objs[0], &bufs[0].view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    bufs[0].held = 1;
    Py_ssize_t places = bufs[0].view.len / 8;
    Py_ssize_t activities = places;  /* new_start and new_end are by activity: as many as the walk's places */
    for (int b = 1; b < 11; b++) {
        if (take(objs[b], &bufs[b], sizes[b], places, b >= 9, names[b]) < 0)
            goto done;
    }
    if (bufs[0].view.len != 8 * places || lo < 0 || hi > places || lo > hi) {
        PyErr_SetString(PyExc_ValueError, "run: places out of range");
        goto done;
    }
    const long long *index = bufs[0].view.buf, *prev = bufs[2].view.buf, *gap = bufs[3].view.buf;
    const long long *dep = bufs[4].view.buf, *dep_end = bufs[6].view.buf, *delay = bufs[7].view.buf;
    const unsigned char *dep_done = bufs[5].view.buf;
    const double *at_launch = bufs[1].view.buf, *length = bufs[8].view.buf;
    double *new_start = bufs[9].view.buf, *new_end = bufs[10].view.buf;
    for (Py_ssize_t k = lo; k < hi; k++) {
        long long i = index[k], p = prev[k], d = dep[k];
        if (i < 0 || i >= activities || p >= activities || d >= activities) {
            PyErr_SetString(PyExc_ValueError, "run: an activity index out of range");
            goto done;
        }
        double at = at_launch[k] + shift;
        if (p >= 0) {
            double after = new_end[p] + (double)gap[k];
            if (after > at)
                at = after;
        }
        if (d >= 0) {
            double after = dep_done[k] ? new_end[d] : (double)dep_end[k];
            if (after > at)
                at = after;
        }
        double begin = at + (double)delay[k];
        new_start[i] = begin;
        new_end[i] = begin + length[k];
    }
    result = Py_None;
    Py_INCREF(result);
done:
    for (int b = 0; b < 11; b++)
        if (bufs[b].held)
            PyBuffer_Release(&bufs[b].view);
    return result;
}

static PyMethodDef methods[] = {
    {"run", run, METH_VARARGS, "The replay's loop over places lo..hi of the walk."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_walk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__walk(void) { return PyModule_Create(&module); }
