/* The reader's columns in C: fields of a batch of decoded events (msgspec structs, whose fields are member slots)
 * copied into int64 / float64 columns in one pass over the batch, instead of one `np.fromiter(map(attrgetter(f)))`
 * per field. Only the values whose conversion has one answer are taken here: an exact int into an int64 column
 * (one that fits), an exact float or int into a float64 column. A field that meets anything else (None, a string, a
 * bool, an int no int64 holds, an item of another type) is reported as not filled, and the Python reader builds
 * that column as it always has (kineto/gather.py). Optional: without a compiler the reader runs its Python road. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#define MAX_FIELDS 32

/* fill(items: list, names: tuple[str, ...], outs: tuple[writable buffer, ...], kinds: bytes) -> tuple[bool, ...]
 * kinds[f] is b'q' (int64) or b'd' (float64); outs[f] holds len(items) 8-byte values. */
static PyObject *fill(PyObject *self, PyObject *args) {
    PyObject *items, *names, *outs;
    const char *kinds;
    Py_ssize_t kinds_len;
    if (!PyArg_ParseTuple(args, "O!O!O!y#", &PyList_Type, &items, &PyTuple_Type, &names, &PyTuple_Type, &outs,
                          &kinds, &kinds_len))
        return NULL;
    Py_ssize_t fields = PyTuple_GET_SIZE(names);
    if (fields > MAX_FIELDS || PyTuple_GET_SIZE(outs) != fields || kinds_len != fields) {
        PyErr_SetString(PyExc_ValueError, "fill: names, outs and kinds must be as many (at most 32)");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(items);
    PyTypeObject *type = n ? Py_TYPE(PyList_GET_ITEM(items, 0)) : NULL;
    Py_buffer buffers[MAX_FIELDS];
    Py_ssize_t offsets[MAX_FIELDS];
    int ok[MAX_FIELDS];
    Py_ssize_t got = 0;
    PyObject *result = NULL;
    for (; got < fields; got++) {
        if (kinds[got] != 'q' && kinds[got] != 'd') {
            PyErr_SetString(PyExc_ValueError, "fill: a kind is b'q' or b'd'");
            goto done;
        }
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(outs, got), &buffers[got], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
            goto done;
        if (buffers[got].len != n * 8) {
            PyBuffer_Release(&buffers[got]);
            PyErr_SetString(PyExc_ValueError, "fill: an out buffer is not 8 bytes per item");
            goto done;
        }
        ok[got] = 0;
        offsets[got] = 0;
        if (type == NULL)
            continue;
        /* the field's slot: a member descriptor of the items' type holding an object */
        PyObject *descr = PyObject_GetAttr((PyObject *)type, PyTuple_GET_ITEM(names, got));
        if (descr == NULL) {
            PyErr_Clear();
            continue;
        }
        if (Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
            PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
            if (member->type == T_OBJECT_EX || member->type == T_OBJECT) {
                offsets[got] = member->offset;
                ok[got] = 1;
            }
        }
        Py_DECREF(descr);
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (Py_TYPE(item) != type) {
            for (Py_ssize_t f = 0; f < fields; f++)
                ok[f] = 0;
            break;
        }
        for (Py_ssize_t f = 0; f < fields; f++) {
            if (!ok[f])
                continue;
            PyObject *value = *(PyObject **)((char *)item + offsets[f]);
            if (value == NULL) {
                ok[f] = 0;
            } else if (kinds[f] == 'q') {
                if (!PyLong_CheckExact(value)) {
                    ok[f] = 0;
                    continue;
                }
                int overflow = 0;
                long long x = PyLong_AsLongLongAndOverflow(value, &overflow);
                if (overflow || (x == -1 && PyErr_Occurred())) {
                    PyErr_Clear();
                    ok[f] = 0;
                    continue;
                }
                ((long long *)buffers[f].buf)[i] = x;
            } else if (PyFloat_CheckExact(value)) {
                ((double *)buffers[f].buf)[i] = PyFloat_AS_DOUBLE(value);
            } else if (PyLong_CheckExact(value)) {
                double x = PyLong_AsDouble(value);
                if (x == -1.0 && PyErr_Occurred()) {
                    PyErr_Clear();
                    ok[f] = 0;
                    continue;
                }
                ((double *)buffers[f].buf)[i] = x;
            } else {
                ok[f] = 0;
            }
        }
    }
    result = PyTuple_New(fields);
    if (result != NULL)
        for (Py_ssize_t f = 0; f < fields; f++)
            PyTuple_SET_ITEM(result, f, PyBool_FromLong(ok[f]));
done:
    for (Py_ssize_t f = 0; f < got; f++)
        PyBuffer_Release(&buffers[f]);
    return result;
}

/* objects(items: list, name: str, default: object | None) -> list | None
 * The field `name` of each item (structs of one type), a None replaced by `default` when one is given; None when the
 * items are not all of one type with that field as a slot (the caller reads the field its Python way). */
static PyObject *objects(PyObject *self, PyObject *args) {
    PyObject *items, *name, *fallback;
    if (!PyArg_ParseTuple(args, "O!UO", &PyList_Type, &items, &name, &fallback))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items);
    if (n == 0)
        Py_RETURN_NONE;
    PyTypeObject *type = Py_TYPE(PyList_GET_ITEM(items, 0));
    PyObject *descr = PyObject_GetAttr((PyObject *)type, name);
    if (descr == NULL) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    Py_ssize_t offset = -1;
    if (Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type == T_OBJECT_EX || member->type == T_OBJECT)
            offset = member->offset;
    }
    Py_DECREF(descr);
    if (offset < 0)
        Py_RETURN_NONE;
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        PyObject *value = Py_TYPE(item) == type ? *(PyObject **)((char *)item + offset) : NULL;
        if (value == NULL) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        if (value == Py_None && fallback != Py_None)
            value = fallback;
        Py_INCREF(value);
        PyList_SET_ITEM(out, i, value);
    }
    return out;
}

/* codes(items: list, code_of: dict[type, int], out: writable buffer of len(items) bytes) -> bool
 * out[i] = code_of[type(items[i])]; False (out partly written) when a type is not in code_of. */
static PyObject *codes(PyObject *self, PyObject *args) {
    PyObject *items, *code_of, *out_obj;
    if (!PyArg_ParseTuple(args, "O!O!O", &PyList_Type, &items, &PyDict_Type, &code_of, &out_obj))
        return NULL;
    Py_buffer out;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items);
    PyObject *result = NULL;
    if (out.len != n) {
        PyErr_SetString(PyExc_ValueError, "codes: the out buffer is not one byte per item");
        goto done;
    }
    PyTypeObject *last_type = NULL;
    signed char last_code = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyTypeObject *type = Py_TYPE(PyList_GET_ITEM(items, i));
        if (type != last_type) {
            PyObject *code = PyDict_GetItemWithError(code_of, (PyObject *)type);  /* borrowed */
            if (code == NULL || !PyLong_CheckExact(code)) {
                if (PyErr_Occurred())
                    goto done;
                result = Py_False;
                Py_INCREF(result);
                goto done;
            }
            long value = PyLong_AsLong(code);
            if (value < -128 || value > 127) {
                result = Py_False;
                Py_INCREF(result);
                goto done;
            }
            last_type = type;
            last_code = (signed char)value;
        }
        ((signed char *)out.buf)[i] = last_code;
    }
    result = Py_True;
    Py_INCREF(result);
done:
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef methods[] = {
    {"fill", fill, METH_VARARGS, "Copy fields of a list of structs into int64/float64 buffers in one pass."},
    {"objects", objects, METH_VARARGS, "A field of each of a list of structs, as a list."},
    {"codes", codes, METH_VARARGS, "Each item's type's code, into an int8 buffer."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_gather", NULL, -1, methods};

PyMODINIT_FUNC PyInit__gather(void) { return PyModule_Create(&module); }
