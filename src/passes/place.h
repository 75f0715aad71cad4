/* place.h: what the place pass (pass_place.c) decides that the session and
 * the executor read back when they bind and run a placed graph. */
#ifndef KEEL_PASSES_PLACE_H
#define KEEL_PASSES_PLACE_H

#include "ir/ir.h"

/* Whether node n, placed on the GPU, reads input i on the host: the int64
 * values that only shape the work (Reshape's and Expand's shape,
 * Squeeze's and Unsqueeze's axes, Split's sizes, Slice's starts, ends,
 * axes and steps, a Reduce's axes). Such an input stays where it is made:
 * a constant is not copied to the device (session.c) and the node gets
 * the host's tensor (run.c); a CPU value gets no MemcpyFromHost; a value
 * made on the GPU is copied to the host for it (pass_place.c). A pure
 * function of the node's op and opset (no state to keep in sync). */
KEEL_INTERNAL bool keel_place_host_input(const keel_node *n, int32_t i);

#endif
