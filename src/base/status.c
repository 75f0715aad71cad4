/* status.c: status text, the per-thread error message, and assert failure. */
#include "base/status.h"

#include <stdio.h>
#include <stdlib.h>

static _Thread_local char tls_msg[KEEL_ERRMSG_MAX];

const char *keel_status_str(keel_status s) {
  switch (s) {
    case KEEL_OK: return "ok";
    case KEEL_ERR_INVALID_ARG: return "invalid argument";
    case KEEL_ERR_INVALID_MODEL: return "invalid model";
    case KEEL_ERR_UNSUPPORTED: return "unsupported";
    case KEEL_ERR_OUT_OF_MEMORY: return "out of memory";
    case KEEL_ERR_SHAPE: return "shape or type mismatch";
    case KEEL_ERR_IO: return "i/o error";
    case KEEL_ERR_STALE: return "stale handle";
    case KEEL_ERR_RUNTIME: return "runtime error";
    case KEEL_ERR_INTERNAL: return "internal error";
    case KEEL_ERR_CANCELLED: return "cancelled";
    case KEEL_ERR_TIMEOUT: return "timed out";
  }
  return "unknown status";
}

const char *keel_last_error(void) { return tls_msg; }

void keel_err_clear(void) { tls_msg[0] = 0; }

keel_status keel_verr(keel_status code, const char *fmt, va_list ap) {
  vsnprintf(tls_msg, sizeof tls_msg, fmt, ap);
  return code;
}

keel_status keel_err(keel_status code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  keel_verr(code, fmt, ap);
  va_end(ap);
  return code;
}

keel_status keel_err_prefix(keel_status code, const char *fmt, ...) {
  char prefix[KEEL_ERRMSG_MAX], old[KEEL_ERRMSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, tls_msg, sizeof old);
  if (snprintf(tls_msg, sizeof tls_msg, "%s: %s", prefix, old) < 0) tls_msg[0] = 0;
  return code;
}

void keel_assert_fail(const char *expr, const char *file, int line,
                      const char *func) {
  fprintf(stderr, "keel: assertion failed: %s (%s:%d, %s)\n", expr, file, line,
          func);
  abort();
}
