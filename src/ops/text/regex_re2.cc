// regex_re2.cc: the one C++ file in keel: a C interface over RE2 for
// RegexFullMatch (regex.c). The ONNX specification says the pattern is RE2
// syntax, so the engine is RE2 itself (Debian's libre2-dev).
//
// RE2 allocates with operator new, outside keel's allocator: a compiled
// pattern lives only for one kernel call (kernels keep no state) and is
// freed before the kernel returns, so nothing stays behind; the bytes are
// not in keel's figures. No C++ exception crosses into C: every entry point
// catches them (std::bad_alloc is the only one RE2 can raise).
#include <re2/re2.h>

#include <cstring>
#include <new>

#include "ops/text/regex_re2.h"

struct keel_re2 {
  RE2 re;
  keel_re2(const char *p, size_t n, const RE2::Options &o) : re(re2::StringPiece(p, n), o) {}
};

extern "C" keel_re2 *keel_re2_compile(const char *pattern, size_t n, char *err, size_t cap) {
  if (cap) err[0] = 0;
  try {
    RE2::Options opt;
    opt.set_log_errors(false);  // the library never prints
    keel_re2 *r = new keel_re2(pattern, n, opt);
    if (r->re.ok()) return r;
    if (cap) {
      const std::string &e = r->re.error();
      size_t len = e.size() < cap - 1 ? e.size() : cap - 1;
      std::memcpy(err, e.data(), len);
      err[len] = 0;
    }
    delete r;
  } catch (...) {
    if (cap) std::strncpy(err, "out of memory compiling the pattern", cap - 1), err[cap - 1] = 0;
  }
  return nullptr;
}

extern "C" int keel_re2_full_match(const keel_re2 *r, const char *s, size_t n) {
  try {
    return RE2::FullMatch(re2::StringPiece(s, n), r->re) ? 1 : 0;
  } catch (...) {
    return -1;
  }
}

extern "C" void keel_re2_free(keel_re2 *r) { delete r; }
