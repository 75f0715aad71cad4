/* _keel_mem.c: the memory side of keel._keel.Session: the allocator's
 * statistics (keel_stats_get), the cap and trim, owner-tagged live-block
 * reports, and the profiler (per-node memory and the Chrome trace).
 *
 * The figures come back raw, with keel's own field names; the keel package
 * turns them into PyTorch's memory_stats() keys and ONNX Runtime's
 * end_profiling() file.
 */
#include "_keel.h"

static int ready(SessionObject *S) {
  if (S->s) return 1;
  keelpy_invalid("the session is not initialised");
  return 0;
}

/* Takes over a keel_free'd string. */
static PyObject *take_text(char *text) {
  PyObject *r = PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace");
  keel_free(text);
  return r;
}

/* stats(device=False) -> dict of keel_stats, by field name: the host
 * heap's, or with device=True the device heap's (keel_stats_get_device;
 * its "device" entry names it). */
static PyObject *mem_stats(SessionObject *S, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"device", NULL};
  int dev = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|p:stats", kwlist, &dev)) return NULL;
  if (!ready(S)) return NULL;
  keel_stats st = {.size = sizeof st};
  const char *name = "cpu";
  keel_status rc = dev ? keel_stats_get_device(S->s, &st, &name) : keel_stats_get(S->s, &st);
  if (rc) return keelpy_raise(rc, "stats");
  return Py_BuildValue(
      "{s:s,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:d,s:K,s:K,s:K}", "device", name,
      "allocated", st.allocated, "allocated_peak", st.allocated_peak, "reserved", st.reserved,
      "reserved_peak", st.reserved_peak, "active_split", st.active_split, "inactive_split",
      st.inactive_split, "n_alloc", st.n_alloc, "n_free", st.n_free, "n_cache_hit",
      st.n_cache_hit, "n_segment_alloc", st.n_segment_alloc, "n_segment_free", st.n_segment_free,
      "n_segments", st.n_segments, "n_oom", st.n_oom, "mem_limit", st.mem_limit, "fragmentation",
      st.fragmentation, "meta_bytes", st.meta_bytes, "bytes_allocated_total",
      st.bytes_allocated_total, "n_alloc_retries", st.n_alloc_retries);
}

static PyObject *mem_reset_peaks(SessionObject *S, PyObject *unused) {
  if (!ready(S)) return NULL;
  keel_stats_reset_peaks(S->s);
  Py_RETURN_NONE;
}

/* trim() -> bytes given back to the system */
static PyObject *mem_trim(SessionObject *S, PyObject *unused) {
  if (!ready(S)) return NULL;
  size_t n;
  Py_BEGIN_ALLOW_THREADS
  n = keel_mem_trim(S->s);
  Py_END_ALLOW_THREADS
  return PyLong_FromSize_t(n);
}

static PyObject *mem_set_limit(SessionObject *S, PyObject *arg) {
  if (!ready(S)) return NULL;
  Py_ssize_t n = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
  if (n == -1 && PyErr_Occurred()) return NULL;
  if (n < 0) return keelpy_invalid("mem_limit must be >= 0, got %zd", n);
  keel_mem_set_limit(S->s, (size_t)n);
  Py_RETURN_NONE;
}

static PyObject *mem_mark(SessionObject *S, PyObject *unused) {
  if (!ready(S)) return NULL;
  return PyLong_FromUnsignedLongLong(keel_mem_mark(S->s));
}

/* live_report(since=0, path_prefix=None, before_iteration=0,
 *             inside_node=None, unreferenced=False, json=True) -> (text, bytes) */
static PyObject *mem_live_report(SessionObject *S, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"since", "path_prefix", "before_iteration", "inside_node",
                           "unreferenced", "json", NULL};
  keel_live_filter f = {.size = sizeof f};
  unsigned long long since = 0;
  long long before = 0;
  int unref = 0, json = 1;
  if (!ready(S) || !PyArg_ParseTupleAndKeywords(args, kw, "|KzLzpp:live_report", kwlist, &since,
                                                &f.path_prefix, &before, &f.inside_node,
                                                &unref, &json))
    return NULL;
  f.since = since, f.before_iteration = before, f.unreferenced = unref;
  char *text;
  uint64_t bytes = 0;
  keel_status st = keel_mem_live_report(S->s, &f, json, &text, &bytes);
  if (st) return keelpy_raise(st, "live report");
  PyObject *t = take_text(text);
  return t ? Py_BuildValue("(NK)", t, (unsigned long long)bytes) : NULL;
}

/* profile_start(memory=True, trace=False) */
static PyObject *prof_start(SessionObject *S, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"memory", "trace", NULL};
  int mem = 1, trace = 0;
  if (!ready(S) || !PyArg_ParseTupleAndKeywords(args, kw, "|pp:profile_start", kwlist, &mem, &trace))
    return NULL;
  unsigned what = (mem ? KEEL_PROFILE_MEMORY : 0u) | (trace ? KEEL_PROFILE_TRACE : 0u);
  keel_status st = keel_profile_start(S->s, what);
  if (st) return keelpy_raise(st, "profile_start");
  Py_RETURN_NONE;
}

static PyObject *prof_stop(SessionObject *S, PyObject *unused) {
  if (!ready(S)) return NULL;
  keel_profile_stop(S->s);
  Py_RETURN_NONE;
}

static PyObject *node_dict(const keel_node_mem *n) {
  return Py_BuildValue("{s:s,s:s,s:s,s:K,s:K,s:K,s:K,s:K,s:K}", "path", n->path, "node", n->node,
                       "op", n->op, "bytes_allocated", n->bytes_allocated, "n_allocs",
                       n->n_allocs, "peak_live", n->peak_live, "live_now", n->live_now,
                       "executions", n->executions, "ns", n->ns);
}

/* profile_nodes() -> [per-node dict] of every node that ran, in keel's order */
static PyObject *prof_nodes(SessionObject *S, PyObject *unused) {
  if (!ready(S)) return NULL;
  size_t n = keel_profile_nodes(S->s, NULL, 0);
  keel_node_mem *rec = PyMem_Calloc(n + 1, sizeof *rec);
  if (!rec) return PyErr_NoMemory();
  n = keel_profile_nodes(S->s, rec, n);
  PyObject *l = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; l && i < n; i++) {
    PyObject *d = node_dict(&rec[i]);
    if (!d) Py_CLEAR(l);
    else PyList_SET_ITEM(l, (Py_ssize_t)i, d);
  }
  PyMem_Free(rec);
  return l;
}

/* profile_other() -> (bytes, allocs) made outside nodes while recording */
static PyObject *prof_other(SessionObject *S, PyObject *unused) {
  if (!ready(S)) return NULL;
  uint64_t bytes = 0, allocs = 0;
  keel_profile_other(S->s, &bytes, &allocs);
  return Py_BuildValue("(KK)", (unsigned long long)bytes, (unsigned long long)allocs);
}

/* profile_mem_report(top) -> keel's per-node table as text */
static PyObject *prof_mem_report(SessionObject *S, PyObject *arg) {
  if (!ready(S)) return NULL;
  long top = PyLong_AsLong(arg);
  if (top == -1 && PyErr_Occurred()) return NULL;
  if (top < 1 || top > 1 << 20) return keelpy_invalid("top must be a positive number, got %ld", top);
  char *text;
  keel_status st = keel_profile_mem_report(S->s, (int)top, &text);
  if (st) return keelpy_raise(st, "memory report");
  return take_text(text);
}

/* profile_trace() -> the Chrome trace JSON */
static PyObject *prof_trace(SessionObject *S, PyObject *unused) {
  if (!ready(S)) return NULL;
  char *json;
  keel_status st = keel_profile_trace_json(S->s, &json);
  if (st) return keelpy_raise(st, "trace");
  return take_text(json);
}

/* describe(json=False) -> keel info's text (or JSON) */
static PyObject *describe(SessionObject *S, PyObject *args) {
  int json = 0;
  if (!ready(S) || !PyArg_ParseTuple(args, "|p:describe", &json)) return NULL;
  char *text;
  keel_status st = keel_session_describe(S->s, json, &text);
  if (st) return keelpy_raise(st, "describe");
  return take_text(text);
}

/* _plant_leak(value or None): test-only, keel_debug_plant_leak */
static PyObject *plant_leak(SessionObject *S, PyObject *arg) {
  if (!ready(S)) return NULL;
  const char *name = arg == Py_None ? NULL : PyUnicode_AsUTF8(arg);
  if (!name && arg != Py_None) return NULL;
  keel_status st = keel_debug_plant_leak(S->s, name);
  if (st) return keelpy_raise(st, "plant leak");
  Py_RETURN_NONE;
}

PyMethodDef keelpy_mem_methods[] = {
    {"stats", (PyCFunction)(void (*)(void))mem_stats, METH_VARARGS | METH_KEYWORDS,
     "keel_stats_get (device=True: keel_stats_get_device) as a dict"},
    {"reset_peaks", (PyCFunction)mem_reset_peaks, METH_NOARGS, "peaks back to the current values"},
    {"trim", (PyCFunction)mem_trim, METH_NOARGS, "give free segments back; returns the bytes"},
    {"set_mem_limit", (PyCFunction)mem_set_limit, METH_O, "cap on reserved bytes (0 = none)"},
    {"mark", (PyCFunction)mem_mark, METH_NOARGS, "a mark for blocks allocated from now on"},
    {"live_report", (PyCFunction)(void (*)(void))mem_live_report, METH_VARARGS | METH_KEYWORDS,
     "live blocks by owner: (text or JSON, bytes)"},
    {"profile_start", (PyCFunction)(void (*)(void))prof_start, METH_VARARGS | METH_KEYWORDS,
     "start recording per-node memory and/or the trace"},
    {"profile_stop", (PyCFunction)prof_stop, METH_NOARGS, "stop recording"},
    {"profile_nodes", (PyCFunction)prof_nodes, METH_NOARGS, "per-node records"},
    {"profile_other", (PyCFunction)prof_other, METH_NOARGS, "bytes and allocations outside nodes"},
    {"profile_mem_report", (PyCFunction)prof_mem_report, METH_O, "keel's per-node table"},
    {"profile_trace", (PyCFunction)prof_trace, METH_NOARGS, "the Chrome trace JSON"},
    {"describe", (PyCFunction)describe, METH_VARARGS, "keel info as text or JSON"},
    {"_plant_leak", (PyCFunction)plant_leak, METH_O, "test-only: keel_debug_plant_leak"},
    {NULL, NULL, 0, NULL}};
