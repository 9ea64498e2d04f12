/*
 * aot_build's guard evaluator: the bound guard tree of one variant, checked on every call.
 *
 * The program: one instruction per node, (parent, op, key, ((code, opcode, const), ...)),
 * nodes after their parents; made by bind() below from the record's JSON, or in Python
 * (aot_build/guards/bound.py, the reference, for evaluators without bind()). check(self,
 * weights) walks it exactly as BoundState.check_python does (the reference: same opcodes,
 * same failure codes; "same" checks run after every node is read) and returns -1 when every
 * check holds, else the failing check's code, or READ_FAILED + node when a node could not be
 * read.
 *
 * Snapshot. After a full walk that passed, the evaluator records what made each node's object
 * and each check's result what it was: the version tags of the dicts read (module globals,
 * instance dicts, dict items), the version tags of the types whose attributes were looked up
 * (a type's tag changes when it or a base class is modified), the instance-dict pointers, the
 * `self` object and the weights tuple. Nodes whose reads no tag covers (data descriptors,
 * closure cells, lists, weak references) and checks no tag covers (equality with a mutable
 * value, the length of a list) are "volatile": re-read and re-checked on every call. An attribute
 * read that runs a Python __getattribute__ is stamped like a plain one when the tree checks that
 * function by identity (the build's capture adds that check: Dynamo traced it and guards every
 * read it makes), else it is volatile. On the next
 * call, when every stamp still holds and every volatile node re-reads the same object (or, for
 * a call no other node reads from, an object its checks still pass: np.geterr() makes a new
 * dict each time), all checks hold without walking the tree; otherwise the evaluator walks it
 * in full again.
 * On CPython 3.13 and later every call walks the tree in full (see HAVE_DICT_TAGS).
 *
 * This file is compiled into each wheel by the build (aot_build/guards/native.py) against
 * the Python it targets; it uses only CPython's C API.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

/* The snapshot relies on dict version tags and on attribute writes always going through an
   object's dict once it has one: true of CPython 3.10 to 3.12. Later versions walk in full. */
#if PY_VERSION_HEX < 0x030D0000
#define HAVE_DICT_TAGS 1
#define DICT_TAG(d) (((PyDictObject *)(d))->ma_version_tag)
#else
#define HAVE_DICT_TAGS 0
#define DICT_TAG(d) 0
#endif

/* Node opcodes: aot_build/guards/bound.py */
enum {
    OP_REF = 0, OP_GLOBAL = 1, OP_SELF = 2, OP_CELL = 3,
    OP_GETATTR = 10, OP_DICT = 11, OP_ITEM = 12, OP_INDEX = 13, OP_KEY = 14, OP_TYPE = 15,
    OP_MRO = 16, OP_CLOSURE = 17, OP_CODE = 18, OP_DEFAULTS = 19, OP_KWDEFAULTS = 20, OP_CALL = 21,
};
/* Check opcodes: aot_build/guards/checks.py */
enum {
    CK_TYPE = 1, CK_ID = 2, CK_EQ = 3, CK_LEN = 4, CK_KEYS = 5, CK_HAS = 6, CK_LACKS = 7,
    CK_HASATTR = 8, CK_SAME = 9, CK_NOTNONE = 10, CK_WEIGHT = 11, CK_ISINSTANCE = 12,
    CK_ISSUBCLASS = 13, CK_DEFINES = 14,
};
#define READ_FAILED (1 << 24)

typedef struct {
    long code;
    int op;
    PyObject *c;       /* the bound constant (owned) */
    Py_ssize_t index;  /* same: node; weight: weight index; len: n */
    int hasattr_want; /* hasattr, isinstance, issubclass: the answer compiled for */
    PyObject *fcode;   /* id of a pinned Python function: its code when bound (owned; f.__code__ = ... fails it) */
} Check;

typedef struct {
    Py_ssize_t parent;
    int op;
    PyObject *key;  /* owned; OP_GLOBAL: the module dict */
    PyObject *aux;  /* owned; OP_GLOBAL: the name */
    Py_ssize_t ncheck;
    Check *checks;
} Node;

enum { ST_DICT = 1, ST_TYPE = 2, ST_DICTPTR = 3, ST_OBTYPE = 4, ST_CODE = 5 };

typedef struct {
    int kind;
    PyObject *obj;      /* owned: the dict, type or object the stamp is about */
    uint64_t tag;       /* ST_DICT, ST_TYPE */
    PyObject *ptr;      /* ST_DICTPTR: the instance dict; ST_OBTYPE: the type; ST_CODE: the function's code (borrowed, obj owns it) */
} Stamp;

typedef struct {
    Py_ssize_t node;
    int reread;          /* re-read the node from its parent and compare with the recorded object */
    int fresh;           /* a call's answer no other node reads from: a new equal object passes */
    Py_ssize_t ncheck;   /* checks to re-run on it */
    Check **checks;
} Volatile;

typedef struct {
    PyObject_HEAD
    Py_ssize_t n;
    Node *nodes;
    /* snapshot */
    int have_snapshot;
    int busy;
    PyObject **objs;       /* owned: each node's object at the last passing walk */
    PyObject *self_ref;    /* weak reference to that walk's self (or NULL: self was None) */
    int self_none;
    PyObject *weights;     /* owned: that walk's weights tuple */
    Py_ssize_t nstamp, capstamp;
    Py_ssize_t *seen, capseen; /* while recording: stamps by hash (index + 1; 0: empty) */
    Stamp *stamps;
    Py_ssize_t nvol, capvol;
    Volatile *vols;
    PyObject *traced;      /* the functions and code objects the tree checks by identity (a set) */
    /* statistics (tests, benchmarks) */
    long long full_walks, fast_hits;
} Evaluator;

static PyObject *str_keys, *str_mro, *str_closure, *str_code, *str_defaults, *str_kwdefaults, *str_getattribute,
    *str_getattr;
static PyObject *object_getattribute;
static PyObject *str_dict;
/* threading.local (_thread._local): its attributes live in a dict per thread, which its
   __dict__ gives (the generic instance dict of a Python subclass of it stays empty) */
static PyTypeObject *thread_local_type;

/* ------------------------------------------------------------------ reading one node */

/* The keys of the last dict subclass read by key position in one check: a config's dozens of
   keys()[i] reads call its keys() once, not once per key (diffusers' FrozenDict, 29 reads: UNet's
   whole check 16 -> 4 µs per call). Holds its dict, so that the identity stays meaningful. */
typedef struct {
    PyObject *of;
    PyObject *list;
} KeyMemo;

static void forget_keys(KeyMemo *m) {
    Py_CLEAR(m->of);
    Py_CLEAR(m->list);
}

static PyObject *read_node(Evaluator *ev, Node *nd, PyObject *parent, PyObject *self_obj, KeyMemo *memo) {
    switch (nd->op) {
    case OP_REF:
        Py_INCREF(nd->key);
        return nd->key;
    case OP_GLOBAL: {
        PyObject *v = PyDict_GetItemWithError(nd->key, nd->aux);
        if (v == NULL) {
            if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, nd->aux);
            return NULL;
        }
        Py_INCREF(v);
        return v;
    }
    case OP_SELF:
        Py_INCREF(self_obj);
        return self_obj;
    case OP_CELL: {
        PyObject *v = PyCell_GET(nd->key);
        if (v == NULL) {
            PyErr_SetString(PyExc_ValueError, "empty cell");
            return NULL;
        }
        Py_INCREF(v);
        return v;
    }
    case OP_GETATTR:
        return PyObject_GetAttr(parent, nd->key);
    case OP_DICT:
        if (PyType_Check(parent)) {
            PyObject *d = ((PyTypeObject *)parent)->tp_dict;
            if (d == NULL) {
                PyErr_SetString(PyExc_AttributeError, "type without a dict");
                return NULL;
            }
            Py_INCREF(d);
            return d;
        }
        if (thread_local_type != NULL && PyObject_TypeCheck(parent, thread_local_type))
            return PyObject_GetAttr(parent, str_dict);
        return PyObject_GenericGetDict(parent, NULL);
    case OP_ITEM: {
        if (!PyDict_Check(parent)) {
            PyErr_SetString(PyExc_TypeError, "not a dict");
            return NULL;
        }
        PyObject *v = PyDict_GetItemWithError(parent, nd->key);
        if (v == NULL) {
            if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, nd->key);
            return NULL;
        }
        Py_INCREF(v);
        return v;
    }
    case OP_INDEX:
        return PyObject_GetItem(parent, nd->key);
    case OP_KEY: {
        if (!PyDict_Check(parent)) {
            PyErr_SetString(PyExc_TypeError, "not a dict");
            return NULL;
        }
        Py_ssize_t want = PyLong_AsSsize_t(nd->key);
        if (want < 0 && PyErr_Occurred()) return NULL;
        if (PyDict_CheckExact(parent)) {
            Py_ssize_t pos = 0, i = 0;
            PyObject *k, *v;
            while (PyDict_Next(parent, &pos, &k, &v)) {
                if (i++ == want) {
                    Py_INCREF(k);
                    return k;
                }
            }
            PyErr_SetString(PyExc_IndexError, "no such key position");
            return NULL;
        }
        PyObject *list;
        if (memo->of == parent) {
            list = memo->list;
            Py_INCREF(list);
        } else {
            PyObject *keys = PyObject_CallMethodNoArgs(parent, str_keys);
            if (keys == NULL) return NULL;
            list = PySequence_List(keys);
            Py_DECREF(keys);
            if (list == NULL) return NULL;
            forget_keys(memo);
            Py_INCREF(parent);
            memo->of = parent;
            Py_INCREF(list);
            memo->list = list;
        }
        PyObject *k = NULL;
        if (want < PyList_GET_SIZE(list)) {
            k = PyList_GET_ITEM(list, want);
            Py_INCREF(k);
        } else {
            PyErr_SetString(PyExc_IndexError, "no such key position");
        }
        Py_DECREF(list);
        return k;
    }
    case OP_TYPE:
        Py_INCREF(Py_TYPE(parent));
        return (PyObject *)Py_TYPE(parent);
    case OP_MRO:
        return PyObject_GetAttr(parent, str_mro);
    case OP_CLOSURE:
        return PyObject_GetAttr(parent, str_closure);
    case OP_CODE:
        return PyObject_GetAttr(parent, str_code);
    case OP_DEFAULTS:
        return PyObject_GetAttr(parent, str_defaults);
    case OP_KWDEFAULTS:
        return PyObject_GetAttr(parent, str_kwdefaults);
    case OP_CALL: /* obj(), or obj(*key): an lru_cache helper's answer for the args traced */
        if (nd->key == Py_None) return PyObject_CallNoArgs(parent);
        if (!PyTuple_CheckExact(nd->key)) {
            PyErr_SetString(PyExc_TypeError, "call arguments must be a tuple");
            return NULL;
        }
        return PyObject_Call(parent, nd->key, NULL);
    }
    PyErr_SetString(PyExc_SystemError, "bad node opcode");
    return NULL;
}

/* ------------------------------------------------------------------ checks */

/* -0.0 is not 0.0 (x / K differs); NaN is NaN */
static int same_double(double x, double y) {
    if (x == y) return signbit(x) == signbit(y);
    return x != x && y != y;
}

static int same(PyObject *a, PyObject *b);

/* Equal sets whose equal elements are the same too ({1} is not {1.0}): each expected element
   is compared with the element of a equal to it, found through a dict of a's elements. */
static int same_set(PyObject *a, PyObject *b) {
    if (PySet_GET_SIZE(a) != PySet_GET_SIZE(b)) return 0;
    int r = PyObject_RichCompareBool(a, b, Py_EQ);
    if (r <= 0) {
        PyErr_Clear();
        return 0;
    }
    PyObject *stored = PyDict_New();
    PyObject *it = stored == NULL ? NULL : PyObject_GetIter(a);
    PyObject *x;
    r = it != NULL;
    while (r && (x = PyIter_Next(it)) != NULL) {
        r = PyDict_SetItem(stored, x, x) == 0;
        Py_DECREF(x);
    }
    Py_XDECREF(it);
    it = r ? PyObject_GetIter(b) : NULL;
    r = r && it != NULL && !PyErr_Occurred();
    while (r && (x = PyIter_Next(it)) != NULL) {
        PyObject *mine = PyDict_GetItemWithError(stored, x);
        r = mine != NULL && same(mine, x);
        Py_DECREF(x);
    }
    if (PyErr_Occurred()) r = 0;
    PyErr_Clear();
    Py_XDECREF(it);
    Py_XDECREF(stored);
    return r;
}

/* values.same: equal, same types at every level of tuples, lists, dicts and sets; floats of the
   same sign; NaN == NaN. */
static int same(PyObject *a, PyObject *b) {
    if (Py_TYPE(a) != Py_TYPE(b)) return 0;
    if (a == b) return 1;
    if (PyFloat_CheckExact(b)) return same_double(PyFloat_AS_DOUBLE(a), PyFloat_AS_DOUBLE(b));
    if (PyComplex_CheckExact(b)) {
        Py_complex x = ((PyComplexObject *)a)->cval, y = ((PyComplexObject *)b)->cval;
        return same_double(x.real, y.real) && same_double(x.imag, y.imag);
    }
    if (PyAnySet_CheckExact(b)) return same_set(a, b);
    if (PyTuple_CheckExact(b) || PyList_CheckExact(b)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(b);
        if (PySequence_Fast_GET_SIZE(a) != n) return 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (!same(PySequence_Fast_GET_ITEM(a, i), PySequence_Fast_GET_ITEM(b, i))) return 0;
        }
        return 1;
    }
    if (PyDict_CheckExact(b)) {
        if (PyDict_GET_SIZE(a) != PyDict_GET_SIZE(b)) return 0;
        Py_ssize_t pa = 0, pb = 0;
        PyObject *ka, *va, *kb, *vb;
        while (PyDict_Next(b, &pb, &kb, &vb)) {
            if (!PyDict_Next(a, &pa, &ka, &va)) return 0;
            if (!same(ka, kb) || !same(va, vb)) return 0;
        }
        return 1;
    }
    int r = PyObject_RichCompareBool(a, b, Py_EQ);
    if (r < 0) {
        PyErr_Clear();
        return 0;
    }
    return r;
}

static int dict_keys_are(PyObject *obj, PyObject *want) {
    /* a dict, a read-only view of one, or a set (its elements in iteration order) */
    if (!PyDict_Check(obj) && !Py_IS_TYPE(obj, &PyDictProxy_Type) && !PyAnySet_Check(obj)) return 0;
    PyObject *keys;
    if (PyAnySet_Check(obj)) {
        keys = PySequence_List(obj);
    } else if (PyDict_CheckExact(obj)) {
        keys = PyDict_Keys(obj);
    } else {
        PyObject *view = PyObject_CallMethodNoArgs(obj, str_keys);
        if (view == NULL) {
            PyErr_Clear();
            return 0;
        }
        keys = PySequence_List(view);
        Py_DECREF(view);
    }
    if (keys == NULL) {
        PyErr_Clear();
        return 0;
    }
    int r = same(keys, want);
    Py_DECREF(keys);
    return r;
}

static int run_check(Check *c, PyObject *obj, PyObject **objs, PyObject *weights) {
    switch (c->op) {
    case CK_TYPE:
        return (PyObject *)Py_TYPE(obj) == c->c;
    case CK_ID:
        return obj == c->c && (c->fcode == NULL || PyFunction_GET_CODE(obj) == c->fcode);
    case CK_EQ:
        return same(obj, c->c);
    case CK_LEN: {
        Py_ssize_t n = PyObject_Length(obj);
        if (n < 0) {
            PyErr_Clear();
            return 0;
        }
        return n == c->index;
    }
    case CK_KEYS:
        return dict_keys_are(obj, c->c);
    case CK_HAS:
    case CK_LACKS: {
        int r = PySequence_Contains(obj, c->c);
        if (r < 0) {
            PyErr_Clear();
            return 0;
        }
        return c->op == CK_HAS ? r : !r;
    }
    case CK_HASATTR: {
        PyObject *v = PyObject_GetAttr(obj, c->c);
        int has = v != NULL;
        Py_XDECREF(v);
        if (!has) PyErr_Clear();
        return has == c->hasattr_want;
    }
    case CK_DEFINES: /* the class or a base defines it (the metaclass not counted) */
        if (!PyType_Check(obj)) return 0;
        return (_PyType_Lookup((PyTypeObject *)obj, c->c) != NULL) == c->hasattr_want;
    case CK_ISINSTANCE:
    case CK_ISSUBCLASS: {
        int r = c->op == CK_ISINSTANCE ? PyObject_IsInstance(obj, c->c) : PyObject_IsSubclass(obj, c->c);
        if (r < 0) {
            PyErr_Clear();
            return 0;
        }
        return r == c->hasattr_want;
    }
    case CK_SAME:
        return obj == objs[c->index];
    case CK_NOTNONE:
        return obj != Py_None;
    case CK_WEIGHT:
        return PyTuple_Check(weights) && c->index < PyTuple_GET_SIZE(weights) &&
               PyTuple_GET_ITEM(weights, c->index) == obj;
    }
    return 0;
}

/* ------------------------------------------------------------------ snapshot */

/* Drop what only recording uses: the table of stamps by hash. */
static void end_recording(Evaluator *ev) {
    PyMem_Free(ev->seen);
    ev->seen = NULL;
    ev->capseen = 0;
}

#if HAVE_DICT_TAGS

static void clear_snapshot(Evaluator *ev) {
    if (ev->objs != NULL) {
        for (Py_ssize_t i = 0; i < ev->n; i++) Py_XDECREF(ev->objs[i]);
        PyMem_Free(ev->objs);
        ev->objs = NULL;
    }
    Py_CLEAR(ev->self_ref);
    Py_CLEAR(ev->weights);
    for (Py_ssize_t i = 0; i < ev->nstamp; i++) Py_XDECREF(ev->stamps[i].obj);
    ev->nstamp = 0;
    for (Py_ssize_t i = 0; i < ev->nvol; i++) PyMem_Free(ev->vols[i].checks);
    ev->nvol = 0;
    ev->have_snapshot = 0;
}

static size_t stamp_hash(int kind, PyObject *obj, uint64_t tag, PyObject *ptr) {
    uint64_t h = (uint64_t)(uintptr_t)obj * 0x9E3779B97F4A7C15ull;
    h ^= ((uint64_t)(uintptr_t)ptr + (uint64_t)kind) * 0xC2B2AE3D27D4EB4Full;
    h ^= tag * 0x165667B19E3779F9ull;
    return (size_t)(h ^ (h >> 29));
}

/* The slot of the stamp (or the empty slot for it) in the table of recorded stamps. */
static Py_ssize_t *seen_slot(Evaluator *ev, int kind, PyObject *obj, uint64_t tag, PyObject *ptr) {
    size_t mask = (size_t)ev->capseen - 1, i = stamp_hash(kind, obj, tag, ptr) & mask;
    for (;; i = (i + 1) & mask) {
        Py_ssize_t k = ev->seen[i];
        if (k == 0) return &ev->seen[i];
        Stamp *s = &ev->stamps[k - 1];
        if (s->kind == kind && s->obj == obj && s->tag == tag && s->ptr == ptr) return &ev->seen[i];
    }
}

/* Double the table of recorded stamps (which keeps it at most half full). */
static int grow_seen(Evaluator *ev) {
    Py_ssize_t cap = ev->capseen ? 2 * ev->capseen : 256;
    Py_ssize_t *table = PyMem_Calloc((size_t)cap, sizeof(Py_ssize_t));
    if (table == NULL) return -1;
    PyMem_Free(ev->seen);
    ev->seen = table;
    ev->capseen = cap;
    for (Py_ssize_t k = 0; k < ev->nstamp; k++) {
        Stamp *s = &ev->stamps[k];
        *seen_slot(ev, s->kind, s->obj, s->tag, s->ptr) = k + 1;
    }
    return 0;
}

/* Record a stamp once: a type or an instance dict read for many attributes (every module of a
   model, every attribute of one) is stamped on each read, and the fast path needs it once.
   Found again through a hash table while recording (sorting UNet's ~8,000 stamps to drop the
   repeats cost more than the walk itself). */
static int add_stamp(Evaluator *ev, int kind, PyObject *obj, uint64_t tag, PyObject *ptr) {
    if (2 * (ev->nstamp + 1) > ev->capseen && grow_seen(ev) < 0) return -1;
    Py_ssize_t *slot = seen_slot(ev, kind, obj, tag, ptr);
    if (*slot != 0) return 0;
    if (ev->nstamp == ev->capstamp) {
        Py_ssize_t cap = ev->capstamp ? 2 * ev->capstamp : 64;
        Stamp *s = PyMem_Realloc(ev->stamps, cap * sizeof(Stamp));
        if (s == NULL) return -1;
        ev->stamps = s;
        ev->capstamp = cap;
    }
    Py_INCREF(obj);
    ev->stamps[ev->nstamp++] = (Stamp){kind, obj, tag, ptr};
    *slot = ev->nstamp;
    return 0;
}

/* Stamp the dict d by its version tag: 1 stamped, -1 error. */
static int stamp_dict(Evaluator *ev, PyObject *d) {
    return add_stamp(ev, ST_DICT, d, DICT_TAG(d), NULL) < 0 ? -1 : 1;
}

static int stamp_order(const void *a, const void *b) {
    const Stamp *x = a, *y = b;
    if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
    if (x->obj != y->obj) return (uintptr_t)x->obj < (uintptr_t)y->obj ? -1 : 1;
    if (x->ptr != y->ptr) return (uintptr_t)x->ptr < (uintptr_t)y->ptr ? -1 : 1;
    return x->tag < y->tag ? -1 : x->tag > y->tag;
}

/* The stamps in order of kind and address: the fast path compares them in that order. */
static void sort_stamps(Evaluator *ev) {
    if (ev->nstamp > 1) qsort(ev->stamps, (size_t)ev->nstamp, sizeof(Stamp), stamp_order);
}

/* The type's version tag, assigned if it has none yet; 0: none can be had (never stamped). */
static uint64_t type_tag(PyTypeObject *tp) {
    if (!(tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)) {
        (void)_PyType_Lookup(tp, str_getattribute);  /* assigns a tag as it caches the lookup */
    }
    if (!(tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)) return 0;
    return tp->tp_version_tag;
}

/* Whether getattr on objects of this type is the generic lookup (instance dict, then class),
   so that the instance dict's tag and the type's tag determine its result. */
static int generic_getattr(PyTypeObject *tp) {
    if (tp->tp_getattro == PyObject_GenericGetAttr) return 1;
    if (PyType_IsSubtype(tp, &PyModule_Type) && tp->tp_getattro == PyModule_Type.tp_getattro) return 1;
    /* a Python class with __getattr__ (nn.Module): generic first, __getattr__ only on a miss */
    PyObject *ga = _PyType_Lookup(tp, str_getattribute);
    return ga != NULL && ga == object_getattribute;
}

/* Python __getattr__ functions whose answer is fixed by dicts the instance holds in its own
   dict, by name (nn.Module's: _parameters, _buffers, _modules): set_getattr_reads(). */
static PyObject *getattr_reads = NULL;

/* Stamps that fix what the class's Python __getattr__ ga answers for obj (a name missing from
   obj's dict and class falls to it): the dicts it reads, where known; else 0, volatile. */
static int stamp_getattr_reads(Evaluator *ev, PyObject *ga, PyObject *dict) {
    if (getattr_reads == NULL || dict == NULL) return 0;
    PyObject *names = PyDict_GetItemWithError(getattr_reads, ga);
    if (names == NULL || !PyTuple_Check(names)) {
        PyErr_Clear();
        return 0;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
        PyObject *d = PyDict_GetItemWithError(dict, PyTuple_GET_ITEM(names, i));
        if (d == NULL) {
            if (PyErr_Occurred()) {
                PyErr_Clear();
                return 0;
            }
            continue; /* absent: adding it changes the instance dict's tag */
        }
        if (!PyDict_CheckExact(d)) return 0;
        if (stamp_dict(ev, d) < 0) return -1;
    }
    return 1;
}

/* Whether the Python function f (a class's __getattribute__) was traced by the build: the tree
   checks it, or its code, by identity (Dynamo inlines such a function and guards every read it
   makes, so with its code unchanged its result is fixed by the tree's other checks and by the
   object's own dict and type). */
static int traced_function(Evaluator *ev, PyObject *f) {
    if (f == NULL || !PyFunction_Check(f) || ev->traced == NULL) return 0;
    PyObject *code = PyFunction_GET_CODE(f);
    int r = PySet_Contains(ev->traced, f);
    if (r == 0) r = PySet_Contains(ev->traced, code);
    if (r <= 0) {
        PyErr_Clear();
        return 0;
    }
    /* a function's code can be replaced (f.__code__ = ...): stamped too */
    return add_stamp(ev, ST_CODE, f, 0, code) < 0 ? -1 : 1;
}

/* Whether getattr on objects of this Python class runs a __getattribute__ the build traced:
   each read it makes is then checked by the tree, and the rest of the lookup is the generic one
   that the instance dict's and the type's tags fix. A class that also has a __getattr__ (run on
   a miss, where Dynamo may not have followed it) stays volatile. */
static int traced_getattr(Evaluator *ev, PyTypeObject *tp) {
    if (!(tp->tp_flags & Py_TPFLAGS_HEAPTYPE) || _PyType_Lookup(tp, str_getattr) != NULL) return 0;
    return traced_function(ev, _PyType_Lookup(tp, str_getattribute));
}

/* A class attribute found by a read is a descriptor, and of which kind, by its own class: a
   Python class gaining __get__ or __set__ after the check (a non-data descriptor the instance
   shadowed made a data descriptor, which then wins) changes what the read gives, and only that
   class's tag. Stamp it: 1 stamped (or a C class, fixed), 0 volatile, -1 error. */
static int stamp_value_class(Evaluator *ev, PyObject *value) {
    PyTypeObject *vt = Py_TYPE(value);
    if (!(vt->tp_flags & Py_TPFLAGS_HEAPTYPE)) return 1;
    uint64_t tag = type_tag(vt);
    if (tag == 0) return 0;
    return add_stamp(ev, ST_TYPE, (PyObject *)vt, tag, NULL) < 0 ? -1 : 1;
}

/* Stamps that fix obj's attribute `name` (getattr, hasattr): 1 stamped, 0 volatile, -1 error. */
static int stamp_attribute(Evaluator *ev, PyObject *obj, PyObject *name) {
    if (PyType_Check(obj)) {
        PyTypeObject *tp = (PyTypeObject *)obj, *meta = Py_TYPE(obj);
        uint64_t t1 = type_tag(tp), t2 = type_tag(meta);
        if (t1 == 0 || t2 == 0 || meta->tp_getattro != PyType_Type.tp_getattro) return 0;
        PyObject *d = _PyType_Lookup(meta, name);
        if (d != NULL && Py_TYPE(d)->tp_descr_set != NULL) return 0;  /* a metaclass data descriptor */
        /* a descriptor defined in Python runs its __get__ on each read (C ones found on a
           class give themselves, or bind the class: fixed by the tags) */
        PyObject *a = _PyType_Lookup(tp, name);
        if (a == NULL) a = d;
        if (a != NULL && Py_TYPE(a)->tp_descr_get != NULL && (Py_TYPE(a)->tp_flags & Py_TPFLAGS_HEAPTYPE))
            return 0;
        if (add_stamp(ev, ST_TYPE, obj, t1, NULL) < 0 || add_stamp(ev, ST_TYPE, (PyObject *)meta, t2, NULL) < 0)
            return -1;
        return a != NULL ? stamp_value_class(ev, a) : 1;
    }
    PyTypeObject *tp = Py_TYPE(obj);
    if (!generic_getattr(tp)) {
        int r = traced_getattr(ev, tp);
        if (r <= 0) return r;
    }
    uint64_t t = type_tag(tp);
    if (t == 0) return 0;
    PyObject *descr = _PyType_Lookup(tp, name);
    if (descr != NULL && Py_TYPE(descr)->tp_descr_set != NULL) return 0;  /* property, slot: computed */
    /* the instance dict is materialized here: from now on attribute writes change its tag */
    PyObject **dictptr = _PyObject_GetDictPtr(obj);
    PyObject *dict = dictptr != NULL ? *dictptr : NULL;
    if (dictptr != NULL && (dict == NULL || !PyDict_CheckExact(dict))) return 0;
    if (descr == NULL) {
        /* not on the class: the instance dict's, or a miss, which falls to a module's
           __getattr__ (PEP 562) or the class's Python __getattr__ (nn.Module's finds
           parameters, buffers and submodules): what those read is not in the tags above */
        int found = dict != NULL ? PyDict_Contains(dict, name) : 0;
        if (found < 0) {
            PyErr_Clear();
            return 0;
        }
        if (!found) {
            if (PyModule_Check(obj)) {
                int hook = PyDict_Contains(dict, str_getattr);
                if (hook != 0) {
                    PyErr_Clear();
                    return 0;
                }
            } else {
                PyObject *ga = _PyType_Lookup(tp, str_getattr);
                if (ga != NULL) {
                    int r = stamp_getattr_reads(ev, ga, dict);
                    if (r <= 0) return r;
                }
            }
        }
    }
    if (descr != NULL && Py_TYPE(descr)->tp_descr_get != NULL) {
        /* a method found on the class binds anew on every read, unless the instance shadows it */
        int shadowed = dict != NULL ? PyDict_Contains(dict, name) : 0;
        if (shadowed <= 0) {
            PyErr_Clear();
            return 0;
        }
    }
    if (add_stamp(ev, ST_TYPE, (PyObject *)tp, t, NULL) < 0) return -1;
    if (dict != NULL) {
        if (add_stamp(ev, ST_DICTPTR, obj, 0, dict) < 0) return -1;
        if (stamp_dict(ev, dict) < 0) return -1;
    }
    return descr != NULL ? stamp_value_class(ev, descr) : 1;
}

/* Whether obj can never change (so a check on it that held still holds). */
static int immutable(PyObject *o, int depth) {
    if (depth > 8) return 0;
    if (o == Py_None || o == Py_Ellipsis || PyBool_Check(o) || PyLong_CheckExact(o) || PyFloat_CheckExact(o) ||
        PyComplex_CheckExact(o) || PyUnicode_CheckExact(o) || PyBytes_CheckExact(o) || PyType_Check(o) ||
        PyFunction_Check(o) || PyCFunction_Check(o) || PyModule_CheckExact(o) || PyCode_Check(o))
        return 1;
    if (PyTuple_CheckExact(o) || PyFrozenSet_CheckExact(o)) {
        PyObject *it = PyObject_GetIter(o);
        if (it == NULL) {
            PyErr_Clear();
            return 0;
        }
        PyObject *x;
        int ok = 1;
        while (ok && (x = PyIter_Next(it)) != NULL) {
            ok = immutable(x, depth + 1);
            Py_DECREF(x);
        }
        Py_DECREF(it);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        return ok;
    }
    /* numpy scalars, torch.dtype / torch.device, enum members: hashable value types */
    const char *name = Py_TYPE(o)->tp_name;
    if (strncmp(name, "numpy.", 6) == 0 || strcmp(name, "torch.dtype") == 0 || strcmp(name, "torch.device") == 0)
        return 1;
    return 0;
}

/* Whether every key and value of the exact dict d can never change. */
static int immutable_items(PyObject *d) {
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(d, &pos, &k, &v)) {
        if (!immutable(k, 1) || !immutable(v, 1)) return 0;
    }
    return 1;
}

/* Stamps that keep node i's object what it was, given its parent's: 1 stamped, 0 volatile. */
static int stamp_read(Evaluator *ev, Node *nd, PyObject *parent, PyObject *obj) {
    switch (nd->op) {
    case OP_REF:
    case OP_SELF:
        return 1;
    case OP_GLOBAL:
        return stamp_dict(ev, nd->key);
    case OP_ITEM:
    case OP_KEY:
        if (!PyDict_CheckExact(parent)) {
            if (nd->op == OP_KEY) return 0;  /* a subclass's keys() order is its own */
        }
        return stamp_dict(ev, parent);
    case OP_GETATTR:
        if (PyModule_Check(parent)) {
            if (!PyModule_CheckExact(parent)) return 0;
            /* a name missing from the module's dict came from its __getattr__ (PEP 562), which
               may compute it from anything: re-read */
            PyObject *d = PyModule_GetDict(parent);
            PyObject *found = d != NULL ? PyDict_GetItemWithError(d, nd->key) : NULL;
            if (found == NULL) {
                PyErr_Clear();
                return 0;
            }
        }
        return stamp_attribute(ev, parent, nd->key);
    case OP_DICT:
        if (PyType_Check(parent)) return 1;
        if (thread_local_type != NULL && PyObject_TypeCheck(parent, thread_local_type)) return 0; /* per thread */
        if (add_stamp(ev, ST_DICTPTR, parent, 0, obj) < 0) return -1;
        return 1;
    case OP_TYPE:
        return add_stamp(ev, ST_OBTYPE, parent, 0, obj) < 0 ? -1 : 1;
    case OP_INDEX:
        return PyTuple_CheckExact(parent) ? 1 : 0;
    case OP_MRO:
        if (!PyType_Check(parent)) return 0;
        return stamp_attribute(ev, parent, str_mro);
    }
    return 0;  /* cells, function attributes, calls: re-read */
}

/* Whether check c on obj is fixed once obj is (adding the stamps that make it so). */
static int stamp_check(Evaluator *ev, Check *c, PyObject *obj) {
    switch (c->op) {
    case CK_ID:
        /* a function's code can be replaced in place (a reload): stamped by it */
        if (c->fcode != NULL) return add_stamp(ev, ST_CODE, obj, 0, c->fcode) < 0 ? -1 : 1;
        return 1;
    case CK_SAME:
    case CK_NOTNONE:
    case CK_WEIGHT:
        return 1;
    case CK_TYPE:
        return add_stamp(ev, ST_OBTYPE, obj, 0, (PyObject *)Py_TYPE(obj)) < 0 ? -1 : 1;
    case CK_EQ:
        /* a plain dict of values that cannot change (a config's attribute_map): its tag
           changes with any item */
        if (PyDict_CheckExact(obj)) return immutable_items(obj) ? stamp_dict(ev, obj) : 0;
        return immutable(obj, 0);
    case CK_LEN:
    case CK_HAS:
    case CK_LACKS:
    case CK_KEYS:
        /* An exact OrderedDict (nn.Module's hook tables) keeps its items in its dict part:
           every insertion, deletion or clear changes that dict's tag; its order does not
           (move_to_end relinks without one), so keys checks on it stay volatile. */
        if (PyDict_CheckExact(obj) || (c->op != CK_KEYS && PyODict_CheckExact(obj))) return stamp_dict(ev, obj);
        return immutable(obj, 0);
    case CK_HASATTR:
        return stamp_attribute(ev, obj, c->c);
    case CK_DEFINES: { /* a type's tag changes with its namespace's and its bases' */
        uint64_t t = PyType_Check(obj) ? type_tag((PyTypeObject *)obj) : 0;
        if (t == 0) return 0;
        return add_stamp(ev, ST_TYPE, obj, t, NULL) < 0 ? -1 : 1;
    }
    case CK_ISINSTANCE:
    case CK_ISSUBCLASS:
        return 0; /* the class's __instancecheck__ may read anything (an ABC's registry): re-run */
    }
    return 0;
}

static int add_volatile(Evaluator *ev, Py_ssize_t node, int reread) {
    if (ev->nvol > 0 && ev->vols[ev->nvol - 1].node == node) {
        ev->vols[ev->nvol - 1].reread |= reread;
        return 0;
    }
    if (ev->nvol == ev->capvol) {
        Py_ssize_t cap = ev->capvol ? 2 * ev->capvol : 16;
        Volatile *v = PyMem_Realloc(ev->vols, cap * sizeof(Volatile));
        if (v == NULL) return -1;
        ev->vols = v;
        ev->capvol = cap;
    }
    ev->vols[ev->nvol++] = (Volatile){node, reread, 0, 0, NULL};
    return 0;
}

static int add_volatile_check(Evaluator *ev, Py_ssize_t node, Check *c) {
    if (add_volatile(ev, node, 0) < 0) return -1;
    Volatile *v = &ev->vols[ev->nvol - 1];
    Check **cs = PyMem_Realloc(v->checks, (v->ncheck + 1) * sizeof(Check *));
    if (cs == NULL) return -1;
    v->checks = cs;
    v->checks[v->ncheck++] = c;
    return 0;
}

/* Record the snapshot of a walk that passed; objs are taken over. */
static void record(Evaluator *ev, PyObject **objs, PyObject *self_obj, PyObject *weights) {
    clear_snapshot(ev);
    ev->objs = objs;
    if (!HAVE_DICT_TAGS) return;
    if (self_obj != Py_None) {
        ev->self_ref = PyWeakref_NewRef(self_obj, NULL);
        if (ev->self_ref == NULL) {  /* not weak-referenceable: walk in full every time */
            PyErr_Clear();
            return;
        }
    }
    ev->self_none = self_obj == Py_None;
    Py_INCREF(weights);
    ev->weights = weights;
    char *parents = PyMem_Calloc(ev->n ? ev->n : 1, 1); /* whether a node is another's parent */
    if (parents == NULL) goto fail;
    for (Py_ssize_t i = 0; i < ev->n; i++) {
        if (ev->nodes[i].parent >= 0) parents[ev->nodes[i].parent] = 1;
    }
    for (Py_ssize_t i = 0; i < ev->n; i++) {
        Node *nd = &ev->nodes[i];
        PyObject *parent = nd->parent >= 0 ? objs[nd->parent] : NULL;
        int r = stamp_read(ev, nd, parent, objs[i]);
        if (r < 0) goto fail_parents;
        if (r == 0 && add_volatile(ev, i, 1) < 0) goto fail_parents;
        if (r == 0 && nd->op == OP_CALL && !parents[i]) ev->vols[ev->nvol - 1].fresh = 1;
        for (Py_ssize_t j = 0; j < nd->ncheck; j++) {
            int s = stamp_check(ev, &nd->checks[j], objs[i]);
            if (s < 0) goto fail_parents;
            if (s == 0 && add_volatile_check(ev, i, &nd->checks[j]) < 0) goto fail_parents;
            if (nd->checks[j].op == CK_SAME && r == 0) ev->vols[ev->nvol - 1].fresh = 0;
        }
    }
    PyMem_Free(parents);
    end_recording(ev);
    sort_stamps(ev);
    ev->have_snapshot = 1;
    return;
fail_parents:
    PyMem_Free(parents);
fail:
    end_recording(ev);
    PyErr_Clear();
    ev->objs = NULL;  /* the caller still owns objs */
    clear_snapshot(ev);
    ev->objs = objs;
}

/* A method read from an object is made afresh by each read (``log.getEffectiveLevel``): the
   same function bound to the same object is the same method. */
static int same_method(PyObject *a, PyObject *b) {
    return PyMethod_Check(a) && PyMethod_Check(b) && PyMethod_GET_FUNCTION(a) == PyMethod_GET_FUNCTION(b) &&
           PyMethod_GET_SELF(a) == PyMethod_GET_SELF(b);
}

/* 1: the snapshot proves every check holds; 0: walk in full. */
static int fast_path_memo(Evaluator *ev, PyObject *self_obj, PyObject *weights, KeyMemo *memo) {
    if (!ev->have_snapshot || weights != ev->weights) return 0;
    if (ev->self_none) {
        if (self_obj != Py_None) return 0;
    } else if (ev->self_ref == NULL || PyWeakref_GET_OBJECT(ev->self_ref) != self_obj) {
        return 0;
    }
    Stamp *s = ev->stamps, *end = ev->stamps + ev->nstamp;
    for (; s < end; s++) {
        switch (s->kind) {
        case ST_DICT:
            if (DICT_TAG(s->obj) != s->tag) return 0;
            break;
        case ST_TYPE: {
            PyTypeObject *tp = (PyTypeObject *)s->obj;
            if (!(tp->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG) || tp->tp_version_tag != s->tag) return 0;
            break;
        }
        case ST_DICTPTR: {
            PyObject **dp = _PyObject_GetDictPtr(s->obj);
            if (dp == NULL || *dp != s->ptr) return 0;
            break;
        }
        case ST_OBTYPE:
            if ((PyObject *)Py_TYPE(s->obj) != s->ptr) return 0;
            break;
        case ST_CODE:
            if (PyFunction_GET_CODE(s->obj) != s->ptr) return 0;
            break;
        }
    }
    for (Py_ssize_t i = 0; i < ev->nvol; i++) {
        Volatile *v = &ev->vols[i];
        Node *nd = &ev->nodes[v->node];
        PyObject *obj = ev->objs[v->node];
        if (v->reread) {
            PyObject *parent = nd->parent >= 0 ? ev->objs[nd->parent] : NULL;
            PyObject *now = read_node(ev, nd, parent, self_obj, memo);
            if (now == NULL) {
                PyErr_Clear();
                return 0;
            }
            int same = now == obj || same_method(now, obj);
            if (!same && v->fresh) {
                /* a call that answers with a new object each time (np.geterr()'s dict): its
                   checks, run on the new answer, decide */
                same = 1;
                for (Py_ssize_t j = 0; j < nd->ncheck && same; j++) same = run_check(&nd->checks[j], now, ev->objs, weights);
                if (PyErr_Occurred()) PyErr_Clear();
                Py_DECREF(now);
                if (!same) return 0;
                continue;
            }
            Py_DECREF(now);
            if (!same) return 0;
        }
        for (Py_ssize_t j = 0; j < v->ncheck; j++) {
            if (!run_check(v->checks[j], obj, ev->objs, weights)) return 0;
        }
    }
    return 1;
}

static int fast_path(Evaluator *ev, PyObject *self_obj, PyObject *weights) {
    KeyMemo memo = {NULL, NULL};
    int r = fast_path_memo(ev, self_obj, weights, &memo);
    forget_keys(&memo);
    return r;
}

#else  /* no snapshot: every call walks the tree */

static void clear_snapshot(Evaluator *ev) {
    if (ev->objs != NULL) {
        for (Py_ssize_t i = 0; i < ev->n; i++) Py_XDECREF(ev->objs[i]);
        PyMem_Free(ev->objs);
        ev->objs = NULL;
    }
    ev->have_snapshot = 0;
}

static void record(Evaluator *ev, PyObject **objs, PyObject *self_obj, PyObject *weights) {
    clear_snapshot(ev);
    ev->objs = objs;
}

static int fast_path(Evaluator *ev, PyObject *self_obj, PyObject *weights) { return 0; }

#endif

/* ------------------------------------------------------------------ the walk */

static long walk(Evaluator *ev, PyObject *self_obj, PyObject *weights, int may_record) {
    PyObject **objs = PyMem_Calloc(ev->n ? ev->n : 1, sizeof(PyObject *));
    if (objs == NULL) {
        PyErr_NoMemory();
        return -3;
    }
    long result = -1;
    KeyMemo memo = {NULL, NULL};
    for (Py_ssize_t i = 0; i < ev->n && result == -1; i++) {
        Node *nd = &ev->nodes[i];
        PyObject *parent = nd->parent >= 0 ? objs[nd->parent] : NULL;
        PyObject *obj = read_node(ev, nd, parent, self_obj, &memo);
        if (obj == NULL) {
            PyErr_Clear();
            result = READ_FAILED + (long)i;
            break;
        }
        objs[i] = obj;
        for (Py_ssize_t j = 0; j < nd->ncheck; j++) {
            if (nd->checks[j].op == CK_SAME) continue;  /* after every node is read */
            if (!run_check(&nd->checks[j], obj, objs, weights)) {
                if (PyErr_Occurred()) PyErr_Clear();
                result = nd->checks[j].code;
                break;
            }
        }
    }
    forget_keys(&memo);
    for (Py_ssize_t i = 0; i < ev->n && result == -1; i++) {
        Node *nd = &ev->nodes[i];
        for (Py_ssize_t j = 0; j < nd->ncheck; j++) {
            if (nd->checks[j].op == CK_SAME && !run_check(&nd->checks[j], objs[i], objs, weights)) {
                result = nd->checks[j].code;
                break;
            }
        }
    }
    if (result == -1 && may_record) {
        record(ev, objs, self_obj, weights);
        return -1;
    }
    for (Py_ssize_t i = 0; i < ev->n; i++) Py_XDECREF(objs[i]);
    PyMem_Free(objs);
    return result;
}

static PyObject *Evaluator_check(Evaluator *ev, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "check(self_obj, weights)");
        return NULL;
    }
    PyObject *self_obj = args[0], *weights = args[1];
    if (ev->busy) {  /* re-entered from Python code a read ran: walk, touch no snapshot */
        long r = walk(ev, self_obj, weights, 0);
        return r == -3 ? NULL : PyLong_FromLong(r);
    }
    ev->busy = 1;
    long r;
    if (fast_path(ev, self_obj, weights)) {
        ev->fast_hits++;
        r = -1;
    } else {
        ev->full_walks++;
        clear_snapshot(ev);
        r = walk(ev, self_obj, weights, 1);
    }
    ev->busy = 0;
    if (r == -3) return NULL;
    return PyLong_FromLong(r);
}

/* read(self_obj, nodes): the objects at those nodes now, each node on their paths read once
   (the weights, on an entry's first call and when one was replaced). An exception from a read
   propagates: the caller reads again in Python for a message that names the step. */
static PyObject *Evaluator_read(Evaluator *ev, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "read(self_obj, nodes: tuple)");
        return NULL;
    }
    PyObject *self_obj = args[0], *want = args[1];
    Py_ssize_t k = PyTuple_GET_SIZE(want);
    PyObject **objs = PyMem_Calloc(ev->n ? ev->n : 1, sizeof(PyObject *));
    char *need = PyMem_Calloc(ev->n ? ev->n : 1, 1);
    PyObject *out = NULL;
    if (objs == NULL || need == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < k; j++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyTuple_GET_ITEM(want, j));
        if (i < 0 || i >= ev->n) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "no such node");
            goto done;
        }
        for (; i >= 0 && !need[i]; i = ev->nodes[i].parent) need[i] = 1;  /* a parent comes first */
    }
    KeyMemo memo = {NULL, NULL};
    int failed = 0;
    for (Py_ssize_t i = 0; i < ev->n && !failed; i++) {
        if (!need[i]) continue;
        Node *nd = &ev->nodes[i];
        objs[i] = read_node(ev, nd, nd->parent >= 0 ? objs[nd->parent] : NULL, self_obj, &memo);
        failed = objs[i] == NULL;
    }
    forget_keys(&memo);
    if (failed) goto done;
    out = PyTuple_New(k);
    if (out == NULL) goto done;
    for (Py_ssize_t j = 0; j < k; j++) {
        PyObject *o = objs[PyLong_AsSsize_t(PyTuple_GET_ITEM(want, j))];
        Py_INCREF(o);
        PyTuple_SET_ITEM(out, j, o);
    }
done:
    if (objs != NULL) {
        for (Py_ssize_t i = 0; i < ev->n; i++) Py_XDECREF(objs[i]);
        PyMem_Free(objs);
    }
    PyMem_Free(need);
    return out;
}

/* The snapshot's volatile part: (node, re-read, codes of the checks re-run) each, in order. */
static PyObject *Evaluator_volatile(Evaluator *ev, PyObject *unused) {
    PyObject *out = PyTuple_New(ev->nvol);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < ev->nvol; i++) {
        Volatile *v = &ev->vols[i];
        PyObject *codes = PyTuple_New(v->ncheck);
        if (codes == NULL) goto fail;
        for (Py_ssize_t j = 0; j < v->ncheck; j++) {
            PyObject *code = PyLong_FromLong(v->checks[j]->code);
            if (code == NULL) {
                Py_DECREF(codes);
                goto fail;
            }
            PyTuple_SET_ITEM(codes, j, code);
        }
        PyObject *item = Py_BuildValue("(nNN)", v->node, PyBool_FromLong(v->reread), codes);
        if (item == NULL) goto fail;
        PyTuple_SET_ITEM(out, i, item);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *Evaluator_stats(Evaluator *ev, PyObject *unused) {
    return Py_BuildValue("{s:L,s:L,s:n,s:n,s:i}", "full_walks", ev->full_walks, "fast_hits", ev->fast_hits,
                         "stamps", ev->nstamp, "volatile", ev->nvol, "snapshot", ev->have_snapshot);
}

/* ------------------------------------------------------------------ construction */

static void free_nodes(Evaluator *ev) {
    if (ev->nodes == NULL) return;
    for (Py_ssize_t i = 0; i < ev->n; i++) {
        Node *nd = &ev->nodes[i];
        Py_XDECREF(nd->key);
        Py_XDECREF(nd->aux);
        for (Py_ssize_t j = 0; j < nd->ncheck; j++) {
            Py_XDECREF(nd->checks[j].c);
            Py_XDECREF(nd->checks[j].fcode);
        }
        PyMem_Free(nd->checks);
    }
    PyMem_Free(ev->nodes);
    ev->nodes = NULL;
    Py_CLEAR(ev->traced);
}

/* The items of a program entry that must be a tuple of n (borrowed), else TypeError. */
static PyObject *const *items_of(PyObject *item, Py_ssize_t n, const char *what, Py_ssize_t node) {
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != n) {
        PyErr_Format(PyExc_TypeError, "node %zd: a %s must be a tuple of %zd items", node, what, n);
        return NULL;
    }
    return ((PyTupleObject *)item)->ob_item;
}

/* Whether the module name is package or below it (bound.py: BoundState.pinned_code). */
static int in_package(PyObject *module, PyObject *package) {
    if (module == NULL || !PyUnicode_Check(module)) return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(package);
    Py_ssize_t r = PyUnicode_Tailmatch(module, package, 0, n, -1);
    if (r <= 0) return (int)r;
    return PyUnicode_GET_LENGTH(module) == n || PyUnicode_READ_CHAR(module, n) == '.';
}

static int Evaluator_init(Evaluator *ev, PyObject *args, PyObject *kwds) {
    /* package: the entry's top-level package, whose functions' code id checks keep (bound.py) */
    PyObject *program, *package = NULL;
    if (!PyArg_ParseTuple(args, "O!|U", &PyList_Type, &program, &package)) return -1;
    clear_snapshot(ev);
    free_nodes(ev);
    Py_ssize_t n = PyList_GET_SIZE(program);
    ev->nodes = PyMem_Calloc(n ? n : 1, sizeof(Node));
    if (ev->nodes == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    ev->n = n;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(program, i), *key, *checks;
        Node *nd = &ev->nodes[i];
        /* unpacked by hand: PyArg_ParseTuple per node and check was most of UNet's 0.7 ms here */
        PyObject *const *f = items_of(item, 4, "node", i);
        if (f == NULL) return -1;
        nd->parent = PyLong_AsSsize_t(f[0]);
        nd->op = (int)PyLong_AsLong(f[1]);
        key = f[2];
        checks = f[3];
        if (PyErr_Occurred()) return -1;
        if (!PyTuple_Check(checks)) {
            PyErr_Format(PyExc_TypeError, "node %zd: checks must be a tuple", i);
            return -1;
        }
        if (nd->parent >= i || nd->parent < -1) {
            PyErr_Format(PyExc_ValueError, "node %zd: bad parent", i);
            return -1;
        }
        if ((nd->parent < 0) != (nd->op < OP_GETATTR)) {
            PyErr_Format(PyExc_ValueError, "node %zd: a root needs a root opcode", i);
            return -1;
        }
        if (nd->op == OP_GLOBAL) {
            PyObject *d, *name;
            if (!PyArg_ParseTuple(key, "O!O", &PyDict_Type, &d, &name)) return -1;
            Py_INCREF(d);
            Py_INCREF(name);
            nd->key = d;
            nd->aux = name;
        } else {
            if (nd->op == OP_CELL && !PyCell_Check(key)) {
                PyErr_Format(PyExc_TypeError, "node %zd: not a cell", i);
                return -1;
            }
            Py_INCREF(key);
            nd->key = key;
        }
        nd->ncheck = PyTuple_GET_SIZE(checks);
        nd->checks = PyMem_Calloc(nd->ncheck ? nd->ncheck : 1, sizeof(Check));
        if (nd->checks == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t j = 0; j < nd->ncheck; j++) {
            Check *c = &nd->checks[j];
            PyObject *const *g = items_of(PyTuple_GET_ITEM(checks, j), 3, "check", i);
            if (g == NULL) return -1;
            c->code = PyLong_AsLong(g[0]);
            c->op = (int)PyLong_AsLong(g[1]);
            if (PyErr_Occurred()) return -1;
            PyObject *const_ = g[2];
            Py_INCREF(const_);
            c->c = const_;
            if (c->op == CK_SAME || c->op == CK_WEIGHT || c->op == CK_LEN) {
                c->index = PyLong_AsSsize_t(const_);
                if (c->index == -1 && c->op == CK_LEN && PyErr_ExceptionMatches(PyExc_OverflowError))
                    PyErr_Clear();  /* a length no container has: -1 never matches, as in Python */
                if (c->index < 0 && PyErr_Occurred()) return -1;
                if (c->op == CK_SAME && (c->index < 0 || c->index >= n)) {
                    PyErr_Format(PyExc_ValueError, "node %zd: same as a missing node", i);
                    return -1;
                }
            } else if (c->op == CK_HASATTR || c->op == CK_DEFINES || c->op == CK_ISINSTANCE || c->op == CK_ISSUBCLASS) {
                PyObject *name, *want;
                int named = c->op == CK_HASATTR || c->op == CK_DEFINES;
                if (!PyArg_ParseTuple(const_, named ? "UO" : "OO", &name, &want)) return -1;
                c->hasattr_want = PyObject_IsTrue(want);
                Py_INCREF(name);
                Py_SETREF(c->c, name);
            } else if (c->op == CK_ID && package != NULL && PyFunction_Check(const_)) {
                int pin = in_package(PyFunction_GET_MODULE(const_), package);
                if (pin < 0) return -1;
                if (pin) c->fcode = Py_NewRef(PyFunction_GET_CODE(const_));
            } else if (c->op < CK_TYPE || c->op > CK_DEFINES) {
                PyErr_Format(PyExc_ValueError, "node %zd: bad check opcode", i);
                return -1;
            }
        }
    }
    /* what traced_function looks in: fixed by the program, so found once */
    ev->traced = PySet_New(NULL);
    if (ev->traced == NULL) return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        for (Py_ssize_t j = 0; j < ev->nodes[i].ncheck; j++) {
            Check *c = &ev->nodes[i].checks[j];
            if (c->op == CK_ID && (PyCode_Check(c->c) || PyFunction_Check(c->c)) && PySet_Add(ev->traced, c->c) < 0)
                return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ binding from the record */

/* bind(nodes, nweights, binder) -> (program, weight_nodes): the program of BoundState._bind (the
   reference: same instructions, same failure codes, same constants), made straight from the
   record's JSON node lists ([parent, step, key, [[kind, expect], ...]]) without building the
   StateTree's Python objects first. What needs Python (a root, a class or identity to import, an
   encoded value to decode) is asked of `binder` (bound.py's _Binder): root(step, key, node),
   cls(expect), identity(expect, node), value(raw). UNet's 3,000 nodes: 7 -> 1 ms on a first call.
   Every malformed node raises ValueError or TypeError naming it, as StateTree.from_json does. */

static PyObject *step_ops, *check_ops;  /* name -> opcode (dicts, filled at module init) */

/* A JSON scalar that values.decode returns unchanged (None, bool, int, str, float). */
static int plain_json(PyObject *o) {
    return o == Py_None || PyBool_Check(o) || PyLong_CheckExact(o) || PyUnicode_CheckExact(o) || PyFloat_CheckExact(o);
}

/* A node or check as a list or tuple of exactly n items (borrowed), else NULL with ValueError. */
static PyObject *const *json_items(PyObject *o, Py_ssize_t n, const char *what, Py_ssize_t node) {
    if (PyList_CheckExact(o) && PyList_GET_SIZE(o) == n) return ((PyListObject *)o)->ob_item;
    PyErr_Format(PyExc_ValueError, "node %zd: a %s must be a list of %zd items", node, what, n);
    return NULL;
}

static PyObject *imported_ref(PyObject *ref);

/* memo[key] or, the first time, what the "module:qualname" key names when it is imported
   already, else call(args); remembered under key (new reference). */
static PyObject *memo_call(PyObject *memo, PyObject *key, PyObject *callable, PyObject *const *args, size_t nargs) {
    PyObject *hit = PyDict_GetItemWithError(memo, key);
    if (hit != NULL) return Py_NewRef(hit);
    if (PyErr_Occurred()) return NULL;
    PyObject *made = imported_ref(key);  /* key is a "module:qualname" */
    if (made == NULL) made = PyObject_Vectorcall(callable, args, nargs, NULL);
    if (made != NULL && PyDict_SetItem(memo, key, made) < 0) Py_CLEAR(made);
    return made;
}

/* values.decode of {"list": [...]} or {"tuple": [...]} whose items are plain (a dict's keys,
   a shape): made here, without calling Python. NULL without an error: ask the binder. */
static PyObject *plain_sequence(PyObject *raw) {
    if (!PyDict_CheckExact(raw) || PyDict_GET_SIZE(raw) != 1) return NULL;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    PyDict_Next(raw, &pos, &k, &v);
    if (!PyUnicode_Check(k)) return NULL;
    int tuple = PyUnicode_CompareWithASCIIString(k, "tuple") == 0;
    if ((!tuple && PyUnicode_CompareWithASCIIString(k, "list") != 0) || !PyList_CheckExact(v)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(v);
    for (Py_ssize_t i = 0; i < n; i++)
        if (!plain_json(PyList_GET_ITEM(v, i))) return NULL;
    return tuple ? PyList_AsTuple(v) : PyList_GetSlice(v, 0, n);
}

/* names.import_ref("module:qualname") for a module imported already and attributes that
   exist: found here. NULL without an error otherwise: the binder imports or reports it. */
static PyObject *imported_ref(PyObject *ref) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(ref), colon = PyUnicode_FindChar(ref, ':', 0, n, 1);
    if (colon < 0) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *name = PyUnicode_Substring(ref, 0, colon), *modules = PySys_GetObject("modules");
    PyObject *obj = name != NULL && modules != NULL ? PyDict_GetItemWithError(modules, name) : NULL;
    Py_XDECREF(name);
    if (obj == NULL || PyObject_IsTrue(obj) <= 0) {
        PyErr_Clear();
        return NULL;
    }
    Py_INCREF(obj);
    Py_ssize_t start = colon + 1;
    while (start < n && obj != NULL) {
        Py_ssize_t dot = PyUnicode_FindChar(ref, '.', start, n, 1);
        Py_ssize_t end = dot < 0 ? n : dot;
        PyObject *part = PyUnicode_Substring(ref, start, end);
        PyObject *next = part != NULL ? PyObject_GetAttr(obj, part) : NULL;
        Py_XDECREF(part);
        Py_SETREF(obj, next);
        start = end + 1;
    }
    if (obj == NULL) PyErr_Clear();
    return obj;
}

/* The constant check `kind` (opcode op) with expectation `expect` binds to at node i. */
static PyObject *bind_const(int op, PyObject *expect, Py_ssize_t i, PyObject *nodeidx, PyObject *binder_cls,
                            PyObject *binder_identity, PyObject *binder_value, PyObject *classes, PyObject *refs) {
    switch (op) {
    case CK_TYPE:
        if (PyUnicode_CheckExact(expect)) return memo_call(classes, expect, binder_cls, &expect, 1);
        {   /* {"made": ...}: the class of the object found at node i, when it is that class */
            PyObject *args[2] = {expect, nodeidx};
            return PyObject_Vectorcall(binder_cls, args, 2, NULL);
        }
    case CK_ID: {
        /* {"ref": "module:qualname"}: one object per name; {"code": ...}: the code found at node i */
        PyObject *ref = PyDict_CheckExact(expect) && PyDict_GET_SIZE(expect) == 1 ? PyDict_GetItemString(expect, "ref") : NULL;
        PyObject *args[2] = {expect, nodeidx};
        if (ref != NULL && PyUnicode_CheckExact(ref)) return memo_call(refs, ref, binder_identity, args, 2);
        return PyObject_Vectorcall(binder_identity, args, 2, NULL);
    }
    case CK_EQ: case CK_KEYS: case CK_HAS: case CK_LACKS: {
        if (plain_json(expect)) return Py_NewRef(expect);
        PyObject *made = plain_sequence(expect);
        if (made != NULL || PyErr_Occurred()) return made;
        return PyObject_Vectorcall(binder_value, &expect, 1, NULL);
    }
    case CK_LEN:
        if (PyLong_CheckExact(expect)) return Py_NewRef(expect);
        return PyNumber_Long(expect);
    case CK_HASATTR:
    case CK_DEFINES:
    case CK_ISINSTANCE:
    case CK_ISSUBCLASS: {
        /* [name, bool] / ["module:qualname", bool]: the attribute's name or the class (bound as a
           type check binds it), and the answer compiled for */
        int named = op == CK_HASATTR || op == CK_DEFINES;
        PyObject *const *f = PyList_Check(expect) && PyList_GET_SIZE(expect) == 2 ? ((PyListObject *)expect)->ob_item
                             : PyTuple_Check(expect) && PyTuple_GET_SIZE(expect) == 2 ? ((PyTupleObject *)expect)->ob_item
                                                                                       : NULL;
        if (f == NULL || (!named && !PyUnicode_CheckExact(f[0]))) {
            PyErr_Format(PyExc_ValueError, named ? "bad attribute expectation %R"
                                                 : "bad isinstance/issubclass expectation %R",
                         expect);
            return NULL;
        }
        int want = PyObject_IsTrue(f[1]);
        if (want < 0) return NULL;
        PyObject *ref = f[0];
        PyObject *first = named ? PyObject_Str(ref) : memo_call(classes, ref, binder_cls, &ref, 1);
        return first == NULL ? NULL : Py_BuildValue("(NO)", first, want ? Py_True : Py_False);
    }
    case CK_NOTNONE:
        return Py_NewRef(Py_None);
    default: /* CK_SAME, CK_WEIGHT: an index, checked by the caller */
        return Py_NewRef(expect);
    }
}

static PyObject *module_bind(PyObject *unused, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "bind(nodes: list, nweights: int, binder)");
        return NULL;
    }
    PyObject *nodes = args[0], *binder = args[2];
    Py_ssize_t n = PyList_GET_SIZE(nodes), nweights = PyLong_AsSsize_t(args[1]);
    if (nweights < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bind: a negative weight count");
        return NULL;
    }
    PyObject *program = NULL, *weight_nodes = NULL, *classes = NULL, *refs = NULL, *result = NULL;
    PyObject *b_root = NULL, *b_cls = NULL, *b_identity = NULL, *b_value = NULL;
    Py_ssize_t *same_of = NULL, nsame = 0, read = 0;  /* (node, other) pairs of "same" checks */
    long code = 0;
    program = PyList_New(n);
    weight_nodes = PyList_New(nweights);
    classes = PyDict_New();
    refs = PyDict_New();
    same_of = PyMem_Malloc(sizeof(Py_ssize_t) * 2 * (n ? n : 1));
    if (!program || !weight_nodes || !classes || !refs) goto done;
    if (same_of == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t cap_same = n ? n : 1;
    for (Py_ssize_t w = 0; w < nweights; w++) {
        PyObject *l = PyList_New(0);
        if (l == NULL) goto done;
        PyList_SET_ITEM(weight_nodes, w, l);
    }
    b_root = PyObject_GetAttrString(binder, "root");
    b_cls = PyObject_GetAttrString(binder, "cls");
    b_identity = PyObject_GetAttrString(binder, "identity");
    b_value = PyObject_GetAttrString(binder, "value");
    if (!b_root || !b_cls || !b_identity || !b_value) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *const *f = json_items(PyList_GET_ITEM(nodes, i), 4, "node", i);
        if (f == NULL) goto done;
        PyObject *parent = f[0], *step = f[1], *key = f[2], *raw_checks = f[3];
        Py_ssize_t p = PyLong_CheckExact(parent) ? PyLong_AsSsize_t(parent) : -2;
        if (p == -1 && PyErr_Occurred()) PyErr_Clear(), p = -2;
        if (p < -1 || p >= i) {
            PyErr_Format(PyExc_ValueError, "node %zd: bad parent %R", i, parent);
            goto done;
        }
        PyObject *nodeidx = PyLong_FromSsize_t(i), *op = NULL, *bkey = NULL, *checks = NULL, *instr = NULL;
        if (nodeidx == NULL) goto done;
        if (p < 0) {
            PyObject *rargs[3] = {step, key, nodeidx};
            PyObject *r = PyObject_Vectorcall(b_root, rargs, 3, NULL);
            if (r == NULL || !PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 2) {
                if (r != NULL) PyErr_Format(PyExc_TypeError, "node %zd: binder.root must give (op, key)", i);
                Py_XDECREF(r);
                goto node_failed;
            }
            op = Py_NewRef(PyTuple_GET_ITEM(r, 0));
            bkey = Py_NewRef(PyTuple_GET_ITEM(r, 1));
            Py_DECREF(r);
        } else {
            op = PyUnicode_CheckExact(step) ? PyDict_GetItemWithError(step_ops, step) : NULL;
            if (op == NULL) {
                if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "node %zd: bad path step kind %R", i, step);
                goto node_failed;
            }
            Py_INCREF(op);
            long sop = PyLong_AsLong(op);
            if (sop == OP_GETATTR) {
                if (!PyUnicode_Check(key)) {
                    PyErr_Format(PyExc_ValueError, "node %zd: bad attribute name %R", i, key);
                    goto node_failed;
                }
                bkey = Py_NewRef(key);
            } else if (sop == OP_ITEM || sop == OP_INDEX || sop == OP_CALL) {
                bkey = plain_json(key) ? Py_NewRef(key) : PyObject_Vectorcall(b_value, &key, 1, NULL);
                if (bkey == NULL) goto node_failed;
            } else if (sop == OP_KEY) {
                if (!PyLong_CheckExact(key)) {
                    PyErr_Format(PyExc_ValueError, "node %zd: bad position %R", i, key);
                    goto node_failed;
                }
                bkey = Py_NewRef(key);
            } else {
                bkey = Py_NewRef(Py_None);
            }
        }
        if (!PyList_Check(raw_checks)) {
            PyErr_Format(PyExc_ValueError, "node %zd: its checks must be a list", i);
            goto node_failed;
        }
        Py_ssize_t nc = PyList_GET_SIZE(raw_checks);
        checks = PyTuple_New(nc);
        if (checks == NULL) goto node_failed;
        for (Py_ssize_t j = 0; j < nc; j++) {
            PyObject *const *g = json_items(PyList_GET_ITEM(raw_checks, j), 2, "check", i);
            if (g == NULL) goto node_failed;
            PyObject *kind = g[0], *expect = g[1];
            PyObject *opcode = PyUnicode_CheckExact(kind) ? PyDict_GetItemWithError(check_ops, kind) : NULL;
            if (opcode == NULL) {
                if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "node %zd: unknown check kind %R", i, kind);
                goto node_failed;
            }
            int cop = (int)PyLong_AsLong(opcode);
            if (cop == CK_WEIGHT || cop == CK_SAME) {
                Py_ssize_t idx = PyLong_CheckExact(expect) ? PyLong_AsSsize_t(expect) : -1;
                if (idx == -1 && PyErr_Occurred()) PyErr_Clear();
                if (!PyLong_CheckExact(expect) || idx < 0) {
                    PyErr_Format(PyExc_ValueError, "node %zd: bad %S index %R", i, kind, expect);
                    goto node_failed;
                }
                if (cop == CK_WEIGHT) {
                    if (idx >= nweights) {
                        PyErr_Format(PyExc_ValueError, "node %zd: missing weight %zd", i, idx);
                        goto node_failed;
                    }
                    PyObject *l = PyList_GET_ITEM(weight_nodes, idx);
                    read += PyList_GET_SIZE(l) == 0;
                    if (PyList_Append(l, nodeidx) < 0) goto node_failed;
                } else {
                    if (nsame == cap_same) {
                        Py_ssize_t *grown = PyMem_Realloc(same_of, sizeof(Py_ssize_t) * 4 * cap_same);
                        if (grown == NULL) {
                            PyErr_NoMemory();
                            goto node_failed;
                        }
                        same_of = grown;
                        cap_same *= 2;
                    }
                    same_of[2 * nsame] = i;
                    same_of[2 * nsame + 1] = idx;
                    nsame++;
                }
            }
            PyObject *c = bind_const(cop, expect, i, nodeidx, b_cls, b_identity, b_value, classes, refs);
            if (c == NULL) {
                /* as BoundState._bind_check: which node and check could not be bound */
                PyObject *et, *ev_, *tb;
                PyErr_Fetch(&et, &ev_, &tb);
                PyErr_NormalizeException(&et, &ev_, &tb);
                if (PyErr_GivenExceptionMatches(et, PyExc_ValueError) || PyErr_GivenExceptionMatches(et, PyExc_TypeError) ||
                    PyErr_GivenExceptionMatches(et, PyExc_KeyError) || PyErr_GivenExceptionMatches(et, PyExc_IndexError)) {
                    PyErr_Format(PyExc_ValueError, "node %zd: bad %S check: %S", i, kind, ev_);
                    Py_XDECREF(et);
                    Py_XDECREF(ev_);
                    Py_XDECREF(tb);
                } else {
                    PyErr_Restore(et, ev_, tb);
                }
                goto node_failed;
            }
            PyObject *chk = PyTuple_New(3), *num = PyLong_FromLong(code++);
            if (chk == NULL || num == NULL) {
                Py_XDECREF(chk);
                Py_XDECREF(num);
                Py_DECREF(c);
                goto node_failed;
            }
            PyTuple_SET_ITEM(chk, 0, num);
            PyTuple_SET_ITEM(chk, 1, Py_NewRef(opcode));
            PyTuple_SET_ITEM(chk, 2, c);
            PyTuple_SET_ITEM(checks, j, chk);
        }
        instr = PyTuple_Pack(4, parent, op, bkey, checks);
        if (instr == NULL) goto node_failed;
        PyList_SET_ITEM(program, i, instr);
        Py_DECREF(nodeidx);
        Py_DECREF(op);
        Py_DECREF(bkey);
        Py_DECREF(checks);
        continue;
    node_failed:
        Py_DECREF(nodeidx);
        Py_XDECREF(op);
        Py_XDECREF(bkey);
        Py_XDECREF(checks);
        goto done;
    }
    for (Py_ssize_t k = 0; k < nsame; k++) {
        if (same_of[2 * k + 1] >= n) {
            PyErr_Format(PyExc_ValueError, "node %zd: same as missing node %zd", same_of[2 * k], same_of[2 * k + 1]);
            goto done;
        }
    }
    if (read != nweights) {
        PyErr_SetString(PyExc_ValueError, "a weight is read through no path");
        goto done;
    }
    result = PyTuple_Pack(2, program, weight_nodes);
done:
    PyMem_Free(same_of);
    Py_XDECREF(program);
    Py_XDECREF(weight_nodes);
    Py_XDECREF(classes);
    Py_XDECREF(refs);
    Py_XDECREF(b_root);
    Py_XDECREF(b_cls);
    Py_XDECREF(b_identity);
    Py_XDECREF(b_value);
    return result;
}

static void Evaluator_dealloc(Evaluator *ev) {
    clear_snapshot(ev);
    end_recording(ev);
    PyMem_Free(ev->stamps);
    PyMem_Free(ev->vols);
    free_nodes(ev);
    Py_TYPE(ev)->tp_free((PyObject *)ev);
}

static PyMethodDef Evaluator_methods[] = {
    {"check", (PyCFunction)(void (*)(void))Evaluator_check, METH_FASTCALL,
     "check(self_obj, weights) -> -1 when every check holds, else the failure code"},
    {"read", (PyCFunction)(void (*)(void))Evaluator_read, METH_FASTCALL,
     "read(self_obj, nodes) -> the objects at those nodes now"},
    {"stats", (PyCFunction)Evaluator_stats, METH_NOARGS, "counters: full walks, fast hits, snapshot size"},
    {"volatile", (PyCFunction)Evaluator_volatile, METH_NOARGS,
     "the snapshot's volatile part: (node, re-read, codes of the checks re-run) each"},
    {NULL}};

static PyTypeObject EvaluatorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_aot_guards.Evaluator",
    .tp_basicsize = sizeof(Evaluator),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A bound guard tree: Evaluator(program); see aot_build/guards/bound.py",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Evaluator_init,
    .tp_dealloc = (destructor)Evaluator_dealloc,
    .tp_methods = Evaluator_methods,
};

static PyObject *module_set_getattr_reads(PyObject *unused, PyObject *table) {
    if (!PyDict_Check(table)) {
        PyErr_SetString(PyExc_TypeError, "set_getattr_reads({function: (dict names, ...)})");
        return NULL;
    }
    Py_INCREF(table);
    Py_XSETREF(getattr_reads, table);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"bind", (PyCFunction)(void (*)(void))module_bind, METH_FASTCALL,
     "bind(nodes, nweights, binder) -> (program, weight_nodes): a record's guard tree as a program"},
    {"set_getattr_reads", (PyCFunction)module_set_getattr_reads, METH_O,
     "set_getattr_reads({function: (names, ...)}): Python __getattr__ functions whose answer the "
     "dicts of those names in the instance's own dict fix"},
    {NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_aot_guards", .m_doc = "aot_build's guard evaluator", .m_size = -1,
    .m_methods = module_methods,
};

/* name -> opcode, as bound.py's STEP_OPS and checks.py's KINDS (a test compares them) */
static PyObject *opcode_table(const char *const *names, const int *ops, int n) {
    PyObject *d = PyDict_New();
    for (int k = 0; d != NULL && k < n; k++) {
        PyObject *v = PyLong_FromLong(ops[k]);
        if (v == NULL || PyDict_SetItemString(d, names[k], v) < 0) Py_CLEAR(d);
        Py_XDECREF(v);
    }
    return d;
}

PyMODINIT_FUNC PyInit__aot_guards(void) {
    if (PyType_Ready(&EvaluatorType) < 0) return NULL;
    str_keys = PyUnicode_InternFromString("keys");
    str_mro = PyUnicode_InternFromString("__mro__");
    str_closure = PyUnicode_InternFromString("__closure__");
    str_code = PyUnicode_InternFromString("__code__");
    str_defaults = PyUnicode_InternFromString("__defaults__");
    str_kwdefaults = PyUnicode_InternFromString("__kwdefaults__");
    str_getattribute = PyUnicode_InternFromString("__getattribute__");
    str_getattr = PyUnicode_InternFromString("__getattr__");
    object_getattribute = _PyType_Lookup(&PyBaseObject_Type, str_getattribute);
    if (!str_keys || !str_mro || !str_closure || !str_code || !str_defaults || !str_kwdefaults || !str_getattribute || !str_getattr ||
        !object_getattribute)
        return NULL;
    Py_INCREF(object_getattribute);
    str_dict = PyUnicode_InternFromString("__dict__");
    if (str_dict == NULL) return NULL;
    PyObject *thread_mod = PyImport_ImportModule("_thread");
    if (thread_mod == NULL) return NULL;
    thread_local_type = (PyTypeObject *)PyObject_GetAttrString(thread_mod, "_local");
    Py_DECREF(thread_mod);
    if (thread_local_type == NULL) return NULL;
    if (!PyType_Check(thread_local_type)) {
        PyErr_SetString(PyExc_TypeError, "_thread._local is not a type");
        return NULL;
    }
    static const char *const steps[] = {"getattr", "dict", "item", "index", "key", "type", "mro", "closure",
                                        "code", "defaults", "kwdefaults", "call"};
    static const int step_codes[] = {OP_GETATTR, OP_DICT, OP_ITEM, OP_INDEX, OP_KEY, OP_TYPE, OP_MRO, OP_CLOSURE,
                                     OP_CODE, OP_DEFAULTS, OP_KWDEFAULTS, OP_CALL};
    static const char *const kinds[] = {"type", "id", "eq", "len", "keys", "has", "lacks", "hasattr", "same",
                                        "notnone", "weight", "isinstance", "issubclass", "defines"};
    static const int kind_codes[] = {CK_TYPE, CK_ID, CK_EQ, CK_LEN, CK_KEYS, CK_HAS, CK_LACKS, CK_HASATTR, CK_SAME,
                                     CK_NOTNONE, CK_WEIGHT, CK_ISINSTANCE, CK_ISSUBCLASS, CK_DEFINES};
    step_ops = opcode_table(steps, step_codes, 12);
    check_ops = opcode_table(kinds, kind_codes, 14);
    if (step_ops == NULL || check_ops == NULL) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&EvaluatorType);
    if (PyModule_AddObject(m, "Evaluator", (PyObject *)&EvaluatorType) < 0) {
        Py_DECREF(&EvaluatorType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "READ_FAILED", READ_FAILED);
    PyModule_AddIntConstant(m, "HAVE_DICT_TAGS", HAVE_DICT_TAGS);
    PyModule_AddIntConstant(m, "PINS_CODE", 1);  /* Evaluator(program, package) */
    Py_INCREF(step_ops);
    Py_INCREF(check_ops);
    if (PyModule_AddObject(m, "STEP_OPS", step_ops) < 0 || PyModule_AddObject(m, "CHECK_OPS", check_ops) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
