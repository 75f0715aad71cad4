/* device.c: opening a device by kind (device.h) and the process-wide
 * count of device bytes. */
#include "device/device.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/status.h"
#include "base/sysmem.h"
#include "device/dev_blas.h"
#include "keel.h"

static _Atomic int64_t g_device_bytes; /* segments keel holds, all devices */

void keel_device_bytes_add(int64_t delta) { atomic_fetch_add(&g_device_bytes, delta); }
uint64_t keel_process_device_bytes(void) { return (uint64_t)atomic_load(&g_device_bytes); }

/* "<prefix>" or "<prefix>:N" */
static bool kind_ordinal(const char *s, const char *prefix, int *ordinal) {
  size_t n = strlen(prefix);
  if (strncmp(s, prefix, n)) return false;
  if (!s[n]) return *ordinal = 0, true;
  if (s[n] != ':' || s[n + 1] < '0' || s[n + 1] > '9') return false;
  char *end;
  long v = strtol(s + n + 1, &end, 10);
  if (*end || v < 0 || v >= 1024) return false;
  *ordinal = (int)v;
  return true;
}

keel_status keel_device_parse(const char *s, keel_device_kind *kind, int *ordinal) {
  *kind = 0, *ordinal = 0;
  if (!s || !s[0] || !strcmp(s, "cpu")) return KEEL_OK;
  if (kind_ordinal(s, "cuda", ordinal)) return *kind = KEEL_DEVICE_CUDA, KEEL_OK;
  if (kind_ordinal(s, "emu", ordinal)) return *kind = KEEL_DEVICE_EMU, KEEL_OK;
  return keel_err(KEEL_ERR_INVALID_ARG, "device '%s': expected cpu, cuda, cuda:N or emu", s);
}

keel_status keel_device_open(keel_device_kind kind, int ordinal, keel_device **out) {
  keel_device *d = keel_sys_calloc(1, sizeof *d);
  if (!d) return keel_err(KEEL_ERR_OUT_OF_MEMORY, "device");
  d->kind = kind, d->ordinal = ordinal;
  snprintf(d->name, sizeof d->name, "%s:%d", kind == KEEL_DEVICE_EMU ? "emu" : "cuda", ordinal);
  keel_status st = kind == KEEL_DEVICE_EMU    ? keel_emu_open(ordinal, d)
                   : kind == KEEL_DEVICE_CUDA ? keel_cuda_device_open(ordinal, d)
                                              : keel_err(KEEL_ERR_INVALID_ARG, "device kind %d", (int)kind);
  if (st) {
    keel_err_prefix(st, "device %s", d->name);
    keel_sys_free(d, sizeof *d);
    return st;
  }
  *out = d;
  return KEEL_OK;
}

void keel_device_close(keel_device *d) {
  if (!d) return;
  /* the kernel groups' library handles go before the context they live in */
  if (d->blas && d->blas->close) d->blas->close(d);
  if (d->ops) d->ops->close(d->impl);
  keel_sys_free(d, sizeof *d);
}
