/* The step meter's per-step hooks in C (capture/meter/native.py loads them; capture/meter/hooks.py holds the same
 * hooks in Python, the reference and the fallback where this does not build).
 *
 * Why C: the hooks run a dozen times a step with cold caches. In Python each costs 1.6-2.7 µs inside a training loop
 * (its frame, its reads of the meter's state, the clock, the events) though 0.1-0.2 µs in a tight loop; on a 1 ms
 * step that is over 1%. Here a hook is one call that reads a small struct and appends an integer to a list.
 *
 * What they do is exactly what the Python hooks do: append `time_ns << SHIFT | code` to the events list (an enter or
 * a leave of a phase, a mark of a step source) and call back into Python only for the rare work: the replay when it
 * is due, a device mark, a relay to the step detection, pinning the main dataset or optimizer. The time is
 * CLOCK_MONOTONIC, which is what time.perf_counter_ns reads on Linux (the only platform this is built for). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#define SHIFT 5
#define ENTER 0
#define LEAVE 8
#define MARK 16
#define FORWARD_PHASE 1
#define OPTIMIZER_PHASE 3
/* Step sources, in hooks.py's HOOKED order: their bit in `muted` and their mark code (MARK + index). */
#define SOURCE_DATALOADER 0
#define SOURCE_FORWARD 1
#define SOURCE_OPTIMIZER 3

/* A reference the collector cleared (tp_clear, at interpreter exit) or a member deleted from Python reads as None:
 * a hook then does less, never dereferences NULL. */
#define ABSENT(o) ((o) == NULL || (o) == Py_None)

static long current_pid;  /* renewed in a forked child: a hook acts only in the process that installed it */
static PyObject *str_dataset, *str_mark, *str_flag, *str_backward, *str_optimizer, *str_dataloader, *str_forward;

static void after_fork_in_child(void) { current_pid = (long)getpid(); }

static inline long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* -- the state the hooks share with the meter ------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    PyObject *events;           /* the PhaseClock's list */
    PyObject *catch_up;         /* the meter's replay */
    PyObject *device;           /* None or the DeviceTimer (its mark(phase)) */
    PyObject *relay_backward;   /* None or the step detection's mark(source) */
    PyObject *relay_optimizer;
    PyObject *relay_dataloader; /* None or mark('dataloader'): a fetch of the main loader after a yielded batch */
    PyObject *relay_batch;      /* None or a callable given each batch the main loader yields (its batch size) */
    PyObject *around_fetch;     /* None or around(original, iterator): the fetch in its place, inside its phase */
    PyObject *relay_forward;    /* read by the Python model hooks (the forward stays Python): kept here, one state */
    PyObject *on_model;
    PyObject *dataset;          /* None or a callable returning the main dataset (a weakref) */
    PyObject *pin;              /* pin(iterator, dataset) -> True: the first dataset to yield is the main one */
    PyObject *optimizer;        /* None or a weakref to the first optimizer to step */
    PyObject *other_thread_step;/* other_thread_step(optimizer): an optimizer step on another thread */
    PyObject *folded;           /* torch.compiler.is_dynamo_compiling, or None */
    PyObject *flags;            /* torch.compiler (its _is_compiling_flag), or None */
    unsigned long thread;
    long pid;
    long long due;
    long long mark_due;
    int muted;                  /* bit per step source whose marks are not kept */
    int batch_pending;
    int optimizer_depth;
    int other_depth;
} State;

/* The state's references, listed once: the collector's visit and clear both walk them (one forgotten in either
 * leaks a cycle or keeps a dead object). */
#define STATE_REFERENCES(apply) \
    apply(s->events); apply(s->catch_up); apply(s->device); apply(s->relay_backward); apply(s->relay_optimizer); \
    apply(s->relay_dataloader); apply(s->relay_batch); apply(s->around_fetch); apply(s->relay_forward); \
    apply(s->on_model); apply(s->dataset); apply(s->pin); apply(s->optimizer); apply(s->other_thread_step); apply(s->folded); \
    apply(s->flags)

static int state_traverse(State *s, visitproc visit, void *arg) {
    STATE_REFERENCES(Py_VISIT);
    return 0;
}

static int state_clear(State *s) {
    STATE_REFERENCES(Py_CLEAR);
    return 0;
}

/* Every type here is collected: untracked, its references cleared by its own tp_clear, freed. */
static void gc_dealloc(PyObject *self) {
    PyObject_GC_UnTrack(self);
    Py_TYPE(self)->tp_clear(self);
    Py_TYPE(self)->tp_free(self);
}

static PyObject *state_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"events", "catch_up", "pin", "other_thread_step", "folded", "flags", NULL};
    PyObject *events, *catch_up, *pin, *other, *folded = Py_None, *flags = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!OOO|OO", names, &PyList_Type, &events, &catch_up, &pin,
                                     &other, &folded, &flags))
        return NULL;
    State *s = (State *)type->tp_alloc(type, 0);
    if (s == NULL) return NULL;
    s->events = Py_NewRef(events); s->catch_up = Py_NewRef(catch_up); s->pin = Py_NewRef(pin);
    s->other_thread_step = Py_NewRef(other); s->folded = Py_NewRef(folded); s->flags = Py_NewRef(flags);
    s->device = Py_NewRef(Py_None); s->relay_backward = Py_NewRef(Py_None);
    s->relay_optimizer = Py_NewRef(Py_None); s->relay_dataloader = Py_NewRef(Py_None);
    s->relay_batch = Py_NewRef(Py_None); s->around_fetch = Py_NewRef(Py_None); s->relay_forward = Py_NewRef(Py_None);
    s->on_model = Py_NewRef(Py_None); s->dataset = Py_NewRef(Py_None); s->optimizer = Py_NewRef(Py_None);
    s->thread = PyThread_get_thread_ident();
    s->pid = current_pid;
    return (PyObject *)s;
}

static PyMemberDef state_members[] = {
    {"device", T_OBJECT_EX, offsetof(State, device), 0, NULL},
    {"relay_backward", T_OBJECT_EX, offsetof(State, relay_backward), 0, NULL},
    {"relay_optimizer", T_OBJECT_EX, offsetof(State, relay_optimizer), 0, NULL},
    {"relay_dataloader", T_OBJECT_EX, offsetof(State, relay_dataloader), 0, NULL},
    {"relay_batch", T_OBJECT_EX, offsetof(State, relay_batch), 0, NULL},
    {"around_fetch", T_OBJECT_EX, offsetof(State, around_fetch), 0, NULL},
    {"relay_forward", T_OBJECT_EX, offsetof(State, relay_forward), 0, NULL},
    {"on_model", T_OBJECT_EX, offsetof(State, on_model), 0, NULL},
    {"dataset", T_OBJECT_EX, offsetof(State, dataset), 0, NULL},
    {"optimizer", T_OBJECT_EX, offsetof(State, optimizer), 0, NULL},
    {"thread", T_ULONG, offsetof(State, thread), 0, NULL},
    {"pid", T_LONG, offsetof(State, pid), 0, NULL},
    {"due", T_LONGLONG, offsetof(State, due), 0, NULL},
    {"mark_due", T_LONGLONG, offsetof(State, mark_due), 0, NULL},
    {"muted", T_INT, offsetof(State, muted), 0, NULL},
    {"batch_pending", T_INT, offsetof(State, batch_pending), 0, NULL},
    {"optimizer_depth", T_INT, offsetof(State, optimizer_depth), 0, NULL},
    {"other_depth", T_INT, offsetof(State, other_depth), 0, NULL},
    {NULL}
};

static PyTypeObject StateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stepscope.capture.meter._native.State",
    .tp_doc = "What the hooks read and write, the meter's due times, muted sources and device and the subscribers "
              "included (capture/meter/hooks.py's HookState has the same fields).",
    .tp_basicsize = sizeof(State),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = state_new,
    .tp_dealloc = gc_dealloc,
    .tp_traverse = (traverseproc)state_traverse,
    .tp_clear = (inquiry)state_clear,
    .tp_members = state_members,
};

static inline int here(State *s) { return current_pid == s->pid && PyThread_get_thread_ident() == s->thread; }

static inline int push(State *s, long long t, int code) {
    if (s->events == NULL) return 0;
    PyObject *event = PyLong_FromLongLong((t << SHIFT) | code);
    if (event == NULL) return -1;
    int failed = PyList_Append(s->events, event);
    Py_DECREF(event);
    return failed;
}

static int call_discarding(PyObject *callable, PyObject *arg) {
    if (ABSENT(callable)) return 0;
    PyObject *result = arg == NULL ? PyObject_CallNoArgs(callable) : PyObject_CallOneArg(callable, arg);
    if (result == NULL) return -1;
    Py_DECREF(result);
    return 0;
}

static int mark_device(State *s, int phase) {
    if (ABSENT(s->device)) return 0;
    PyObject *p = PyLong_FromLong(phase);
    if (p == NULL) return -1;
    PyObject *result = PyObject_CallMethodOneArg(s->device, str_mark, p);
    Py_DECREF(p);
    if (result == NULL) return -1;
    Py_DECREF(result);
    return 0;
}

/* A step of `source` ended at t: its mark (unless muted) and the replay when due. */
static int mark_step(State *s, long long t, int source) {
    if (!(s->muted & (1 << source))) {
        if (push(s, t, MARK + source) < 0) return -1;
        if (t >= s->mark_due) return call_discarding(s->catch_up, NULL);
    } else if (t >= s->due) {
        return call_discarding(s->catch_up, NULL);
    }
    return 0;
}

/* torch.export is tracing the caller (it runs the code natively with the flag set): 1, else 0. torch.compile never
 * runs a C hook while it traces (it cannot trace into one: it breaks the graph and runs it natively, where
 * is_dynamo_compiling() is False), so `folded` is not called here: a Python frame a call saved. */
static int tracing(State *s) {
    if (!ABSENT(s->flags)) {
        PyObject *r = PyObject_GetAttr(s->flags, str_flag);
        if (r == NULL) { PyErr_Clear(); return 0; }
        int yes = PyObject_IsTrue(r);
        Py_DECREF(r);
        return yes;
    }
    return 0;
}

/* -- wrappers: a call charged to a phase (the backward pass, a sync) and the DataLoader's __next__ ------------------ */

typedef struct {
    PyObject_HEAD
    State *state;
    PyObject *original;
    PyObject *dict;       /* __wrapped__, __name__, __doc__ ... (functools.update_wrapper) */
    vectorcallfunc vectorcall;
    int phase;
    int source;           /* the step source a return marks, or -1 */
    int marks_device;     /* the phase is marked on the device when it starts */
    int relays;           /* 1: the backward relay */
} Wrapper;

static int wrapper_traverse(Wrapper *w, visitproc visit, void *arg) {
    Py_VISIT(w->state); Py_VISIT(w->original); Py_VISIT(w->dict);
    return 0;
}

static int wrapper_clear(Wrapper *w) {
    Py_CLEAR(w->state); Py_CLEAR(w->original); Py_CLEAR(w->dict);
    return 0;
}


/* Bound as a method where it stands in for one (DataLoader iterators' __next__, Tensor.item). */
static PyObject *wrapper_get(PyObject *self, PyObject *obj, PyObject *type) {
    if (obj == NULL || obj == Py_None) return Py_NewRef(self);
    return PyMethod_New(self, obj);
}

static PyObject *cleared(void) {
    PyErr_SetString(PyExc_RuntimeError, "stepscope's step meter hook was cleared (the interpreter is exiting)");
    return NULL;
}

/* The phase left at t, after `result` came back (NULL: the call raised; its exception is kept unless leaving fails),
 * and with `replay` the replay too when it is due. Returns `result`, or NULL with an error set. */
static PyObject *left(State *s, long long t, int phase, int replay, PyObject *result) {
    PyObject *type = NULL, *value = NULL, *tb = NULL;
    if (result == NULL) PyErr_Fetch(&type, &value, &tb);
    int failed = push(s, t, LEAVE + phase);
    if (!failed && replay && t >= s->due) failed = call_discarding(s->catch_up, NULL);
    if (result == NULL) {
        if (failed) { Py_XDECREF(type); Py_XDECREF(value); Py_XDECREF(tb); }
        else PyErr_Restore(type, value, tb);
        return NULL;
    }
    if (failed) { Py_DECREF(result); return NULL; }
    return result;
}

static PyObject *relay(PyObject *callable, PyObject *name, PyObject *result) {
    if (call_discarding(callable, name) < 0) {
        Py_DECREF(result);
        return NULL;
    }
    return result;
}

static PyObject *timed_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Wrapper *w = (Wrapper *)self;
    State *s = w->state;
    if (w->original == NULL) return cleared();
    if (s == NULL || current_pid != s->pid) return PyObject_Vectorcall(w->original, args, nargsf, kwnames);
    int traced = tracing(s);
    if (traced < 0) return NULL;
    if (traced) return PyObject_Vectorcall(w->original, args, nargsf, kwnames);
    if (PyThread_get_thread_ident() != s->thread) {  /* not measured; a backward pass is still relayed */
        PyObject *result = PyObject_Vectorcall(w->original, args, nargsf, kwnames);
        if (result == NULL || !w->relays) return result;
        return relay(s->relay_backward, str_backward, result);
    }
    if (push(s, now_ns(), ENTER + w->phase) < 0) return NULL;
    if (w->marks_device && mark_device(s, w->phase) < 0) return NULL;
    PyObject *result = PyObject_Vectorcall(w->original, args, nargsf, kwnames);
    long long t = now_ns();
    /* A call that marks a step replays at its mark; one that raised ends its phase, never a step. */
    result = left(s, t, w->phase, w->source < 0, result);
    if (result == NULL) return NULL;
    if (w->source >= 0 && mark_step(s, t, w->source) < 0) { Py_DECREF(result); return NULL; }
    return w->relays ? relay(s->relay_backward, str_backward, result) : result;
}

static PyObject *data_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Wrapper *w = (Wrapper *)self;
    State *s = w->state;
    if (w->original == NULL) return cleared();
    if (s == NULL || PyVectorcall_NARGS(nargsf) != 1 || kwnames != NULL || !here(s))
        return PyObject_Vectorcall(w->original, args, nargsf, kwnames);
    PyObject *iterator = args[0];
    PyObject *dataset = PyObject_GetAttr(iterator, str_dataset);  /* the main loader's, pinned on its first batch */
    if (dataset == NULL) { PyErr_Clear(); dataset = Py_NewRef(Py_None); }
    PyObject *pinned = ABSENT(s->dataset) ? Py_NewRef(Py_None) : PyObject_CallNoArgs(s->dataset);
    if (pinned == NULL) { Py_DECREF(dataset); return NULL; }
    int main;
    if (pinned != Py_None) {
        main = dataset == pinned;
    } else if (ABSENT(s->pin)) {
        main = 0;
    } else {
        PyObject *r = PyObject_CallFunctionObjArgs(s->pin, iterator, dataset, NULL);
        main = r == NULL ? -1 : PyObject_IsTrue(r);
        Py_XDECREF(r);
    }
    Py_DECREF(pinned);
    Py_DECREF(dataset);
    if (main < 0) return NULL;
    long long t = now_ns();
    if (main && s->batch_pending) {  /* a fetch after a yielded batch ends that batch's step */
        s->batch_pending = 0;
        if (mark_step(s, t, SOURCE_DATALOADER) < 0) return NULL;
        if (call_discarding(s->relay_dataloader, str_dataloader) < 0) return NULL;
    }
    if (push(s, t, ENTER + w->phase) < 0) return NULL;
    PyObject *batch = ABSENT(s->around_fetch) ? PyObject_Vectorcall(w->original, args, nargsf, kwnames)
        : PyObject_CallFunctionObjArgs(s->around_fetch, w->original, iterator, NULL);
    batch = left(s, now_ns(), w->phase, 1, batch);  /* NULL: StopIteration at an epoch's end, most often */
    if (batch == NULL) return NULL;
    if (main) {
        s->batch_pending = 1;
        if (call_discarding(s->relay_batch, batch) < 0) { Py_DECREF(batch); return NULL; }
    }
    return batch;
}

static PyMemberDef wrapper_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(Wrapper, vectorcall), READONLY, NULL},
    {"original", T_OBJECT_EX, offsetof(Wrapper, original), READONLY, NULL},
    {NULL}
};

static PyGetSetDef wrapper_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL}
};

static PyTypeObject WrapperType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stepscope.capture.meter._native.Wrapper",
    .tp_doc = "A call timed as a phase of the step (the backward pass, a sync, a DataLoader fetch).",
    .tp_basicsize = sizeof(Wrapper),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_dealloc = gc_dealloc,
    .tp_traverse = (traverseproc)wrapper_traverse,
    .tp_clear = (inquiry)wrapper_clear,
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = wrapper_get,
    .tp_dictoffset = offsetof(Wrapper, dict),
    .tp_vectorcall_offset = offsetof(Wrapper, vectorcall),
    .tp_members = wrapper_members,
    .tp_getset = wrapper_getset,
};

static PyObject *make_wrapper(State *s, PyObject *original, vectorcallfunc call, int phase, int source,
                              int marks_device, int relays) {
    Wrapper *w = PyObject_GC_New(Wrapper, &WrapperType);
    if (w == NULL) return NULL;
    w->state = (State *)Py_NewRef(s);
    w->original = Py_NewRef(original);
    w->dict = NULL;
    w->vectorcall = call;
    w->phase = phase; w->source = source; w->marks_device = marks_device; w->relays = relays;
    PyObject_GC_Track(w);
    return (PyObject *)w;
}

/* -- the optimizer's global step hooks ------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    State *state;
    vectorcallfunc vectorcall;
} OptimizerHook;

static int hook_traverse(OptimizerHook *h, visitproc visit, void *arg) { Py_VISIT(h->state); return 0; }
static int hook_clear(OptimizerHook *h) { Py_CLEAR(h->state); return 0; }

/* torch hooks each optimizer class's own `step`: a subclass whose step calls super().step() fires the global hooks
 * twice, nested. Only the outermost call is the optimizer step. */
static PyObject *before_step(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    State *s = ((OptimizerHook *)self)->state;
    if (s == NULL || current_pid != s->pid) Py_RETURN_NONE;
    if (PyThread_get_thread_ident() != s->thread) { s->other_depth += 1; Py_RETURN_NONE; }
    s->optimizer_depth += 1;
    if (s->optimizer_depth == 1) {
        if (push(s, now_ns(), ENTER + OPTIMIZER_PHASE) < 0) return NULL;
        if (mark_device(s, OPTIMIZER_PHASE) < 0) return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *after_step(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    State *s = ((OptimizerHook *)self)->state;
    if (s == NULL || PyVectorcall_NARGS(nargsf) < 1 || current_pid != s->pid) Py_RETURN_NONE;
    PyObject *optimizer = args[0];
    if (PyThread_get_thread_ident() != s->thread) {
        if (call_discarding(s->other_thread_step, optimizer) < 0) return NULL;
        Py_RETURN_NONE;
    }
    s->optimizer_depth = s->optimizer_depth > 0 ? s->optimizer_depth - 1 : 0;
    if (s->optimizer_depth) Py_RETURN_NONE;
    long long t = now_ns();
    if (push(s, t, LEAVE + OPTIMIZER_PHASE) < 0) return NULL;
    PyObject *pinned = ABSENT(s->optimizer) ? Py_NewRef(Py_None) : PyObject_CallNoArgs(s->optimizer);
    if (pinned == NULL) return NULL;
    if (pinned == Py_None) {  /* the first optimizer to step marks the steps (a GAN has two) */
        PyObject *ref = PyWeakref_NewRef(optimizer, NULL);
        if (ref == NULL) { Py_DECREF(pinned); return NULL; }
        Py_XSETREF(s->optimizer, ref);
        Py_SETREF(pinned, Py_NewRef(optimizer));
    }
    int mine = pinned == optimizer;
    Py_DECREF(pinned);
    if (!mine) Py_RETURN_NONE;
    if (mark_step(s, t, SOURCE_OPTIMIZER) < 0) return NULL;
    if (call_discarding(s->relay_optimizer, str_optimizer) < 0) return NULL;
    Py_RETURN_NONE;
}

/* The model's forward, entered and left: called by the Python wrapper of the model's class's forward
 * (capture/model_forward.py: torch.compile traces that wrapper, so it stays Python). A call of the model after the
 * first ends the previous forward's step and is relayed; `before(True)`: the first call, whose step nothing ends. */
static PyObject *forward_enter(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    State *s = ((OptimizerHook *)self)->state;
    if (s == NULL || current_pid != s->pid) Py_RETURN_NONE;
    int first = PyVectorcall_NARGS(nargsf) >= 1 ? PyObject_IsTrue(args[0]) : 0;
    if (first < 0) return NULL;
    if (!first && call_discarding(s->relay_forward, str_forward) < 0) return NULL;
    if (PyThread_get_thread_ident() != s->thread) Py_RETURN_NONE;
    long long t = now_ns();
    if (!(s->muted & (1 << SOURCE_FORWARD))) {
        if (push(s, t, MARK + SOURCE_FORWARD) < 0) return NULL;
        if (t >= s->mark_due && call_discarding(s->catch_up, NULL) < 0) return NULL;
    }
    if (push(s, t, ENTER + FORWARD_PHASE) < 0) return NULL;
    if (mark_device(s, FORWARD_PHASE) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *forward_leave(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    State *s = ((OptimizerHook *)self)->state;
    if (s == NULL || !here(s)) Py_RETURN_NONE;
    long long t = now_ns();
    if (push(s, t, LEAVE + FORWARD_PHASE) < 0) return NULL;
    if (t >= s->due && call_discarding(s->catch_up, NULL) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyMemberDef hook_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(OptimizerHook, vectorcall), READONLY, NULL},
    {NULL}
};

static PyTypeObject OptimizerHookType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stepscope.capture.meter._native.OptimizerHook",
    .tp_doc = "torch's global optimizer step pre- or post-hook (the optimizer phase and its step's end), or the "
              "model's forward entered or left.",
    .tp_basicsize = sizeof(OptimizerHook),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_dealloc = gc_dealloc,
    .tp_traverse = (traverseproc)hook_traverse,
    .tp_clear = (inquiry)hook_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(OptimizerHook, vectorcall),
    .tp_members = hook_members,
};

static PyObject *make_hook(State *s, vectorcallfunc call) {
    OptimizerHook *h = PyObject_GC_New(OptimizerHook, &OptimizerHookType);
    if (h == NULL) return NULL;
    h->state = (State *)Py_NewRef(s);
    h->vectorcall = call;
    PyObject_GC_Track(h);
    return (PyObject *)h;
}

/* -- module functions ------------------------------------------------------------------------------------------ */

static PyObject *timed(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"state", "original", "phase", "source", "marks_device", "relays", NULL};
    PyObject *state, *original;
    int phase, source = -1, marks_device = 0, relays = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!Oi|ipp", names, &StateType, &state, &original, &phase,
                                     &source, &marks_device, &relays))
        return NULL;
    return make_wrapper((State *)state, original, timed_call, phase, source, marks_device, relays);
}

static PyObject *data_next(PyObject *module, PyObject *args) {
    PyObject *state, *original;
    int phase;
    if (!PyArg_ParseTuple(args, "O!Oi", &StateType, &state, &original, &phase)) return NULL;
    return make_wrapper((State *)state, original, data_call, phase, SOURCE_DATALOADER, 0, 0);
}

static PyObject *hook_pair(PyObject *state, vectorcallfunc first, vectorcallfunc second);

static PyObject *optimizer_hooks(PyObject *module, PyObject *state) {
    return hook_pair(state, before_step, after_step);
}

static PyObject *hook_pair(PyObject *state, vectorcallfunc first, vectorcallfunc second) {
    if (!PyObject_TypeCheck(state, &StateType)) {
        PyErr_SetString(PyExc_TypeError, "the hooks take a State");
        return NULL;
    }
    PyObject *before = make_hook((State *)state, first);
    if (before == NULL) return NULL;
    PyObject *after = make_hook((State *)state, second);
    if (after == NULL) { Py_DECREF(before); return NULL; }
    PyObject *pair = PyTuple_Pack(2, before, after);
    Py_DECREF(before);
    Py_DECREF(after);
    return pair;
}

static PyObject *forward_hooks(PyObject *module, PyObject *state) {
    return hook_pair(state, forward_enter, forward_leave);
}

static PyObject *now(PyObject *module, PyObject *unused) { return PyLong_FromLongLong(now_ns()); }

static PyMethodDef methods[] = {
    {"timed", (PyCFunction)(void (*)(void))timed, METH_VARARGS | METH_KEYWORDS,
     "timed(state, original, phase, source=-1, marks_device=False, relays=False): `original` charged to `phase`."},
    {"data_next", data_next, METH_VARARGS, "data_next(state, original, phase): a DataLoader iterator's __next__."},
    {"optimizer_hooks", optimizer_hooks, METH_O, "optimizer_hooks(state): the (pre, post) optimizer step hooks."},
    {"forward_hooks", forward_hooks, METH_O, "forward_hooks(state): (before(first=False), after) of the model's forward."},
    {"now", now, METH_NOARGS, "The hooks' clock, in ns (time.perf_counter_ns's)."},
    {NULL}
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_native", "The step meter's per-step hooks in C.", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&StateType) < 0 || PyType_Ready(&WrapperType) < 0 || PyType_Ready(&OptimizerHookType) < 0)
        return NULL;
    str_dataset = PyUnicode_InternFromString("_dataset");
    str_mark = PyUnicode_InternFromString("mark");
    str_flag = PyUnicode_InternFromString("_is_compiling_flag");
    str_backward = PyUnicode_InternFromString("backward");
    str_optimizer = PyUnicode_InternFromString("optimizer");
    str_dataloader = PyUnicode_InternFromString("dataloader");
    str_forward = PyUnicode_InternFromString("forward");
    if (!str_dataset || !str_mark || !str_flag || !str_backward || !str_optimizer || !str_dataloader || !str_forward)
        return NULL;
    current_pid = (long)getpid();
    if (pthread_atfork(NULL, NULL, after_fork_in_child) != 0) {
        PyErr_SetString(PyExc_OSError, "pthread_atfork failed");
        return NULL;
    }
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "State", (PyObject *)&StateType) < 0) { Py_DECREF(m); return NULL; }
    return m;
}
