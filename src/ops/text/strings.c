/* strings.c: the string operators StringNormalizer, TfIdfVectorizer,
 * StringConcat, StringSplit and RegexFullMatch (through RE2: regex_re2.cc),
 * with the pieces they need: locale-free UTF-8 case mapping and a small
 * open-addressing hash table that lives in kernel scratch memory.
 *
 * Case mapping does not consult the C library's locales (a server may have
 * none installed, and towupper differs between systems). It decodes UTF-8,
 * maps code points with Unicode's simple (one-to-one) case mappings for
 * ASCII, Latin-1 Supplement, Latin Extended-A, Greek and Cyrillic, and
 * re-encodes; anything else, including bytes that are not valid UTF-8,
 * passes through unchanged. One-to-many mappings (ß -> SS, ŉ -> ʼN) are not
 * applied, so a string never grows: every mapped code point is below
 * U+0800 and keeps or shortens its encoded length.
 *
 * TfIdfVectorizer builds its n-gram pool into a trie held in the hash
 * table (one entry per edge: parent node + token), once per call, and
 * walks it from each start position as ONNX Runtime's reference does.
 */
#include "ops/kernel.h"
#include "ops/text/regex_re2.h"

/* ============================================================ UTF-8 */

/* Length of the valid UTF-8 sequence at s[0..n) and its code point, or 0
 * when the bytes there are not one (overlong forms, surrogates, values
 * above U+10FFFF and truncated sequences included). */
static size_t utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
  uint8_t b = s[0];
  if (b < 0x80) {
    *cp = b;
    return 1;
  }
  size_t len = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
  if (!len || len > n) return 0;
  uint8_t lo = 0x80, hi = 0xBF; /* the second byte's range narrows for some leads */
  if (b == 0xE0) lo = 0xA0;
  else if (b == 0xED) hi = 0x9F;
  else if (b == 0xF0) lo = 0x90;
  else if (b == 0xF4) hi = 0x8F;
  if (s[1] < lo || s[1] > hi) return 0;
  uint32_t c = b & (0x7F >> len);
  for (size_t i = 1; i < len; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    c = (c << 6) | (s[i] & 0x3F);
  }
  *cp = c;
  return len;
}

/* Code points below U+0800 only (all that the case tables produce). */
static size_t utf8_encode_small(uint32_t c, uint8_t *out) {
  if (c < 0x80) {
    out[0] = (uint8_t)c;
    return 1;
  }
  out[0] = (uint8_t)(0xC0 | (c >> 6));
  out[1] = (uint8_t)(0x80 | (c & 0x3F));
  return 2;
}

/* ======================================================= case tables */

/* Code points lo..hi (every one, or every other one from lo when step is 2:
 * the alternating capital/small pairs of Latin Extended-A, Greek and
 * Cyrillic) map to themselves plus delta. From UnicodeData.txt's simple
 * mappings. */
typedef struct crange {
  uint16_t lo, hi;
  int16_t delta;
  uint8_t step;
} crange;

static const crange TO_LOWER[] = {
    {0xC0, 0xD6, 32, 1},      {0xD8, 0xDE, 32, 1},     {0x100, 0x12E, 1, 2},
    {0x130, 0x130, -199, 1},  {0x132, 0x136, 1, 2},    {0x139, 0x147, 1, 2},
    {0x14A, 0x176, 1, 2},     {0x178, 0x178, -121, 1}, {0x179, 0x17D, 1, 2},
    {0x370, 0x372, 1, 2},     {0x376, 0x376, 1, 1},    {0x37F, 0x37F, 116, 1},
    {0x386, 0x386, 38, 1},    {0x388, 0x38A, 37, 1},   {0x38C, 0x38C, 64, 1},
    {0x38E, 0x38F, 63, 1},    {0x391, 0x3A1, 32, 1},   {0x3A3, 0x3AB, 32, 1},
    {0x3CF, 0x3CF, 8, 1},     {0x3D8, 0x3EE, 1, 2},    {0x3F4, 0x3F4, -60, 1},
    {0x3F7, 0x3F7, 1, 1},     {0x3F9, 0x3F9, -7, 1},   {0x3FA, 0x3FA, 1, 1},
    {0x3FD, 0x3FF, -130, 1},  {0x400, 0x40F, 80, 1},   {0x410, 0x42F, 32, 1},
    {0x460, 0x480, 1, 2},     {0x48A, 0x4BE, 1, 2},    {0x4C0, 0x4C0, 15, 1},
    {0x4C1, 0x4CD, 1, 2},     {0x4D0, 0x4FE, 1, 2},
};

static const crange TO_UPPER[] = {
    {0xB5, 0xB5, 743, 1},     {0xE0, 0xF6, -32, 1},    {0xF8, 0xFE, -32, 1},
    {0xFF, 0xFF, 121, 1},     {0x101, 0x12F, -1, 2},   {0x131, 0x131, -232, 1},
    {0x133, 0x137, -1, 2},    {0x13A, 0x148, -1, 2},   {0x14B, 0x177, -1, 2},
    {0x17A, 0x17E, -1, 2},    {0x17F, 0x17F, -300, 1}, {0x371, 0x373, -1, 2},
    {0x377, 0x377, -1, 1},    {0x37B, 0x37D, 130, 1},  {0x3AC, 0x3AC, -38, 1},
    {0x3AD, 0x3AF, -37, 1},   {0x3B1, 0x3C1, -32, 1},  {0x3C2, 0x3C2, -31, 1},
    {0x3C3, 0x3CB, -32, 1},   {0x3CC, 0x3CC, -64, 1},  {0x3CD, 0x3CE, -63, 1},
    {0x3D0, 0x3D0, -62, 1},   {0x3D1, 0x3D1, -57, 1},  {0x3D5, 0x3D5, -47, 1},
    {0x3D6, 0x3D6, -54, 1},   {0x3D7, 0x3D7, -8, 1},   {0x3D9, 0x3EF, -1, 2},
    {0x3F0, 0x3F0, -86, 1},   {0x3F1, 0x3F1, -80, 1},  {0x3F2, 0x3F2, 7, 1},
    {0x3F3, 0x3F3, -116, 1},  {0x3F5, 0x3F5, -96, 1},  {0x3F8, 0x3F8, -1, 1},
    {0x3FB, 0x3FB, -1, 1},    {0x430, 0x44F, -32, 1},  {0x450, 0x45F, -80, 1},
    {0x461, 0x481, -1, 2},    {0x48B, 0x4BF, -1, 2},   {0x4C2, 0x4CE, -1, 2},
    {0x4CF, 0x4CF, -15, 1},   {0x4D1, 0x4FF, -1, 2},
};

static uint32_t cmap(const crange *t, size_t n, uint32_t c) {
  if (c < 0xB5 || c > 0x4FF) return c; /* ASCII is handled by the callers */
  for (size_t i = 0; i < n && t[i].lo <= c; i++)
    if (c <= t[i].hi && (t[i].step == 1 || ((c - t[i].lo) & 1) == 0))
      return (uint32_t)((int32_t)c + t[i].delta);
  return c;
}

static uint32_t to_lower(uint32_t c) {
  if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
  return cmap(TO_LOWER, KEEL_COUNTOF(TO_LOWER), c);
}

static uint32_t to_upper(uint32_t c) {
  if (c < 0x80) return c >= 'a' && c <= 'z' ? c - 32 : c;
  return cmap(TO_UPPER, KEEL_COUNTOF(TO_UPPER), c);
}

/* Simple case folding (CaseFolding.txt's C and S entries) as
 * lower(upper(c)): it also unifies the variant small letters (final sigma,
 * ϐ, ϑ, µ, ſ ...) with their plain forms. The Turkic dotted and dotless i
 * (U+0130, U+0131) only have Turkic-specific foldings: they stay. */
static uint32_t to_fold(uint32_t c) {
  return c == 0x130 || c == 0x131 ? c : to_lower(to_upper(c));
}

enum { CASE_NONE, CASE_LOWER, CASE_UPPER, CASE_FOLD };

/* Maps s[0..n) into out (room for n bytes: the mapping never grows a
 * string) and returns the new length. */
static size_t case_map(const char *s, size_t n, int how, char *out) {
  const uint8_t *p = (const uint8_t *)s;
  uint8_t *o = (uint8_t *)out;
  size_t w = 0;
  for (size_t i = 0; i < n;) {
    uint32_t c;
    size_t len = utf8_decode(p + i, n - i, &c);
    if (len == 0) { /* not UTF-8: the byte passes through */
      o[w++] = p[i++];
      continue;
    }
    uint32_t m = how == CASE_LOWER ? to_lower(c) : how == CASE_UPPER ? to_upper(c) : to_fold(c);
    if (m == c) memcpy(o + w, p + i, len), w += len;
    else w += utf8_encode_small(m, o + w);
    i += len;
  }
  return w;
}

/* ======================================================= hash table */

/* Open addressing over int32 entry ids (-1: empty); the caller keeps the
 * entries and supplies hashes and the equality test. Capacity is a power
 * of two at least twice the entry count, so probes stay short and a free
 * slot always exists. */
typedef struct htab {
  int32_t *slot;
  uint64_t mask;
} htab;

typedef bool (*htab_eq_fn)(const void *ctx, int32_t entry, const void *key);

static keel_status htab_init(keel_kctx *k, int64_t n, htab *h) {
  uint64_t cap = 16;
  while (cap < (uint64_t)n * 2) cap *= 2;
  void *p;
  KEEL_TRY(keel_k_scratch(k, cap * sizeof(int32_t), &p));
  h->slot = p;
  h->mask = cap - 1;
  memset(h->slot, 0xFF, cap * sizeof(int32_t));
  return KEEL_OK;
}

/* The entry equal to key, or -1; *at gets the slot where it would go. */
static int32_t htab_find(const htab *h, uint64_t hash, htab_eq_fn eq, const void *ctx,
                         const void *key, uint64_t *at) {
  for (uint64_t i = hash & h->mask;; i = (i + 1) & h->mask) {
    int32_t e = h->slot[i];
    if (e < 0 || eq(ctx, e, key)) {
      if (at) *at = i;
      return e;
    }
  }
}

static uint64_t mix64(uint64_t x) { /* splitmix64's finalizer */
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

static uint64_t hash_bytes(const char *s, size_t n) { /* FNV-1a */
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001B3ull;
  return mix64(h);
}

/* ================================================== StringNormalizer */

typedef struct span {
  const char *p;
  size_t n;
} span;

static bool span_eq(const void *ctx, int32_t e, const void *key) {
  const span *a = (const span *)ctx + e, *b = key;
  return a->n == b->n && (a->n == 0 || !memcmp(a->p, b->p, a->n));
}

/* The stopword set: each word (case-folded unless case-sensitive) hashed
 * into a table over `words`. `buf` receives the folded bytes. */
typedef struct stopset {
  span *words;
  htab h;
  bool fold;
} stopset;

static keel_status stopset_build(keel_kctx *k, const keel_attr *a, bool fold, stopset *st) {
  int n = a ? a->n : 0;
  size_t total = 0;
  for (int i = 0; i < n; i++) total += a->string_lens[i];
  void *p, *b;
  KEEL_TRY(keel_k_scratch(k, (size_t)n * sizeof(span) + 1, &p));
  KEEL_TRY(keel_k_scratch(k, total + 1, &b));
  KEEL_TRY(htab_init(k, n, &st->h));
  st->words = p;
  st->fold = fold;
  char *out = b;
  for (int i = 0; i < n; i++) {
    span w = {a->strings[i], a->string_lens[i]};
    if (fold) {
      w.n = case_map(w.p, w.n, CASE_FOLD, out);
      w.p = out;
      out += w.n;
    }
    uint64_t at;
    st->words[i] = w;
    if (htab_find(&st->h, hash_bytes(w.p, w.n), span_eq, st->words, &w, &at) < 0)
      st->h.slot[at] = i; /* a repeated stopword keeps its first entry */
  }
  return KEEL_OK;
}

/* tmp: room for the longest input string (folding happens there). */
static bool stopset_has(const stopset *st, const keel_string *s, char *tmp) {
  span w = {s->data, s->len};
  if (st->fold) {
    w.n = case_map(w.p, w.n, CASE_FOLD, tmp);
    w.p = tmp;
  }
  return htab_find(&st->h, hash_bytes(w.p, w.n), span_eq, st->words, &w, NULL) >= 0;
}

static keel_status strnorm_attrs(keel_kctx *k, int *how, const keel_attr **stop) {
  const char *act = keel_k_attr_s(k, "case_change_action", "NONE");
  if (!strcmp(act, "NONE")) *how = CASE_NONE;
  else if (!strcmp(act, "LOWER")) *how = CASE_LOWER;
  else if (!strcmp(act, "UPPER")) *how = CASE_UPPER;
  else
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "case_change_action must be LOWER, UPPER or NONE, got '%s'", act);
  *stop = keel_k_attr(k, "stopwords");
  if (*stop && (*stop)->type != KEEL_ATTR_STRINGS)
    return keel_err(KEEL_ERR_INVALID_MODEL, "stopwords must be a list of strings");
  /* `locale` is accepted and ignored: the mapping is the same everywhere */
  return KEEL_OK;
}

/* Removes stopwords, then changes case. X is [C] or [1, C]; when every
 * element is removed the output is one empty string, [1] or [1, 1]. */
static keel_status op_string_normalizer(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  char sb[64];
  if (x->dtype != KEEL_STRING || !(x->rank == 1 || (x->rank == 2 && x->shape[0] == 1)))
    return keel_err(KEEL_ERR_SHAPE, "X must be a string tensor of shape [C] or [1, C], got %s %s",
                    keel_dtype_name((keel_dtype)x->dtype), keel_shape_str(x->rank, x->shape, sb, sizeof sb));
  int how;
  const keel_attr *stop;
  KEEL_TRY(strnorm_attrs(k, &how, &stop));
  stopset st;
  KEEL_TRY(stopset_build(k, stop, keel_k_attr_i(k, "is_case_sensitive", 0) == 0, &st));
  int64_t c = keel_tensor_numel(x), kept = 0;
  const keel_string *s = x->data;
  size_t maxlen = 0;
  for (int64_t i = 0; i < c; i++) maxlen = KEEL_MAX(maxlen, s[i].len);
  void *p, *t;
  KEEL_TRY(keel_k_scratch(k, (size_t)c + 1, &p));
  KEEL_TRY(keel_k_scratch(k, maxlen + 1, &t));
  uint8_t *keep = p;
  for (int64_t i = 0; i < c; i++) kept += keep[i] = !stopset_has(&st, &s[i], t);
  int64_t shape[2] = {1, kept ? kept : 1};
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_STRING, x->rank, x->rank == 1 ? shape + 1 : shape, &y));
  for (int64_t i = 0, j = 0; i < c; i++) {
    if (!keep[i]) continue;
    size_t n = how == CASE_NONE ? s[i].len : case_map(s[i].data, s[i].len, how, t);
    KEEL_TRY(keel_tensor_set_string(y, (size_t)j++, how == CASE_NONE ? s[i].data : t, n));
  }
  return KEEL_OK; /* all removed: the output's one string is already empty */
}

/* ==================================================== n-gram trie */

/* The pool as a trie: node 0 is the root, edge e leads to node e + 1. An
 * edge is keyed by its parent node and token; `out` is the output position
 * of the n-gram that ends there, or -1 for a prefix only. */
typedef struct edge {
  int32_t parent, out;
  int64_t tok;       /* integer pools */
  span s;            /* string pools */
} edge;

typedef struct trie {
  edge *e;
  int32_t n;
  htab h;
  bool strings;
} trie;

/* A token being looked up: integer or string, with its hash. */
typedef struct tkey {
  int32_t parent;
  int64_t tok;
  span s;
  uint64_t h;
} tkey;

static bool edge_eq(const void *ctx, int32_t e, const void *key) {
  const trie *t = ctx;
  const edge *a = &t->e[e];
  const tkey *b = key;
  if (a->parent != b->parent) return false;
  if (!t->strings) return a->tok == b->tok;
  return a->s.n == b->s.n && (a->s.n == 0 || !memcmp(a->s.p, b->s.p, a->s.n));
}

static uint64_t tkey_hash(int32_t parent, uint64_t tokhash) {
  return mix64(tokhash ^ ((uint64_t)parent + 1) * 0x9E3779B97F4A7C15ull);
}

/* The child of `parent` along pool item i, created when missing. */
static int32_t trie_child(trie *t, const keel_attr *pool, int32_t parent, int64_t i) {
  tkey key = {.parent = parent};
  if (t->strings) {
    key.s = (span){pool->strings[i], pool->string_lens[i]};
    key.h = tkey_hash(parent, hash_bytes(key.s.p, key.s.n));
  } else {
    key.tok = pool->ints[i];
    key.h = tkey_hash(parent, mix64((uint64_t)key.tok));
  }
  uint64_t at;
  int32_t e = htab_find(&t->h, key.h, edge_eq, t, &key, &at);
  if (e >= 0) return e;
  t->e[t->n] = (edge){.parent = parent, .out = -1, .tok = key.tok, .s = key.s};
  t->h.slot[at] = t->n;
  return t->n++;
}

/* ================================================= TfIdfVectorizer */

enum { TF_TF, TF_IDF, TF_TFIDF };

typedef struct tfidf {
  int mode;
  int64_t min_n, max_n, skip;
  const int64_t *counts, *indexes;
  int n_counts, n_indexes;
  const float *w;
  int n_w;
  const keel_attr *pool;  /* pool_int64s or pool_strings */
  int64_t pool_n;
  int64_t out_n;          /* max(ngram_indexes) + 1 */
} tfidf;

static keel_status tfidf_mode(keel_kctx *k, tfidf *a) {
  const char *mode = keel_k_attr_s(k, "mode", "");
  if (!strcmp(mode, "TF")) a->mode = TF_TF;
  else if (!strcmp(mode, "IDF")) a->mode = TF_IDF;
  else if (!strcmp(mode, "TFIDF")) a->mode = TF_TFIDF;
  else return keel_err(KEEL_ERR_INVALID_MODEL, "mode must be TF, IDF or TFIDF, got '%s'", mode);
  a->min_n = keel_k_attr_i(k, "min_gram_length", 0);
  a->max_n = keel_k_attr_i(k, "max_gram_length", 0);
  a->skip = keel_k_attr_i(k, "max_skip_count", 0);
  if (a->min_n < 1 || a->max_n < a->min_n || a->skip < 0 || a->skip > INT32_MAX)
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "need 1 <= min_gram_length <= max_gram_length and max_skip_count >= 0, got "
                    "%lld, %lld, %lld",
                    (long long)a->min_n, (long long)a->max_n, (long long)a->skip);
  return KEEL_OK;
}

static keel_status tfidf_pool(keel_kctx *k, tfidf *a) {
  const keel_attr *ps = keel_k_attr(k, "pool_strings"), *pi = keel_k_attr(k, "pool_int64s");
  if ((ps && pi) || (!ps && !pi))
    return keel_err(KEEL_ERR_INVALID_MODEL, "exactly one of pool_strings and pool_int64s must be set");
  a->pool = ps ? ps : pi;
  if (a->pool->type != (ps ? KEEL_ATTR_STRINGS : KEEL_ATTR_INTS) || a->pool->n == 0)
    return keel_err(KEEL_ERR_INVALID_MODEL, "%s must be a non-empty list",
                    ps ? "pool_strings" : "pool_int64s");
  a->pool_n = a->pool->n;
  a->counts = keel_k_attr_ints(k, "ngram_counts", &a->n_counts);
  a->indexes = keel_k_attr_ints(k, "ngram_indexes", &a->n_indexes);
  if (a->n_counts == 0 || a->n_indexes == 0)
    return keel_err(KEEL_ERR_INVALID_MODEL, "ngram_counts and ngram_indexes must not be empty");
  if (a->max_n > a->n_counts)
    return keel_err(KEEL_ERR_INVALID_MODEL, "max_gram_length %lld exceeds the %d levels of ngram_counts",
                    (long long)a->max_n, a->n_counts);
  a->out_n = 0;
  for (int i = 0; i < a->n_indexes; i++) {
    if (a->indexes[i] < 0 || a->indexes[i] >= INT32_MAX)
      return keel_err(KEEL_ERR_INVALID_MODEL, "ngram_indexes[%d] = %lld is out of range", i,
                      (long long)a->indexes[i]);
    a->out_n = KEEL_MAX(a->out_n, a->indexes[i] + 1);
  }
  return KEEL_OK;
}

/* Weights apply per output position (ONNX Runtime's reading; the same as
 * the spec's per-n-gram reading when ngram_indexes is 0..n-1). */
static keel_status tfidf_attrs(keel_kctx *k, tfidf *a) {
  KEEL_TRY(tfidf_mode(k, a));
  KEEL_TRY(tfidf_pool(k, a));
  a->w = keel_k_attr_floats(k, "weights", &a->n_w);
  if (a->w && a->n_w != a->n_indexes)
    return keel_err(KEEL_ERR_INVALID_MODEL, "weights has %d values, ngram_indexes %d", a->n_w,
                    a->n_indexes);
  if (a->w && a->mode != TF_TF && a->n_w < a->out_n)
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "weights has %d values but ngram_indexes reaches output position %lld",
                    a->n_w, (long long)a->out_n - 1);
  return KEEL_OK;
}

/* Level `len` of the pool: items [*start, *end). */
static keel_status tfidf_level(const tfidf *a, int len, int64_t *start, int64_t *end) {
  *start = a->counts[len - 1];
  *end = len < a->n_counts ? a->counts[len] : a->pool_n;
  if (*start < 0 || *end < *start || *end > a->pool_n || (*end - *start) % len)
    return keel_err(KEEL_ERR_INVALID_MODEL,
                    "ngram_counts level %d spans pool items [%lld, %lld): not whole %d-grams of "
                    "the %lld items",
                    len, (long long)*start, (long long)*end, len, (long long)a->pool_n);
  return KEEL_OK;
}

/* Inserts the pool's n-grams of lengths min_n..max_n (others can never be
 * counted); n-gram g, numbered across all levels, goes to output
 * ngram_indexes[g]. */
static keel_status tfidf_build(keel_kctx *k, const tfidf *a, trie *t) {
  void *p;
  KEEL_TRY(keel_k_scratch(k, (size_t)a->pool_n * sizeof(edge), &p));
  KEEL_TRY(htab_init(k, a->pool_n, &t->h));
  t->e = p;
  t->n = 0;
  t->strings = a->pool->type == KEEL_ATTR_STRINGS;
  int64_t g = 0;
  for (int len = 1; len <= a->n_counts; len++) {
    int64_t start, end;
    KEEL_TRY(tfidf_level(a, len, &start, &end));
    for (int64_t i = start; i < end; i += len, g++) {
      if (len < a->min_n || len > a->max_n) continue;
      if (g >= a->n_indexes)
        return keel_err(KEEL_ERR_INVALID_MODEL, "the pool has more n-grams than ngram_indexes (%d)",
                        a->n_indexes);
      int32_t node = 0;
      for (int j = 0; j < len; j++) node = trie_child(t, a->pool, node, i + j) + 1;
      if (t->e[node - 1].out >= 0)
        return keel_err(KEEL_ERR_INVALID_MODEL, "pool n-gram %lld (length %d) appears twice",
                        (long long)g, len);
      t->e[node - 1].out = (int32_t)a->indexes[g];
    }
  }
  return KEEL_OK;
}

/* One input row and its token hashes (precomputed once per call). */
typedef struct trow {
  const keel_tensor *x;
  const uint64_t *hash;  /* per element */
  int64_t off, c;        /* first element, row length */
} trow;

/* The edge from `node` along element i of the row, or -1. */
static int32_t trie_step(const trie *t, const trow *r, int32_t node, int64_t i) {
  int64_t at = r->off + i;
  tkey key = {.parent = node, .h = tkey_hash(node, r->hash[at])};
  if (r->x->dtype == KEEL_STRING) {
    const keel_string *s = (const keel_string *)r->x->data + at;
    key.s = (span){s->data, s->len};
  } else {
    key.tok = keel_elem_get_i64(r->x->dtype, r->x->data, (size_t)at);
  }
  return htab_find(&t->h, key.h, edge_eq, t, &key, NULL);
}

/* Counts into y (the row's output, zeroed): unigrams once, then for each
 * skip distance d = 1..max_skip_count+1 the n-grams x[i], x[i+d], ... of
 * lengths max(min_n, 2)..max_n from every start i. */
static void tfidf_count(const tfidf *a, const trie *t, const trow *r, float *y) {
  int64_t first = a->min_n;
  if (first == 1) {
    for (int64_t i = 0; i < r->c; i++) {
      int32_t e = trie_step(t, r, 0, i);
      if (e >= 0 && t->e[e].out >= 0) y[t->e[e].out] += 1;
    }
    if (++first > a->max_n) return;
  }
  /* first >= 2 here, so the distance loop ends once one gap spans the row */
  for (int64_t d = 1; d <= a->skip + 1 && d * (first - 1) < r->c; d++)
    for (int64_t i = 0; i + d * (first - 1) < r->c; i++) {
      int32_t node = 0;
      for (int64_t len = 1, at = i; len <= a->max_n && at < r->c; len++, at += d) {
        int32_t e = trie_step(t, r, node, at);
        if (e < 0) break; /* no pool n-gram continues this prefix */
        if (len >= first && t->e[e].out >= 0) y[t->e[e].out] += 1;
        node = e + 1;
      }
    }
}

static void tfidf_weigh(const tfidf *a, float *y) {
  for (int64_t p = 0; p < a->out_n; p++) {
    float w = a->w ? a->w[p] : 1.0f;
    if (a->mode == TF_IDF) y[p] = y[p] > 0 ? w : 0;
    else if (a->mode == TF_TFIDF) y[p] *= w;
  }
}

static keel_status tfidf_hashes(keel_kctx *k, const keel_tensor *x, uint64_t **out) {
  int64_t n = keel_tensor_numel(x);
  void *p;
  KEEL_TRY(keel_k_scratch(k, (size_t)n * sizeof(uint64_t), &p));
  uint64_t *h = p;
  const keel_string *s = x->data;
  for (int64_t i = 0; i < n; i++)
    h[i] = x->dtype == KEEL_STRING ? hash_bytes(s[i].data, s[i].len)
                                   : mix64((uint64_t)keel_elem_get_i64(x->dtype, x->data, (size_t)i));
  *out = h;
  return KEEL_OK;
}

/* X: [C] -> Y [out_n]; [N, C] -> [N, out_n] (a scalar is one row of one). */
static keel_status op_tfidf_vectorizer(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  tfidf a;
  KEEL_TRY(tfidf_attrs(k, &a));
  bool strings = a.pool->type == KEEL_ATTR_STRINGS;
  if (strings ? x->dtype != KEEL_STRING : x->dtype != KEEL_INT32 && x->dtype != KEEL_INT64)
    return keel_err(KEEL_ERR_SHAPE, "X is %s, but %s needs %s", keel_dtype_name((keel_dtype)x->dtype),
                    strings ? "pool_strings" : "pool_int64s", strings ? "string" : "int32 or int64");
  if (x->rank > 2)
    return keel_err(KEEL_ERR_SHAPE, "X must be [C] or [N, C], got rank %d", x->rank);
  int64_t rows = x->rank == 2 ? x->shape[0] : 1;
  int64_t c = x->rank == 0 ? 1 : x->shape[x->rank - 1];
  trie t;
  KEEL_TRY(tfidf_build(k, &a, &t));
  uint64_t *h;
  KEEL_TRY(tfidf_hashes(k, x, &h));
  int64_t shape[2] = {rows, a.out_n};
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_FLOAT, x->rank == 2 ? 2 : 1, x->rank == 2 ? shape : shape + 1, &y));
  float *out = y->data;
  if (rows > 0 && a.out_n > 0) memset(out, 0, (size_t)(rows * a.out_n) * sizeof(float));
  for (int64_t i = 0; i < rows; i++) {
    trow r = {x, h, i * c, c};
    tfidf_count(&a, &t, &r, out + i * a.out_n);
    tfidf_weigh(&a, out + i * a.out_n);
  }
  return KEEL_OK;
}

/* ============================================================ table */

/* ====================================================== StringConcat */

/* x + y elementwise with numpy broadcasting: byte concatenation (UTF-8
 * in, UTF-8 out). */
static keel_status op_string_concat(keel_kctx *k) {
  const keel_tensor *a, *b;
  KEEL_TRY(keel_k_in(k, 0, &a));
  KEEL_TRY(keel_k_in(k, 1, &b));
  if (a->dtype != KEEL_STRING || b->dtype != KEEL_STRING)
    return keel_err(KEEL_ERR_SHAPE, "StringConcat takes two string tensors, got %s and %s",
                    keel_dtype_name((keel_dtype)a->dtype), keel_dtype_name((keel_dtype)b->dtype));
  int r;
  int64_t shape[KEEL_MAX_RANK], sa[KEEL_MAX_RANK], sb[KEEL_MAX_RANK], idx[KEEL_MAX_RANK] = {0};
  KEEL_TRY(keel_broadcast_shape(a->rank, a->shape, b->rank, b->shape, &r, shape));
  keel_broadcast_strides(a->rank, a->shape, r, shape, sa);
  keel_broadcast_strides(b->rank, b->shape, r, shape, sb);
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_STRING, r, shape, &y));
  const keel_string *xa = a->data, *xb = b->data;
  size_t ma = 0, mb = 0;
  for (int64_t i = 0; i < keel_tensor_numel(a); i++) ma = KEEL_MAX(ma, xa[i].len);
  for (int64_t i = 0; i < keel_tensor_numel(b); i++) mb = KEEL_MAX(mb, xb[i].len);
  char *t;
  KEEL_TRY(keel_k_scratch(k, ma + mb + 1, (void **)&t));
  int64_t n = keel_tensor_numel(y), oa = 0, ob = 0;
  for (int64_t i = 0; i < n; i++) {
    if (xa[oa].len) memcpy(t, xa[oa].data, xa[oa].len);
    if (xb[ob].len) memcpy(t + xa[oa].len, xb[ob].data, xb[ob].len);
    KEEL_TRY(keel_tensor_set_string(y, (size_t)i, t, xa[oa].len + xb[ob].len));
    for (int d = r - 1; d >= 0; d--) { /* odometer over the output */
      oa += sa[d], ob += sb[d];
      if (++idx[d] < shape[d]) break;
      oa -= sa[d] * shape[d], ob -= sb[d] * shape[d];
      idx[d] = 0;
    }
  }
  return KEEL_OK;
}

/* ======================================================= StringSplit */

/* Python's str.split, as ONNX's reference runs it. With a delimiter,
 * every occurrence splits (empty pieces kept; at least one piece). With
 * none (or ""), runs of whitespace separate and leading/trailing
 * whitespace is dropped; after maxsplit splits the rest is one piece
 * (its trailing whitespace kept). Whitespace is what Python's
 * str.isspace accepts, decoded from UTF-8. */
typedef struct splitter {
  const char *s, *delim;
  size_t n, dl, pos;
  int64_t left;                /* splits still allowed; < 0: no limit */
  bool done;
} splitter;

/* Bytes of the whitespace character at s[0..n), or 0. */
static size_t ws_len(const char *s, size_t n) {
  uint8_t b = (uint8_t)s[0];
  if (b == ' ' || (b >= 0x09 && b <= 0x0D) || (b >= 0x1C && b <= 0x1F)) return 1;
  if (b < 0x80) return 0;
  uint32_t c;
  size_t len = utf8_decode((const uint8_t *)s, n, &c);
  bool ws = c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
            c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
  return len && ws ? len : 0;
}

static bool split_next_ws(splitter *sp, span *tok) {
  size_t w;
  while (sp->pos < sp->n && (w = ws_len(sp->s + sp->pos, sp->n - sp->pos))) sp->pos += w;
  if (sp->pos >= sp->n) return false;
  size_t start = sp->pos;
  if (sp->left == 0) {
    sp->pos = sp->n;
  } else {
    while (sp->pos < sp->n && !ws_len(sp->s + sp->pos, sp->n - sp->pos)) sp->pos++;
    if (sp->left > 0) sp->left--;
  }
  *tok = (span){sp->s + start, sp->pos - start};
  return true;
}

static bool split_next(splitter *sp, span *tok) {
  if (!sp->dl) return split_next_ws(sp, tok);
  if (sp->done) return false;
  size_t start = sp->pos, i = start;
  if (sp->left != 0)
    for (; i + sp->dl <= sp->n; i++)
      if (!memcmp(sp->s + i, sp->delim, sp->dl)) break;
  if (sp->left == 0 || i + sp->dl > sp->n) { /* the last piece */
    *tok = (span){sp->s + start, sp->n - start};
    sp->done = true;
    return true;
  }
  *tok = (span){sp->s + start, i - start};
  sp->pos = i + sp->dl;
  if (sp->left > 0) sp->left--;
  return true;
}

static splitter split_init(const keel_string *x, const char *delim, int64_t maxsplit) {
  return (splitter){x->data, delim, x->len, strlen(delim), 0, maxsplit, false};
}

static keel_status op_string_split(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  if (x->dtype != KEEL_STRING)
    return keel_err(KEEL_ERR_SHAPE, "StringSplit takes a string tensor, got %s",
                    keel_dtype_name((keel_dtype)x->dtype));
  if (x->rank + 1 > KEEL_MAX_RANK)
    return keel_err(KEEL_ERR_UNSUPPORTED, "StringSplit: output rank %d is above keel's limit of %d",
                    x->rank + 1, KEEL_MAX_RANK);
  const char *delim = keel_k_attr_s(k, "delimiter", "");
  int64_t maxsplit = keel_k_attr_i(k, "maxsplit", -1), n = keel_tensor_numel(x), most = 0;
  keel_tensor *z, *y;
  KEEL_TRY(keel_k_out(k, 1, KEEL_INT64, x->rank, x->shape, &z));
  const keel_string *xs = x->data;
  int64_t *cnt = z->data;
  span tok;
  for (int64_t i = 0; i < n; i++) { /* pass 1: the counts */
    splitter sp = split_init(&xs[i], delim, maxsplit);
    for (cnt[i] = 0; split_next(&sp, &tok);) cnt[i]++;
    most = KEEL_MAX(most, cnt[i]);
  }
  int64_t shape[KEEL_MAX_RANK];
  memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->rank);
  shape[x->rank] = most;
  KEEL_TRY(keel_k_out(k, 0, KEEL_STRING, x->rank + 1, shape, &y));
  for (int64_t i = 0; i < n; i++) { /* pass 2: the pieces; the padding stays "" */
    splitter sp = split_init(&xs[i], delim, maxsplit);
    for (int64_t j = 0; split_next(&sp, &tok); j++)
      KEEL_TRY(keel_tensor_set_string(y, (size_t)(i * most + j), tok.p, tok.n));
  }
  return KEEL_OK;
}

/* ==================================================== RegexFullMatch */

/* Y[i] = whether all of X[i] matches `pattern`, in RE2 syntax (the
 * specification's), through RE2 itself (regex_re2.cc). The compiled
 * pattern lives for this call only and is freed on every path. */
static keel_status op_regex_full_match(keel_kctx *k) {
  const keel_tensor *x;
  KEEL_TRY(keel_k_in(k, 0, &x));
  if (x->dtype != KEEL_STRING)
    return keel_err(KEEL_ERR_SHAPE, "RegexFullMatch takes a string tensor, got %s",
                    keel_dtype_name((keel_dtype)x->dtype));
  const keel_attr *a = keel_k_attr(k, "pattern");
  if (!a) return keel_err(KEEL_ERR_INVALID_MODEL, "RegexFullMatch: the pattern attribute is missing");
  const char *pat = keel_k_attr_s(k, "pattern", "");
  keel_tensor *y;
  KEEL_TRY(keel_k_out(k, 0, KEEL_BOOL, x->rank, x->shape, &y));
  char why[160];
  keel_re2 *re = keel_re2_compile(pat, strlen(pat), why, sizeof why);
  if (!re) return keel_err(KEEL_ERR_INVALID_MODEL, "RegexFullMatch: bad pattern '%s': %s", pat, why);
  const keel_string *xs = x->data;
  uint8_t *out = y->data;
  keel_status st = KEEL_OK;
  for (int64_t i = 0; i < keel_tensor_numel(x); i++) {
    int m = keel_re2_full_match(re, xs[i].data ? xs[i].data : "", xs[i].len);
    if (m < 0) {
      st = keel_err(KEEL_ERR_OUT_OF_MEMORY, "RegexFullMatch: RE2 failed on element %lld", (long long)i);
      break;
    }
    out[i] = (uint8_t)m;
  }
  keel_re2_free(re);
  return st;
}

/* Element-type sets used in the table below. */
#define TFIDF_IN (KEEL_T(KEEL_STRING) | KEEL_T(KEEL_INT32) | KEEL_T(KEEL_INT64))
const keel_opdef keel_ops_strings[] = {
    {"", "StringConcat", 20, KEEL_OPSET_MAX, op_string_concat, 0, KEEL_T(KEEL_STRING)},
    {"", "RegexFullMatch", 20, KEEL_OPSET_MAX, op_regex_full_match, 0, KEEL_T(KEEL_STRING)},
    {"", "StringSplit", 20, KEEL_OPSET_MAX, op_string_split, 0, KEEL_T(KEEL_STRING)},
    {"", "StringNormalizer", 10, KEEL_OPSET_MAX, op_string_normalizer, 0, KEEL_T(KEEL_STRING)},
    {"", "TfIdfVectorizer", 9, KEEL_OPSET_MAX, op_tfidf_vectorizer, 0, TFIDF_IN},
    {0},
};
#undef TFIDF_IN
