/* _keel_train.c: keel._keel.Trainer, the trainer of keel_train.h from
 * Python (keel.Trainer in _train.py adds the keyword defaults).
 *
 *   t = Trainer(path, loss, optimizer, lr, momentum, beta1, beta2, eps,
 *               weight_decay, zero_grad, freeze, threads, mem_limit,
 *               data_parallel, bucket_mb, shard_optimizer)
 *   t.step(inputs)            one step; inputs: a list in data-input order
 *                             or a dict by name; returns the loss
 *   t.inputs()                the data inputs' names
 *   t.param_names(), t.param(name) -> numpy copy, t.stats() -> dict
 *   t.save(path), t.checkpoint_save(dir), t.checkpoint_load(dir)
 *
 * A negative number (or None from _train.py) leaves a hyperparameter at
 * torch.optim's default for the optimizer.
 */
#ifndef NPY_NO_DEPRECATED_API
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#endif
#define NO_IMPORT_ARRAY
#define PY_ARRAY_UNIQUE_SYMBOL keel_ARRAY_API
#include "_keel.h"

#include <numpy/arrayobject.h>
#include <stdbool.h>

typedef struct {
  PyObject_HEAD
  keel_trainer_t *t;
  size_t n_in;
  keel_io_info *in;
} TrainerObject;

static keel_status optimizer_of(const char *name, keel_optimizer *out) {
  return keel_optimizer_parse(name, out);
}

static int trainer_init(TrainerObject *T, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"model", "loss", "optimizer", "lr", "momentum", "beta1", "beta2", "eps",
                           "weight_decay", "zero_grad", "freeze", "threads", "mem_limit",
                           "data_parallel", "bucket_mb", "shard_optimizer", NULL};
  const char *path, *loss, *opt, *zg = "none";
  double lr, momentum = -1, beta1 = -1, beta2 = -1, eps = -1, wd = -1, bucket_mb = 0;
  PyObject *freeze = NULL;
  int threads = 0, dp = 0, shard = 0;
  unsigned long long mem_limit = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sssd|dddddsOiKpdp", kwlist, &path, &loss, &opt, &lr, &momentum,
                                   &beta1, &beta2, &eps, &wd, &zg, &freeze, &threads, &mem_limit, &dp,
                                   &bucket_mb, &shard))
    return -1;
  if (T->t) {
    keelpy_invalid("Trainer: already initialized");
    return -1;
  }
  keel_train_options o;
  keel_optimizer which;
  if (optimizer_of(opt, &which)) {
    keelpy_invalid("Trainer: optimizer '%s': sgd, momentum, adam or adamw", opt);
    return -1;
  }
  keel_train_options_init(&o, which, lr);
  if (momentum >= 0) o.momentum = momentum;
  if (beta1 >= 0) o.beta1 = beta1;
  if (beta2 >= 0) o.beta2 = beta2;
  if (eps >= 0) o.eps = eps;
  if (wd >= 0) o.weight_decay = wd;
  if (keel_zero_grad_parse(zg, &o.zero_grad)) {
    keelpy_invalid("Trainer: zero_grad '%s': 'none' or 'zeros'", zg);
    return -1;
  }
  o.loss = loss;
  o.data_parallel = dp, o.bucket_mb = bucket_mb, o.shard_optimizer = shard;
  /* freeze: an iterable of names, kept alive through creation */
  PyObject *names = freeze && freeze != Py_None ? PySequence_Fast(freeze, "Trainer: freeze must be a list of names") : NULL;
  if (freeze && freeze != Py_None && !names) return -1;
  Py_ssize_t nf = names ? PySequence_Fast_GET_SIZE(names) : 0;
  const char **fr = PyMem_Calloc((size_t)nf + 1, sizeof *fr);
  if (!fr) {
    Py_XDECREF(names);
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < nf; i++)
    if (!(fr[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(names, i)))) {
      PyMem_Free(fr), Py_XDECREF(names);
      return -1;
    }
  o.freeze = fr, o.n_freeze = (size_t)nf;
  keel_options so = {.size = sizeof so, .threads = threads, .mem_limit = (size_t)mem_limit};
  o.session = &so;
  keel_status st;
  Py_BEGIN_ALLOW_THREADS
  st = keel_trainer_create(path, &o, &T->t);
  Py_END_ALLOW_THREADS
  PyMem_Free(fr);
  Py_XDECREF(names);
  if (st) return keelpy_raise(st, path), -1;
  T->n_in = keel_trainer_input_count(T->t);
  T->in = PyMem_Calloc(T->n_in + 1, sizeof *T->in);
  if (!T->in) return PyErr_NoMemory(), -1;
  for (size_t i = 0; i < T->n_in; i++)
    if ((st = keel_trainer_input(T->t, i, &T->in[i]))) return keelpy_raise(st, "Trainer inputs"), -1;
  return 0;
}

static void trainer_dealloc(TrainerObject *T) {
  keel_trainer_destroy(T->t);
  PyMem_Free(T->in);
  Py_TYPE(T)->tp_free((PyObject *)T);
}

static int ready(TrainerObject *T) {
  if (T->t) return 0;
  keelpy_invalid("Trainer: not initialized");
  return -1;
}

/* step(inputs): a list in data-input order, or a dict by name. */
static PyObject *trainer_step(TrainerObject *T, PyObject *feed) {
  if (ready(T)) return NULL;
  bool by_name = PyDict_Check(feed);
  PyObject *seq = by_name ? NULL : PySequence_Fast(feed, "Trainer.step: a list of arrays or a dict by name");
  if (!by_name && !seq) return NULL;
  if (seq && (size_t)PySequence_Fast_GET_SIZE(seq) != T->n_in) {
    Py_DECREF(seq);
    return keelpy_invalid("Trainer.step: %zu inputs given, the model takes %zu", (size_t)PySequence_Fast_GET_SIZE(feed),
                          T->n_in);
  }
  keel_value_t **vals = PyMem_Calloc(T->n_in + 1, sizeof *vals);
  int rc = vals ? 0 : (PyErr_NoMemory(), -1);
  keel_session_t *s = keel_trainer_session(T->t);
  for (size_t i = 0; !rc && i < T->n_in; i++) {
    PyObject *v = by_name ? PyDict_GetItemString(feed, T->in[i].name) : PySequence_Fast_GET_ITEM(seq, i);
    if (!v) {
      keelpy_invalid("Trainer.step: input '%s' is missing", T->in[i].name);
      rc = -1;
    } else {
      rc = keelpy_feed(s, &T->in[i], v, &vals[i]);
    }
  }
  float loss = 0;
  keel_status st = KEEL_OK;
  if (!rc) {
    Py_BEGIN_ALLOW_THREADS
    st = keel_trainer_step(T->t, vals, T->n_in, &loss);
    Py_END_ALLOW_THREADS
  }
  for (size_t i = 0; vals && i < T->n_in; i++) keel_value_release(vals[i]);
  PyMem_Free(vals);
  Py_XDECREF(seq);
  if (rc) return NULL;
  if (st) return keelpy_raise(st, "Trainer.step");
  return PyFloat_FromDouble(loss);
}

static PyObject *trainer_inputs(TrainerObject *T, PyObject *unused) {
  (void)unused;
  if (ready(T)) return NULL;
  PyObject *l = PyList_New((Py_ssize_t)T->n_in);
  for (size_t i = 0; l && i < T->n_in; i++) PyList_SET_ITEM(l, (Py_ssize_t)i, PyUnicode_FromString(T->in[i].name));
  return l;
}

static PyObject *trainer_param_names(TrainerObject *T, PyObject *unused) {
  (void)unused;
  if (ready(T)) return NULL;
  size_t n = keel_trainer_param_count(T->t);
  PyObject *l = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; l && i < n; i++)
    PyList_SET_ITEM(l, (Py_ssize_t)i, PyUnicode_FromString(keel_trainer_param_name(T->t, i)));
  return l;
}

/* param(name): a float32 numpy copy in the parameter's shape. */
static PyObject *trainer_param(TrainerObject *T, PyObject *name) {
  if (ready(T)) return NULL;
  const char *nm = PyUnicode_AsUTF8(name);
  if (!nm) return NULL;
  const keel_value_t *v;
  keel_status st = keel_trainer_param(T->t, nm, &v);
  if (st) return keelpy_raise(st, nm);
  npy_intp dims[NPY_MAXDIMS];
  int rank = keel_value_rank(v);
  for (int d = 0; d < rank; d++) dims[d] = (npy_intp)keel_value_shape(v)[d];
  PyObject *a = PyArray_SimpleNew(rank, dims, NPY_FLOAT32);
  if (!a) return NULL;
  st = keel_trainer_param_copy(T->t, nm, PyArray_DATA((PyArrayObject *)a), (size_t)PyArray_SIZE((PyArrayObject *)a));
  if (st) {
    Py_DECREF(a);
    return keelpy_raise(st, nm);
  }
  return a;
}

static PyObject *trainer_stats(TrainerObject *T, PyObject *unused) {
  (void)unused;
  if (ready(T)) return NULL;
  keel_train_stats s = {.size = sizeof s};
  keel_status st = keel_trainer_stats(T->t, &s);
  if (st) return keelpy_raise(st, "Trainer.stats");
  return Py_BuildValue("{s:L,s:K,s:K,s:K,s:K,s:K,s:d,s:i,s:i,s:i,s:K,s:K}", "steps", (long long)s.steps,
                       "allocated", (unsigned long long)s.allocated, "reserved", (unsigned long long)s.reserved,
                       "peak", (unsigned long long)s.peak, "param_bytes", (unsigned long long)s.param_bytes,
                       "state_bytes", (unsigned long long)s.state_bytes, "last_loss", s.last_loss, "rank", s.dp_rank,
                       "ranks", s.dp_size, "buckets", s.dp_buckets, "allreduce_ns",
                       (unsigned long long)s.allreduce_ns, "buckets_overlapped",
                       (unsigned long long)s.buckets_overlapped);
}

typedef keel_status (*path_fn)(keel_trainer_t *t, const char *path);
static keel_status save_model(keel_trainer_t *t, const char *p) { return keel_trainer_save(t, p); }
static keel_status save_ckpt(keel_trainer_t *t, const char *p) { return keel_trainer_checkpoint_save(t, p); }

static PyObject *with_path(TrainerObject *T, PyObject *path, path_fn fn) {
  if (ready(T)) return NULL;
  PyObject *b = NULL;
  if (!PyUnicode_FSConverter(path, &b)) return NULL;
  keel_status st;
  const char *p = PyBytes_AS_STRING(b);
  Py_BEGIN_ALLOW_THREADS
  st = fn(T->t, p);
  Py_END_ALLOW_THREADS
  PyObject *r = st ? keelpy_raise(st, p) : Py_NewRef(Py_None);
  Py_DECREF(b);
  return r;
}

static PyObject *trainer_save(TrainerObject *T, PyObject *p) { return with_path(T, p, save_model); }
static PyObject *trainer_checkpoint_save(TrainerObject *T, PyObject *p) { return with_path(T, p, save_ckpt); }
static PyObject *trainer_checkpoint_load(TrainerObject *T, PyObject *p) {
  return with_path(T, p, keel_trainer_checkpoint_load);
}

static PyMethodDef trainer_methods[] = {
    {"step", (PyCFunction)trainer_step, METH_O, "one step on a batch; returns the loss"},
    {"inputs", (PyCFunction)trainer_inputs, METH_NOARGS, "the data inputs' names, in order"},
    {"param_names", (PyCFunction)trainer_param_names, METH_NOARGS, "the trained parameters' names"},
    {"param", (PyCFunction)trainer_param, METH_O, "a parameter's current value (a numpy copy)"},
    {"stats", (PyCFunction)trainer_stats, METH_NOARGS, "steps, memory and data-parallel figures"},
    {"save", (PyCFunction)trainer_save, METH_O, "writes the model with the trained values"},
    {"checkpoint_save", (PyCFunction)trainer_checkpoint_save, METH_O,
     "writes parameters and optimizer state (every rank calls it in a data-parallel job)"},
    {"checkpoint_load", (PyCFunction)trainer_checkpoint_load, METH_O, "continues from a checkpoint"},
    {NULL, NULL, 0, NULL}};

PyTypeObject KeelTrainer_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "keel._keel.Trainer",
    .tp_basicsize = sizeof(TrainerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "keel's trainer (keel_train.h); use keel.Trainer",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)trainer_init,
    .tp_dealloc = (destructor)trainer_dealloc,
    .tp_methods = trainer_methods,
};
