/* _keel.h: what the two C files of keel's Python extension share: the
 * session object, the error mapping and the value conversions.
 *
 * _keel.c     the module, errors, sessions, inputs and outputs, run
 * _keel_mem.c memory statistics, live-block reports, profiling
 *
 * Everything goes through libkeel's public API (keel.h, keel_stats.h).
 */
#ifndef KEEL_PY_H
#define KEEL_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <keel.h>
#include <keel_stats.h>

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

/* Methods of keel._keel.Session defined in _keel_mem.c (NULL-terminated). */
extern PyMethodDef keelpy_mem_methods[];

#endif /* KEEL_PY_H */
