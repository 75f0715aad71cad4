/* _keel.c: keel._keel, the CPython extension under the `keel` package: the
 * module and its exceptions, sessions, and the conversions between numpy
 * arrays and keel values around keel_run.
 *
 * Inputs are read in place when they can be: a C-contiguous, aligned,
 * native-byte-order array of the dtype the model declares is wrapped with
 * keel_tensor_wrap, and the wrapped value holds a reference to the array
 * until keel lets go of it. Anything else of the right dtype is copied once
 * by numpy; another dtype is refused, naming the input and what it expects
 * (as ONNX Runtime does: no silent casts).
 *
 * Outputs whose bytes nobody else can see (keel_value_exclusive) become
 * numpy arrays over keel's buffer; a Buffer object owns the keel value and
 * is the array's base, so the array stays valid after the session is gone.
 * Outputs that alias an input, a constant or another output are copied, so
 * that every returned array is writable and independent, as ONNX Runtime's.
 *
 * keel_run runs with the GIL released; keel sessions are thread-safe, so
 * many Python threads may run one session.
 */
#ifndef NPY_NO_DEPRECATED_API
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#endif
#define PY_ARRAY_UNIQUE_SYMBOL keel_ARRAY_API /* shared with _keel_train.c */
#include "_keel.h"

#include <numpy/arrayobject.h>
#include <stdarg.h>
#include <string.h>

/* ============================================================== errors */

static PyObject *KeelError, *InvalidArgument, *InvalidModel, *Unsupported, *OutOfMemory,
    *ShapeError, *FileError, *StaleHandle, *RuntimeFailure, *InternalError;

static PyObject *error_class(keel_status st) {
  switch (st) {
    case KEEL_ERR_INVALID_ARG: return InvalidArgument;
    case KEEL_ERR_INVALID_MODEL: return InvalidModel;
    case KEEL_ERR_UNSUPPORTED: return Unsupported;
    case KEEL_ERR_OUT_OF_MEMORY: return OutOfMemory;
    case KEEL_ERR_SHAPE: return ShapeError;
    case KEEL_ERR_IO: return FileError;
    case KEEL_ERR_STALE: return StaleHandle;
    case KEEL_ERR_RUNTIME: return RuntimeFailure;
    default: return InternalError;
  }
}

PyObject *keelpy_raise(keel_status st, const char *what) {
  const char *msg = keel_last_error();
  if (!msg[0]) msg = keel_status_str(st);
  PyErr_Format(error_class(st), "%s: %s", what, msg);
  return NULL;
}

PyObject *keelpy_invalid(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  PyObject *msg = PyUnicode_FromFormatV(fmt, ap);
  va_end(ap);
  if (msg) {
    PyErr_SetObject(InvalidArgument, msg);
    Py_DECREF(msg);
  }
  return NULL;
}

/* Creates the exception classes and adds them to the module. */
static int add_errors(PyObject *m) {
  struct {
    PyObject **cls;
    const char *name, *doc;
    PyObject *extra_base;
  } t[] = {
      {&InvalidArgument, "keel.InvalidArgument", "A caller passed something unusable.", PyExc_ValueError},
      {&InvalidModel, "keel.InvalidModel", "A malformed, truncated or inconsistent model.", NULL},
      {&Unsupported, "keel.Unsupported", "An op, domain, opset or type keel cannot run.", NULL},
      {&OutOfMemory, "keel.OutOfMemory", "System out of memory, or the session's cap.", PyExc_MemoryError},
      {&ShapeError, "keel.ShapeError", "Shapes or types that do not fit an operator.", NULL},
      {&FileError, "keel.FileError", "A file could not be opened or read.", NULL},
      {&StaleHandle, "keel.StaleHandle", "A cached handle outlived its target.", NULL},
      {&RuntimeFailure, "keel.RuntimeFailure", "A value out of range at run time.", NULL},
      {&InternalError, "keel.InternalError", "An invariant broke: a keel bug.", NULL},
  };
  KeelError = PyErr_NewExceptionWithDoc("keel.KeelError", "Base class of keel's errors.", NULL, NULL);
  if (!KeelError || PyModule_AddObjectRef(m, "KeelError", KeelError)) return -1;
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    PyObject *bases = t[i].extra_base ? PyTuple_Pack(2, KeelError, t[i].extra_base)
                                      : PyTuple_Pack(1, KeelError);
    if (!bases) return -1;
    *t[i].cls = PyErr_NewExceptionWithDoc(t[i].name, t[i].doc, bases, NULL);
    Py_DECREF(bases);
    if (!*t[i].cls || PyModule_AddObjectRef(m, t[i].name + 5, *t[i].cls)) return -1;
  }
  return 0;
}

/* ============================================================== dtypes */

/* numpy's type number for a keel dtype; -1 when numpy has none. */
static int npy_type(keel_dtype t) {
  switch (t) {
    case KEEL_FLOAT: return NPY_FLOAT32;
    case KEEL_UINT8: return NPY_UINT8;
    case KEEL_INT8: return NPY_INT8;
    case KEEL_UINT16: return NPY_UINT16;
    case KEEL_INT16: return NPY_INT16;
    case KEEL_INT32: return NPY_INT32;
    case KEEL_INT64: return NPY_INT64;
    case KEEL_STRING: return NPY_OBJECT;
    case KEEL_BOOL: return NPY_BOOL;
    case KEEL_FLOAT16: return NPY_FLOAT16;
    case KEEL_DOUBLE: return NPY_FLOAT64;
    case KEEL_UINT32: return NPY_UINT32;
    case KEEL_UINT64: return NPY_UINT64;
    case KEEL_COMPLEX64: return NPY_COMPLEX64;
    case KEEL_COMPLEX128: return NPY_COMPLEX128;
    case KEEL_BFLOAT16: return NPY_FLOAT32; /* widened on output, refused as input */
    default: return -1;
  }
}

/* ONNX's name for an element type, as in 'tensor(float)'. */
static const char *onnx_elem_name(keel_dtype t) {
  static const char *const names[] = {
      "undefined", "float", "uint8", "int8", "uint16", "int16", "int32", "int64", "string",
      "bool", "float16", "double", "uint32", "uint64", "complex64", "complex128", "bfloat16"};
  return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "undefined";
}

/* 'tensor(float)', 'seq(tensor(int64))', 'optional(tensor(float))'. */
static PyObject *type_string(const keel_io_info *io) {
  const char *e = onnx_elem_name(io->dtype);
  if (io->kind == KEEL_KIND_SEQUENCE)
    return io->optional ? PyUnicode_FromFormat("optional(seq(tensor(%s)))", e)
                        : PyUnicode_FromFormat("seq(tensor(%s))", e);
  return io->optional ? PyUnicode_FromFormat("optional(tensor(%s))", e)
                      : PyUnicode_FromFormat("tensor(%s)", e);
}

/* Does a numpy dtype hold the same elements as keel dtype t (kind and
 * size; byte order is checked separately)? */
static int same_elements(PyArray_Descr *d, keel_dtype t) {
  if (t == KEEL_STRING) return d->kind == 'U' || d->kind == 'S' || d->kind == 'O';
  if (t == KEEL_BFLOAT16) return 0;
  int want = npy_type(t);
  if (want < 0) return 0;
  PyArray_Descr *w = PyArray_DescrFromType(want);
  int same = w && w->kind == d->kind && w->elsize == d->elsize;
  Py_XDECREF(w);
  return same;
}

/* ================================================================ buffers */

/* The base object of an output array: owns one reference to a keel value. */
typedef struct {
  PyObject_HEAD
  keel_value_t *v;
} BufferObject;

static void buffer_dealloc(BufferObject *b) {
  keel_value_release(b->v);
  Py_TYPE(b)->tp_free((PyObject *)b);
}

static PyTypeObject Buffer_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "keel._keel.Buffer",
    .tp_basicsize = sizeof(BufferObject),
    .tp_dealloc = (destructor)buffer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Keeps a keel output's bytes alive while a numpy array uses them.",
};

/* keel_tensor_wrap's on_release: drop the array reference the value held.
 * keel may call it from any thread, with or without the GIL. */
static void release_array(void *ud) {
  PyGILState_STATE g = PyGILState_Ensure();
  Py_DECREF((PyObject *)ud);
  PyGILState_Release(g);
}

/* ================================================================ inputs */

static PyObject *shape_list(int rank, const int64_t *dims) {
  PyObject *l = PyList_New(rank);
  for (int i = 0; l && i < rank; i++) PyList_SET_ITEM(l, i, PyLong_FromLongLong(dims[i]));
  return l;
}

static PyObject *declared_shape(const keel_io_info *io);

/* Refuses an array whose rank or fixed dimensions differ from input io's. */
static int check_shape(const keel_io_info *io, PyArrayObject *a) {
  int rank = PyArray_NDIM(a);
  const npy_intp *d = PyArray_DIMS(a);
  int bad = io->rank >= 0 && rank != io->rank;
  for (int i = 0; !bad && io->rank >= 0 && i < rank; i++) bad = io->dims[i] >= 0 && d[i] != io->dims[i];
  if (!bad) return 0;
  int64_t got[NPY_MAXDIMS];
  for (int i = 0; i < rank; i++) got[i] = d[i];
  PyObject *g = shape_list(rank, got), *w = declared_shape(io);
  if (g && w)
    keelpy_invalid("input '%s': got shape %R, expected %R", io->name, g, w);
  Py_XDECREF(g), Py_XDECREF(w);
  return -1;
}

/* A STRING tensor: every element (str or bytes) copied into keel. */
static keel_status string_tensor(keel_session_t *s, PyArrayObject *a, keel_value_t **out) {
  npy_intp n = PyArray_SIZE(a);
  PyObject *flat = PyArray_Ravel(a, NPY_CORDER);
  keel_string *e = flat ? PyMem_Calloc((size_t)n + 1, sizeof *e) : NULL;
  PyObject **keep = e ? PyMem_Calloc((size_t)n + 1, sizeof *keep) : NULL;
  keel_status st = KEEL_ERR_OUT_OF_MEMORY;
  npy_intp i = 0;
  for (; keep && i < n; i++) {
    PyObject *item = PySequence_GetItem(flat, i), *b = NULL;
    if (item && PyUnicode_Check(item)) b = PyUnicode_AsUTF8String(item);
    else if (item && PyBytes_Check(item)) b = Py_NewRef(item);
    Py_XDECREF(item);
    if (!b) break;
    keep[i] = b;
    e[i] = (keel_string){PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(b)};
  }
  if (keep && i == n) {
    int64_t shape[NPY_MAXDIMS];
    for (int k = 0; k < PyArray_NDIM(a); k++) shape[k] = PyArray_DIMS(a)[k];
    st = keel_tensor_create(s, KEEL_STRING, PyArray_NDIM(a), shape, e, out);
  }
  for (npy_intp k = 0; keep && k < i; k++) Py_DECREF(keep[k]);
  PyMem_Free(keep), PyMem_Free(e);
  Py_XDECREF(flat);
  return st;
}

/* One tensor input: checks dtype and shape, then wraps the array's memory
 * (a copy only when the layout or byte order asks for one). */
static int feed_tensor(keel_session_t *s, const keel_io_info *io, keel_dtype dt, PyObject *obj,
                       keel_value_t **out) {
  if (dt == KEEL_BFLOAT16) {
    PyErr_Format(Unsupported, "input '%s': tensor(bfloat16) inputs have no numpy dtype", io->name);
    return -1;
  }
  PyArrayObject *a;
  if (PyArray_Check(obj)) {
    if (!same_elements(PyArray_DESCR((PyArrayObject *)obj), dt)) {
      PyArray_Descr *wd = dt == KEEL_STRING ? NULL : PyArray_DescrFromType(npy_type(dt));
      PyObject *got = PyObject_Str((PyObject *)PyArray_DESCR((PyArrayObject *)obj));
      PyObject *want = wd ? PyObject_Str((PyObject *)wd) : PyUnicode_FromString("str");
      if (got && want)
        keelpy_invalid("input '%s': got a %U array, expected tensor(%s) (numpy %U); "
                       "convert it with .astype()", io->name, got, onnx_elem_name(dt), want);
      Py_XDECREF(got), Py_XDECREF(want), Py_XDECREF(wd);
      return -1;
    }
    a = (PyArrayObject *)Py_NewRef(obj);
  } else {  /* a list, a scalar: numpy makes the array in the declared dtype */
    a = (PyArrayObject *)PyArray_FROMANY(obj, npy_type(dt), 0, 0, NPY_ARRAY_DEFAULT);
    if (!a) {
      PyErr_Clear();
      keelpy_invalid("input '%s': cannot make a tensor(%s) from a %s", io->name, onnx_elem_name(dt),
                     Py_TYPE(obj)->tp_name);
      return -1;
    }
  }
  if (check_shape(io, a)) goto fail;
  if (dt == KEEL_STRING) {
    keel_status st = string_tensor(s, a, out);
    Py_DECREF(a);
    if (st && !PyErr_Occurred()) keelpy_raise(st, io->name);
    return st ? -1 : 0;
  }
  if (!PyArray_ISCARRAY_RO(a) || !PyArray_ISNOTSWAPPED(a)) { /* strided or foreign order */
    PyArrayObject *c = (PyArrayObject *)PyArray_FROM_OTF((PyObject *)a, npy_type(dt), NPY_ARRAY_IN_ARRAY);
    Py_DECREF(a);
    if (!c) return -1;
    a = c;
  }
  int64_t shape[NPY_MAXDIMS];
  for (int k = 0; k < PyArray_NDIM(a); k++) shape[k] = PyArray_DIMS(a)[k];
  /* the value holds the reference to `a` from here; release_array drops it */
  keel_status st = keel_tensor_wrap(s, dt, PyArray_NDIM(a), shape, PyArray_DATA(a),
                                    release_array, a, out);
  if (!st) return 0;
  keelpy_raise(st, io->name);
fail:
  Py_DECREF(a);
  return -1;
}

/* One input of any kind: tensor, sequence (a list of arrays), optional. */
int keelpy_feed(keel_session_t *s, const keel_io_info *io, PyObject *obj, keel_value_t **out) {
  if (obj == Py_None) {
    if (io->optional) {
      keel_status st = keel_none_create(s, out);
      return st ? (keelpy_raise(st, io->name), -1) : 0;
    }
    PyObject *t = type_string(io);
    if (t) keelpy_invalid("input '%s': got None, expected %U", io->name, t);
    Py_XDECREF(t);
    return -1;
  }
  if (io->kind != KEEL_KIND_SEQUENCE) return feed_tensor(s, io, io->dtype, obj, out);
  if (!PyList_Check(obj) && !PyTuple_Check(obj)) {
    keelpy_invalid("input '%s': got %s, expected a list of tensor(%s) arrays (seq)", io->name,
                   Py_TYPE(obj)->tp_name, onnx_elem_name(io->dtype));
    return -1;
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
  keel_value_t **items = PyMem_Calloc((size_t)n + 1, sizeof *items);
  if (!items) return PyErr_NoMemory(), -1;
  keel_io_info elem = *io;
  elem.kind = KEEL_KIND_TENSOR, elem.rank = -1, elem.optional = 0;
  int rc = 0;
  Py_ssize_t i = 0;
  for (; i < n && !rc; i++) rc = feed_tensor(s, &elem, io->dtype, PySequence_Fast_GET_ITEM(obj, i), &items[i]);
  if (!rc) {
    keel_status st = keel_sequence_create(s, io->dtype, items, (size_t)n, out);
    if (st) rc = -1, keelpy_raise(st, io->name);
  }
  for (Py_ssize_t k = 0; k < n; k++) keel_value_release(items[k]);
  PyMem_Free(items);
  return rc;
}

/* =============================================================== outputs */

/* A fresh numpy array with a copy of tensor v's elements. */
static PyObject *tensor_copy(const keel_value_t *v) {
  keel_dtype dt = keel_value_dtype(v);
  int rank = keel_value_rank(v);
  npy_intp dims[KEEL_MAX_RANK];
  for (int i = 0; i < rank; i++) dims[i] = (npy_intp)keel_value_shape(v)[i];
  int t = npy_type(dt);
  if (t < 0) return PyErr_Format(Unsupported, "outputs of type %s have no numpy dtype", keel_dtype_name(dt));
  PyArrayObject *a = (PyArrayObject *)PyArray_SimpleNew(rank, dims, t);
  if (!a) return NULL;
  int64_t n = keel_value_numel(v);
  const void *src = keel_value_data(v);
  if (dt == KEEL_STRING) {
    PyObject **dst = PyArray_DATA(a);
    for (int64_t i = 0; i < n; i++) {
      const keel_string *s = &((const keel_string *)src)[i];
      PyObject *o = PyUnicode_DecodeUTF8(s->data, (Py_ssize_t)s->len, "surrogateescape");
      if (!o) return Py_DECREF(a), NULL;
      Py_XSETREF(dst[i], o);
    }
  } else if (dt == KEEL_BFLOAT16) { /* widened: bfloat16 is float32's high half */
    float *dst = PyArray_DATA(a);
    for (int64_t i = 0; i < n; i++) {
      uint32_t bits = (uint32_t)((const uint16_t *)src)[i] << 16;
      memcpy(&dst[i], &bits, sizeof bits);
    }
  } else if (n > 0) {
    memcpy(PyArray_DATA(a), src, (size_t)n * keel_dtype_size(dt));
  }
  return (PyObject *)a;
}

/* An array over v's bytes; takes over the reference `v`. */
static PyObject *tensor_adopt(keel_value_t *v) {
  BufferObject *b = PyObject_New(BufferObject, &Buffer_Type);
  if (!b) return keel_value_release(v), NULL;
  b->v = v;
  int rank = keel_value_rank(v);
  npy_intp dims[KEEL_MAX_RANK];
  for (int i = 0; i < rank; i++) dims[i] = (npy_intp)keel_value_shape(v)[i];
  PyObject *a = PyArray_New(&PyArray_Type, rank, dims, npy_type(keel_value_dtype(v)), NULL,
                            (void *)keel_value_data(v), 0, NPY_ARRAY_CARRAY, NULL);
  if (!a || PyArray_SetBaseObject((PyArrayObject *)a, (PyObject *)b)) {
    Py_XDECREF(a);
    Py_DECREF(b);
    return NULL;
  }
  return a;
}

/* Python object for an output; takes over the reference `v`. */
static PyObject *value_to_py(keel_value_t *v) {
  PyObject *r = NULL;
  keel_dtype dt = keel_value_dtype(v);
  switch (keel_value_kind_of(v)) {
    case KEEL_KIND_NONE:
      r = Py_NewRef(Py_None);
      break;
    case KEEL_KIND_SEQUENCE: {
      size_t n = keel_sequence_length(v);
      r = PyList_New((Py_ssize_t)n);
      for (size_t i = 0; r && i < n; i++) {
        PyObject *e = keel_sequence_at(v, i) ? tensor_copy(keel_sequence_at(v, i)) : NULL;
        if (!e) {
          if (!PyErr_Occurred()) keelpy_raise(KEEL_ERR_OUT_OF_MEMORY, "sequence output");
          Py_CLEAR(r);
          break;
        }
        PyList_SET_ITEM(r, (Py_ssize_t)i, e);
      }
      break;
    }
    default:
      if (keel_value_exclusive(v) && keel_value_data(v) && dt != KEEL_STRING && dt != KEEL_BFLOAT16)
        return tensor_adopt(v);
      r = tensor_copy(v);
  }
  keel_value_release(v);
  return r;
}

/* ============================================================== sessions */

static void log_to_python(void *ud, int level, const char *msg) {
  SessionObject *S = ud;
  int severity = level == KEEL_LOG_ERROR ? 3 : level == KEEL_LOG_WARN ? 2 : 1;
  if (severity < S->log_level) return;
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "keel: %s", msg)) PyErr_WriteUnraisable(NULL);
  PyErr_Restore(et, ev, tb);
  PyGILState_Release(g);
}

static void iteration_to_python(void *ud, const char *loop, int64_t it, size_t allocated) {
  SessionObject *S = ud;
  PyGILState_STATE g = PyGILState_Ensure();
  if (S->on_iteration) {
    PyObject *r = PyObject_CallFunction(S->on_iteration, "sLn", loop, (long long)it, (Py_ssize_t)allocated);
    if (!r) PyErr_WriteUnraisable(S->on_iteration);
    Py_XDECREF(r);
  }
  PyGILState_Release(g);
}

static PyObject *name_index(keel_io_info *infos, size_t n) {
  PyObject *d = PyDict_New();
  for (size_t i = 0; d && i < n; i++) {
    PyObject *k = PyLong_FromSize_t(i);
    if (!k || PyDict_SetItemString(d, infos[i].name, k)) Py_CLEAR(d);
    Py_XDECREF(k);
  }
  return d;
}

/* Reads the input and output descriptions once, for every run. */
static int load_infos(SessionObject *S) {
  S->nin = keel_session_input_count(S->s);
  S->nout = keel_session_output_count(S->s);
  S->in = PyMem_Calloc(S->nin + 1, sizeof *S->in);
  S->out = PyMem_Calloc(S->nout + 1, sizeof *S->out);
  if (!S->in || !S->out) return PyErr_NoMemory(), -1;
  for (size_t i = 0; i < S->nin; i++)
    if (keel_session_input(S->s, i, &S->in[i])) return keelpy_raise(KEEL_ERR_INTERNAL, "inputs"), -1;
  for (size_t i = 0; i < S->nout; i++)
    if (keel_session_output(S->s, i, &S->out[i])) return keelpy_raise(KEEL_ERR_INTERNAL, "outputs"), -1;
  S->in_index = name_index(S->in, S->nin);
  S->out_index = name_index(S->out, S->nout);
  return S->in_index && S->out_index ? 0 : -1;
}

/* Session(model, mem_limit=0, log_level=2, owner_tags=True, on_iteration=None,
 * threads=0, deterministic=False, device=None): model is a path (str or
 * os.PathLike) or the model's bytes; threads 0 = every CPU the process may
 * use; deterministic: KEEL_OPT_DETERMINISTIC (the same bits at any thread
 * count); device: keel_options.device ("cuda:0", "emu"; None = the CPU). */
static int session_init(SessionObject *S, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"model", "mem_limit", "log_level", "owner_tags", "on_iteration",
                           "threads", "deterministic", "device", NULL};
  PyObject *model, *on_iter = Py_None;
  Py_ssize_t mem_limit = 0;
  int log_level = 2, tags = 1, threads = 0, det = 0;
  const char *device = NULL;
  if (S->s) return keelpy_invalid("Session.__init__ called twice"), -1;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|nipOipz:Session", kwlist, &model, &mem_limit,
                                   &log_level, &tags, &on_iter, &threads, &det, &device))
    return -1;
  if (mem_limit < 0) return keelpy_invalid("mem_limit must be >= 0, got %zd", mem_limit), -1;
  if (threads < 0 || threads > 256)
    return keelpy_invalid("intra_op_num_threads must be 0..256, got %d", threads), -1;
  if (on_iter != Py_None && !PyCallable_Check(on_iter))
    return keelpy_invalid("on_iteration must be callable"), -1;
  S->log_level = log_level;
  S->on_iteration = on_iter == Py_None ? NULL : Py_NewRef(on_iter);
  keel_options o = {.size = sizeof o, .mem_limit = (size_t)mem_limit, .log = log_to_python,
                    .log_ud = S,
                    .flags = (tags ? 0u : (unsigned)KEEL_OPT_NO_OWNER_TAGS) |
                             (det ? (unsigned)KEEL_OPT_DETERMINISTIC : 0u),
                    .threads = threads, .device = device};
  if (S->on_iteration) o.on_iteration = iteration_to_python, o.iteration_ud = S;
  keel_status st;
  Py_buffer buf;
  if (PyObject_CheckBuffer(model)) {
    if (PyObject_GetBuffer(model, &buf, PyBUF_SIMPLE)) return -1;
    Py_BEGIN_ALLOW_THREADS
    st = keel_session_create_from_memory(buf.buf, (size_t)buf.len, NULL, &o, &S->s);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
  } else {
    PyObject *path = NULL;
    if (!PyUnicode_FSConverter(model, &path)) return -1;
    Py_BEGIN_ALLOW_THREADS
    st = keel_session_create(PyBytes_AS_STRING(path), &o, &S->s);
    Py_END_ALLOW_THREADS
    Py_DECREF(path);
  }
  if (st) return keelpy_raise(st, "cannot load the model"), -1;
  return load_infos(S);
}

static void session_dealloc(SessionObject *S) {
  PyObject_GC_UnTrack(S);
  if (S->weakrefs) PyObject_ClearWeakRefs((PyObject *)S);
  keel_session_destroy(S->s);  /* outputs already returned stay valid */
  PyMem_Free(S->in), PyMem_Free(S->out);
  Py_XDECREF(S->in_index), Py_XDECREF(S->out_index), Py_XDECREF(S->on_iteration);
  Py_TYPE(S)->tp_free((PyObject *)S);
}

static int session_traverse(SessionObject *S, visitproc visit, void *arg) {
  Py_VISIT(S->on_iteration);
  return 0;
}

static int session_clear(SessionObject *S) {
  Py_CLEAR(S->on_iteration);
  return 0;
}

static int ready(SessionObject *S) {
  if (S->s) return 1;
  keelpy_invalid("the session is not initialised");
  return 0;
}

/* [(name, type, shape, kind, optional, has_default, dtype code), ...] */
static PyObject *describe_ios(const keel_io_info *io, size_t n) {
  PyObject *l = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; l && i < n; i++) {
    PyObject *t = type_string(&io[i]), *shape = declared_shape(&io[i]);
    PyObject *e = t && shape ? Py_BuildValue("(sOOiiii)", io[i].name, t, shape, (int)io[i].kind,
                                             io[i].optional, io[i].has_default, (int)io[i].dtype)
                             : NULL;
    Py_XDECREF(t), Py_XDECREF(shape);
    if (!e) Py_CLEAR(l);
    else PyList_SET_ITEM(l, (Py_ssize_t)i, e);
  }
  return l;
}

/* [2, 'batch', None]; [] for sequences; None for an unknown rank. */
static PyObject *declared_shape(const keel_io_info *io) {
  if (io->kind == KEEL_KIND_SEQUENCE) return PyList_New(0);
  if (io->rank < 0) return Py_NewRef(Py_None);
  PyObject *l = PyList_New(io->rank);
  for (int d = 0; l && d < io->rank; d++) {
    PyObject *e = io->dims[d] >= 0 ? PyLong_FromLongLong(io->dims[d])
                  : io->dim_params && io->dim_params[d] ? PyUnicode_FromString(io->dim_params[d])
                                                        : Py_NewRef(Py_None);
    if (!e) Py_CLEAR(l);
    else PyList_SET_ITEM(l, d, e);
  }
  return l;
}

static PyObject *session_inputs(SessionObject *S, PyObject *unused) {
  return ready(S) ? describe_ios(S->in, S->nin) : NULL;
}

static PyObject *session_outputs(SessionObject *S, PyObject *unused) {
  return ready(S) ? describe_ios(S->out, S->nout) : NULL;
}

static PyObject *session_meta(SessionObject *S, PyObject *unused) {
  if (!ready(S)) return NULL;
  keel_model_meta m = {.size = sizeof m};
  if (keel_session_meta(S->s, &m)) return keelpy_raise(KEEL_ERR_INTERNAL, "metadata");
  PyObject *props = PyDict_New();
  for (size_t i = 0; props && i < m.n_props; i++) {
    PyObject *v = PyUnicode_DecodeUTF8(m.prop_values[i], (Py_ssize_t)strlen(m.prop_values[i]), "replace");
    if (!v || PyDict_SetItemString(props, m.prop_keys[i], v)) Py_CLEAR(props);
    Py_XDECREF(v);
  }
  if (!props) return NULL;
  return Py_BuildValue("{s:s,s:s,s:s,s:s,s:s,s:s,s:L,s:L,s:N}", "producer_name", m.producer_name,
                       "producer_version", m.producer_version, "domain", m.domain,
                       "description", m.description, "graph_name", m.graph_name,
                       "graph_description", m.graph_description, "ir_version",
                       (long long)m.ir_version, "version", (long long)m.model_version,
                       "custom_metadata_map", props);
}

/* ==================================================================== run */

#define FEW 16  /* inputs and outputs handled without a heap array */

typedef struct {
  const char *names_few[FEW];
  keel_value_t *vals_few[FEW], *outs_few[FEW];
  char fed_few[FEW];
  const char **names;
  keel_value_t **vals, **outs;
  char *fed;
  size_t n;
} run_args;

static int args_init(run_args *a, size_t nin, size_t nout) {
  memset(a, 0, sizeof *a);
  a->names = a->names_few, a->vals = a->vals_few, a->outs = a->outs_few, a->fed = a->fed_few;
  if (nin > FEW) {
    a->names = PyMem_Calloc(nin, sizeof *a->names);
    a->vals = PyMem_Calloc(nin, sizeof *a->vals);
    a->fed = PyMem_Calloc(nin, 1);
  }
  if (nout > FEW) a->outs = PyMem_Calloc(nout, sizeof *a->outs);
  if (!a->names || !a->vals || !a->fed || !a->outs) return PyErr_NoMemory(), -1;
  return 0;
}

static void args_free(run_args *a, size_t nout) {
  for (size_t i = 0; i < a->n; i++) keel_value_release(a->vals[i]);
  for (size_t i = 0; a->outs && i < nout; i++) keel_value_release(a->outs[i]);
  if (a->names != a->names_few) PyMem_Free(a->names);
  if (a->vals != a->vals_few) PyMem_Free(a->vals);
  if (a->fed != a->fed_few) PyMem_Free(a->fed);
  if (a->outs != a->outs_few) PyMem_Free(a->outs);
}

static PyObject *str_list(const keel_io_info *io, size_t n, const char *skip) {
  PyObject *l = PyList_New(0);
  for (size_t i = 0; l && i < n; i++)
    if (!skip || !skip[i]) {
      PyObject *s = PyUnicode_FromString(io[i].name);
      if (!s || PyList_Append(l, s)) Py_CLEAR(l);
      Py_XDECREF(s);
    }
  return l;
}

/* Required inputs not in the feed: ONNX Runtime's message, with names. */
static int check_missing(SessionObject *S, run_args *a, PyObject *feed) {
  int missing = 0;
  for (size_t i = 0; i < S->nin; i++) missing |= !a->fed[i] && !S->in[i].has_default;
  if (!missing) return 0;
  char *skip = PyMem_Calloc(S->nin + 1, 1);
  if (!skip) return PyErr_NoMemory(), -1;
  for (size_t i = 0; i < S->nin; i++) skip[i] = a->fed[i] || S->in[i].has_default;
  PyObject *req = str_list(S->in, S->nin, skip), *keys = PyDict_Keys(feed);
  if (req && keys)
    keelpy_invalid("Required inputs (%R) are missing from input feed (%R).", req, keys);
  Py_XDECREF(req), Py_XDECREF(keys);
  PyMem_Free(skip);
  return -1;
}

/* Converts the feed {name: value} into keel values, in feed order. */
static int convert_feed(SessionObject *S, PyObject *feed, run_args *a) {
  if (!PyDict_Check(feed))
    return keelpy_invalid("input_feed must be a dict {name: array}, got %s", Py_TYPE(feed)->tp_name), -1;
  Py_ssize_t pos = 0;
  PyObject *k, *v;
  while (PyDict_Next(feed, &pos, &k, &v)) {
    PyObject *idx = PyUnicode_Check(k) ? PyDict_GetItemWithError(S->in_index, k) : NULL;
    if (!idx) {
      if (PyErr_Occurred()) return -1;
      PyObject *names = str_list(S->in, S->nin, NULL);
      if (names) keelpy_invalid("Invalid input name: %R (the model's inputs are %R)", k, names);
      Py_XDECREF(names);
      return -1;
    }
    size_t i = PyLong_AsSize_t(idx);
    if (a->n >= S->nin) return keelpy_invalid("too many inputs"), -1;
    a->fed[i] = 1;
    a->names[a->n] = S->in[i].name;
    if (keelpy_feed(S->s, &S->in[i], v, &a->vals[a->n])) return -1;
    a->n++;
  }
  return check_missing(S, a, feed);
}

/* Indices of the requested outputs (None or empty: all of them, as in
 * ONNX Runtime); NULL without an error set means all. */
static PyObject *wanted_outputs(SessionObject *S, PyObject *names) {
  if (names == Py_None) return NULL;
  PyObject *seq = PySequence_Fast(names, "output_names must be a list of names or None");
  if (!seq) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (n == 0) {
    Py_DECREF(seq);
    return NULL;
  }
  PyObject *idx = PyList_New(n);
  for (Py_ssize_t i = 0; idx && i < n; i++) {
    PyObject *name = PySequence_Fast_GET_ITEM(seq, i);
    PyObject *j = PyUnicode_Check(name) ? PyDict_GetItemWithError(S->out_index, name) : NULL;
    if (!j) {
      if (!PyErr_Occurred()) {
        PyObject *all = str_list(S->out, S->nout, NULL);
        if (all) keelpy_invalid("Invalid output name: %R (the model's outputs are %R)", name, all);
        Py_XDECREF(all);
      }
      Py_CLEAR(idx);
      break;
    }
    PyList_SET_ITEM(idx, i, Py_NewRef(j));
  }
  Py_DECREF(seq);
  return idx;
}

/* The outputs asked for, in that order; an output asked twice is copied
 * the second time. */
static PyObject *collect(SessionObject *S, run_args *a, PyObject *idx) {
  Py_ssize_t n = idx ? PyList_GET_SIZE(idx) : (Py_ssize_t)S->nout;
  PyObject *r = PyList_New(n);
  for (Py_ssize_t k = 0; r && k < n; k++) {
    size_t i = idx ? PyLong_AsSize_t(PyList_GET_ITEM(idx, k)) : (size_t)k;
    PyObject *o;
    if (a->outs[i]) {
      keel_value_t *v = a->outs[i];
      a->outs[i] = NULL;
      o = value_to_py(v);
    } else { /* asked for again: the first array owns the bytes */
      PyObject *first = NULL;
      for (Py_ssize_t j = 0; j < k && !first; j++)
        if (PyLong_AsSize_t(PyList_GET_ITEM(idx, j)) == i) first = PyList_GET_ITEM(r, j);
      o = first && PyArray_Check(first) ? PyArray_NewCopy((PyArrayObject *)first, NPY_CORDER)
                                        : Py_XNewRef(first);
    }
    if (!o) Py_CLEAR(r);
    else PyList_SET_ITEM(r, k, o);
  }
  return r;
}

/* run(output_names or None, {name: value}) -> [outputs] */
static PyObject *session_run(SessionObject *S, PyObject *const *args, Py_ssize_t nargs) {
  if (!ready(S)) return NULL;
  if (nargs != 2) return keelpy_invalid("run(output_names, input_feed) takes 2 arguments");
  PyObject *idx = wanted_outputs(S, args[0]);
  if (!idx && PyErr_Occurred()) return NULL;
  run_args a;
  PyObject *r = NULL;
  if (args_init(&a, S->nin, S->nout) == 0 && convert_feed(S, args[1], &a) == 0) {
    keel_status st;
    Py_BEGIN_ALLOW_THREADS
    st = keel_run(S->s, a.names, a.vals, a.n, a.outs);
    Py_END_ALLOW_THREADS
    if (st) keelpy_raise(st, "run");
    else r = collect(S, &a, idx);
  }
  args_free(&a, S->nout);
  Py_XDECREF(idx);
  return r;
}

/* _feed_pointers({name: value}) -> {name: address}: the addresses keel
 * would read each input from, through the same conversion as run (tests
 * prove zero-copy with it). */
static PyObject *session_feed_pointers(SessionObject *S, PyObject *feed) {
  if (!ready(S)) return NULL;
  run_args a;
  PyObject *r = NULL;
  if (args_init(&a, S->nin, S->nout) == 0 && convert_feed(S, feed, &a) == 0) {
    r = PyDict_New();
    for (size_t i = 0; r && i < a.n; i++) {
      PyObject *p = PyLong_FromVoidPtr((void *)keel_value_data(a.vals[i]));
      if (!p || PyDict_SetItemString(r, a.names[i], p)) Py_CLEAR(r);
      Py_XDECREF(p);
    }
  }
  args_free(&a, S->nout);
  return r;
}

/* _from_pb(bytes, kind=1) -> the value of a serialized TensorProto (kind 1),
 * SequenceProto (2) or OptionalProto (3), as run() would return it. */
static PyObject *session_from_pb(SessionObject *S, PyObject *args) {
  Py_buffer b;
  int kind = KEEL_KIND_TENSOR;
  if (!ready(S) || !PyArg_ParseTuple(args, "y*|i:_from_pb", &b, &kind)) return NULL;
  keel_value_t *v;
  keel_status st = keel_value_from_pb(S->s, b.buf, (size_t)b.len, (keel_value_kind)kind, &v);
  PyBuffer_Release(&b);
  return st ? keelpy_raise(st, "reading a protobuf value") : value_to_py(v);
}

static PyObject *session_is_random(SessionObject *S, PyObject *unused) {
  return ready(S) ? PyBool_FromLong(keel_session_is_random(S->s)) : NULL;
}

static PyMethodDef session_methods[] = {
    {"run", (PyCFunction)(void (*)(void))session_run, METH_FASTCALL,
     "run(output_names or None, input_feed) -> list of outputs"},
    {"inputs", (PyCFunction)session_inputs, METH_NOARGS,
     "[(name, type, shape, kind, optional, has_default, dtype)] of the graph inputs"},
    {"outputs", (PyCFunction)session_outputs, METH_NOARGS, "the same for the graph outputs"},
    {"meta", (PyCFunction)session_meta, METH_NOARGS, "the model's metadata as a dict"},
    {"is_random", (PyCFunction)session_is_random, METH_NOARGS,
     "True when the model draws random numbers (results differ between runs)"},
    {"_from_pb", (PyCFunction)session_from_pb, METH_VARARGS,
     "a serialized TensorProto, SequenceProto or OptionalProto as a Python value"},
    {"_feed_pointers", (PyCFunction)session_feed_pointers, METH_O,
     "addresses keel reads each fed input from (for tests)"},
    {NULL, NULL, 0, NULL}};

/* session_methods then keelpy_mem_methods, joined at module init. */
static PyMethodDef all_methods[64];

PyTypeObject KeelSession_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "keel._keel.Session",
    .tp_basicsize = sizeof(SessionObject),
    .tp_dealloc = (destructor)session_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Session(model, mem_limit=0, log_level=2, owner_tags=True, on_iteration=None):\n"
              "a keel session over a model path or the model's bytes.",
    .tp_traverse = (traverseproc)session_traverse,
    .tp_clear = (inquiry)session_clear,
    .tp_weaklistoffset = offsetof(SessionObject, weakrefs),
    .tp_methods = all_methods,
    .tp_init = (initproc)session_init,
    .tp_new = PyType_GenericNew,
};

/* ================================================================ module */

static PyObject *mod_process_bytes(PyObject *m, PyObject *unused) {
  return PyLong_FromUnsignedLongLong(keel_process_bytes());
}

static PyObject *mod_gpu_count(PyObject *m, PyObject *unused) {
  return PyLong_FromLong(keel_gpu_count(NULL, 0));
}

static PyObject *mod_process_device_bytes(PyObject *m, PyObject *unused) {
  return PyLong_FromUnsignedLongLong(keel_process_device_bytes());
}

static PyMethodDef module_methods[] = {
    {"gpu_count", mod_gpu_count, METH_NOARGS, "the NVIDIA GPUs keel can use (0 without a driver)"},
    {"process_device_bytes", mod_process_device_bytes, METH_NOARGS,
     "device bytes keel holds in this process, over all sessions and devices"},
    {"process_bytes", mod_process_bytes, METH_NOARGS,
     "bytes keel holds from the system in this process, over all sessions"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef keel_module = {
    PyModuleDef_HEAD_INIT, .m_name = "keel._keel",
    .m_doc = "keel's C extension: sessions over libkeel (use the keel package).",
    .m_size = -1, .m_methods = module_methods};

static int join_methods(void) {
  size_t n = 0;
  for (const PyMethodDef *d = session_methods; d->ml_name; d++) all_methods[n++] = *d;
  for (const PyMethodDef *d = keelpy_mem_methods; d->ml_name; d++) {
    if (n + 1 >= sizeof all_methods / sizeof all_methods[0]) return -1;
    all_methods[n++] = *d;
  }
  return 0;
}

PyMODINIT_FUNC PyInit__keel(void); /* the only exported name */
PyMODINIT_FUNC PyInit__keel(void) {
  import_array();
  if (join_methods() || PyType_Ready(&KeelSession_Type) || PyType_Ready(&Buffer_Type) ||
      PyType_Ready(&KeelTrainer_Type))
    return NULL;
  PyObject *m = PyModule_Create(&keel_module);
  if (!m) return NULL;
  char version[32];
  snprintf(version, sizeof version, "%d.%d.%d", KEEL_VERSION_MAJOR, KEEL_VERSION_MINOR,
           KEEL_VERSION_PATCH);
  if (add_errors(m) || PyModule_AddObjectRef(m, "Session", (PyObject *)&KeelSession_Type) ||
      PyModule_AddObjectRef(m, "Buffer", (PyObject *)&Buffer_Type) ||
      PyModule_AddObjectRef(m, "Trainer", (PyObject *)&KeelTrainer_Type) ||
      PyModule_AddStringConstant(m, "__version__", version)) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
