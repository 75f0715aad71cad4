/* constant.c: the Constant op, for the Constant nodes that reach run time.
 * Constants of a graph are folded into model constants when the file is
 * read; this kernel serves those that come from inlined model-local
 * functions, whose attributes may be references filled in per call. A
 * `value` tensor is handed out without a copy (its bytes live as long as
 * the model); scalar and list forms are made into a new tensor. */
#include "ops/kernel.h"

static keel_status scalar_or_list(keel_kctx *k, const keel_attr *a) {
  int64_t n = 1;
  int dt, rank = 0;
  if (!strcmp(a->name, "value_float") || !strcmp(a->name, "value_floats")) dt = KEEL_FLOAT;
  else if (!strcmp(a->name, "value_int") || !strcmp(a->name, "value_ints")) dt = KEEL_INT64;
  else if (!strcmp(a->name, "value_string") || !strcmp(a->name, "value_strings")) dt = KEEL_STRING;
  else return keel_err(KEEL_ERR_INVALID_MODEL, "Constant with attribute '%s'", a->name);
  if (a->type == KEEL_ATTR_FLOATS || a->type == KEEL_ATTR_INTS || a->type == KEEL_ATTR_STRINGS)
    n = a->n, rank = 1;
  keel_tensor *o;
  KEEL_TRY(keel_k_out(k, 0, dt, rank, &n, &o));
  for (int64_t i = 0; i < n; i++) {
    if (dt == KEEL_FLOAT) ((float *)o->data)[i] = rank ? a->floats[i] : a->f;
    else if (dt == KEEL_INT64) ((int64_t *)o->data)[i] = rank ? a->ints[i] : a->i;
    else if (rank) KEEL_TRY(keel_tensor_set_string(o, (size_t)i, a->strings[i], a->string_lens[i]));
    else KEEL_TRY(keel_tensor_set_string(o, 0, a->s ? a->s : "", a->slen));
  }
  return KEEL_OK;
}

static keel_status op_constant(keel_kctx *k) {
  if (k->node->n_attr != 1)
    return keel_err(KEEL_ERR_INVALID_MODEL, "Constant needs exactly one value attribute, it has %d",
                    k->node->n_attr);
  const keel_attr *a = &k->node->attrs[0];
  if (a->type == KEEL_ATTR_TENSOR || a->type == KEEL_ATTR_SPARSE_TENSOR) {
    keel_val v = {.kind = KEEL_V_TENSOR, .t = *a->t}; /* STATIC: no copy, no count */
    return keel_k_out_ref(k, 0, &v);
  }
  return scalar_or_list(k, a);
}

const keel_opdef keel_ops_constant[] = {
    {"", "Constant", 1, KEEL_OPSET_MAX, op_constant, 0, KEEL_TS_ALL | KEEL_TS_SMALL},
    {0},
};
