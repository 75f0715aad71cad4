/* _keel.h: what the two C files of keel's Python extension share: the
 * session object, the error mapping and the value conversions.
 *
 * _keel.c       the module, errors, sessions, inputs and outputs, run
 * _keel_mem.c   memory statistics, live-block reports, profiling
 * _keel_train.c the trainer (keel_train.h), data-parallel included
 *
 * Everything goes through libkeel's public API (keel.h, keel_stats.h).
 */
#ifndef KEEL_PY_H
#define KEEL_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <keel.h>
#include <keel_stats.h>
#include <keel_train.h>

typedef struct {
  PyObject_HEAD
  keel_session_t *s;
  size_t nin, nout;
  keel_io_info *in, *out;   /* strings borrowed from the session          */
  PyObject *in_index;       /* {name: index}                               */
  PyObject *out_index;
  int log_level;            /* ONNX Runtime severity: 0 verbose .. 4 fatal */
  PyObject *on_iteration;   /* callable(loop, iteration, allocated) or NULL */
  PyObject *weakrefs;
} SessionObject;

extern PyTypeObject KeelSession_Type;

/* Raises the exception class of `st` with keel's message; returns NULL. */
PyObject *keelpy_raise(keel_status st, const char *what);
/* Raises keel.InvalidArgument with a formatted message; returns NULL. */
PyObject *keelpy_invalid(const char *fmt, ...);

/* One input value from a Python object (an array, a list for a
 * sequence, None for an optional) for input `io` of session s: 0, or -1
 * with a Python exception set. */
int keelpy_feed(keel_session_t *s, const keel_io_info *io, PyObject *obj, keel_value_t **out);

/* keel._keel.Trainer (_keel_train.c). */
extern PyTypeObject KeelTrainer_Type;

/* Methods of keel._keel.Session defined in _keel_mem.c (NULL-terminated). */
extern PyMethodDef keelpy_mem_methods[];

#endif /* KEEL_PY_H */
