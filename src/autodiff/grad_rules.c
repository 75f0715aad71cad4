/* grad_rules.c: the derivative-rule tables of every family file, and the
 * lookup the autodiff driver uses. A family adds its {0}-terminated table
 * here (declared in autodiff.h). */
#include <string.h>

#include "autodiff/ad_driver.h"

static const ad_rule *const g_tables[] = {
    ad_rules_basic,
    ad_rules_shape,
    ad_rules_math,
    ad_rules_nn,
    ad_rules_control,
};

const ad_rule *ad_rule_find(const char *op, const char *domain) {
  for (size_t t = 0; t < sizeof g_tables / sizeof g_tables[0]; t++)
    for (const ad_rule *r = g_tables[t]; r->op; r++)
      if (!strcmp(r->op, op) && !strcmp(r->domain, domain)) return r;
  return NULL;
}
