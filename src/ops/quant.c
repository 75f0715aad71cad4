/* quant.c: (being written) */
#include "kernel.h"

const keel_opdef keel_ops_quant[] = {
    {0},
};
