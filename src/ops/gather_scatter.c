/* gather_scatter.c: (being written) */
#include "kernel.h"

const keel_opdef keel_ops_gather_scatter[] = {
    {0},
};
