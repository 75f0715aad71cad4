/* emu.h: what the emulated device's kernel groups (emu_<group>.c) share
 * with emu.c. */
#ifndef KEEL_DEVICE_EMU_H
#define KEEL_DEVICE_EMU_H

#include "device/device.h"

/* The host address behind an emulated device pointer (device.h: the
 * emulated device's pointers fault on the host until turned back). Only
 * the emulated device's own files may call it. */
KEEL_INTERNAL void *keel_emu_host(const void *p);

#endif
