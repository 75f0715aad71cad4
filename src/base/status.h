/* status.h: error messages. A failing function formats its message with
 * keel_err() into a per-thread buffer and returns the code; callers up the
 * stack may add context in front with keel_err_prefix() ("in Loop 'L'
 * iteration 3: ..."). The public keel_last_error() reads the buffer. */
#ifndef KEEL_STATUS_H
#define KEEL_STATUS_H

#include <stdarg.h>

#include "base/common.h"

#define KEEL_ERRMSG_MAX 1024

/* Set the thread's message and return `code`. */
KEEL_INTERNAL keel_status keel_err(keel_status code, const char *fmt, ...)
    KEEL_PRINTF(2, 3);
KEEL_INTERNAL keel_status keel_verr(keel_status code, const char *fmt,
                                    va_list ap);
/* Put "<prefix>: " in front of the thread's message; returns `code`. */
KEEL_INTERNAL keel_status keel_err_prefix(keel_status code, const char *fmt,
                                          ...) KEEL_PRINTF(2, 3);
KEEL_INTERNAL void keel_err_clear(void);

/* Propagate a failing status. */
#define KEEL_TRY(expr)                           \
  do {                                           \
    keel_status keel_try_s_ = (expr);            \
    if (KEEL_UNLIKELY(keel_try_s_ != KEEL_OK))   \
      return keel_try_s_;                        \
  } while (0)

#endif /* KEEL_STATUS_H */
