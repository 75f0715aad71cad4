/* regex_re2.h: the C side of regex_re2.cc, RE2 behind three functions.
 * Patterns and subjects are byte strings of explicit length (UTF-8 for
 * RE2's default options). */
#ifndef KEEL_REGEX_RE2_H
#define KEEL_REGEX_RE2_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct keel_re2 keel_re2;

/* Compiles pattern[0..n); NULL on a syntax error or out of memory, with
 * the reason in err (cap bytes, NUL-terminated). Free with keel_re2_free. */
keel_re2 *keel_re2_compile(const char *pattern, size_t n, char *err, size_t cap);
/* 1 when all of s[0..n) matches, 0 when not, -1 on an internal failure. */
int keel_re2_full_match(const keel_re2 *r, const char *s, size_t n);
/* Accepts NULL. */
void keel_re2_free(keel_re2 *r);

#ifdef __cplusplus
}
#endif

#endif
