/* signal.c: (being written) */
#include "kernel.h"

const keel_opdef keel_ops_signal[] = {
    {0},
};
