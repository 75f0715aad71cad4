/* cmd_info.c: `keel info`: the model's description from the library. */
#include <string.h>

#include "cli.h"

int cmd_info(int argc, char **argv) {
  const char *model = NULL;
  int json = 0;
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (argv[i][0] == '-') return cli_usage("info", "unknown option");
    else if (!model) model = argv[i];
    else return cli_usage("info", "more than one model given");
  }
  if (!model) return cli_usage("info", "no model given");
  if (!cli_is_file(model)) return cli_usage("info", "no such model file");
  keel_session_t *s;
  keel_status st = keel_session_create(model, NULL, &s);
  if (st) {
    fprintf(stderr, "keel: %s: %s\n", keel_status_str(st), keel_last_error());
    return 1;
  }
  char *text;
  st = keel_session_describe(s, json, &text);
  if (!st) {
    fputs(text, stdout);
    keel_free(text);
  }
  keel_session_destroy(s);
  return st ? 1 : 0;
}
