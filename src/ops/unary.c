/* unary.c: (being written) */
#include "kernel.h"

const keel_opdef keel_ops_unary[] = {
    {0},
};
