/* test_ops_strings.c: StringNormalizer on ASCII and non-ASCII text (Latin,
 * Greek, Cyrillic, invalid UTF-8) with and without case sensitivity, its
 * output shapes; TfIdfVectorizer against a naive n-gram counter on random
 * sequences and pools (int and string); StringConcat on random broadcast
 * shapes; StringSplit against Python's str.split; RegexFullMatch on RE2
 * patterns against Python's re.fullmatch; and error cases that
 * must leave the session usable. */
#include <stdbool.h>
#include <string.h>

#include "check.h"
#include "mb.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

/* ========================================================= helpers */

/* A STRING tensor from C strings. */
static keel_value_t *str_tensor(keel_session_t *s, int rank, const int64_t *dims,
                                const char *const *v, int n) {
  keel_string e[128];
  for (int i = 0; i < n; i++) e[i] = (keel_string){(char *)v[i], strlen(v[i])};
  keel_value_t *t = NULL;
  if (keel_tensor_create(s, KEEL_STRING, rank, dims, e, &t))
    fprintf(stderr, "str_tensor: %s\n", keel_last_error());
  return t;
}

static bool str_at(const keel_value_t *v, int64_t i, const char *want) {
  const keel_string *e = keel_value_data(v);
  if (!e || i >= keel_value_numel(v)) return want == NULL;
  bool ok = e[i].len == strlen(want) && (e[i].len == 0 || !memcmp(e[i].data, want, e[i].len));
  if (!ok) fprintf(stderr, "  element %lld is '%.*s', expected '%s'\n", (long long)i,
                   (int)e[i].len, e[i].data, want);
  return ok;
}

/* ================================================ StringNormalizer */

typedef struct sncase {
  const char *action;          /* NULL: attribute absent (NONE) */
  int sensitive;               /* -1: attribute absent (0)      */
  const char *const *stop;
  int nstop;
} sncase;

static keel_session_t *sn_session(const sncase *c) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_STRING, -1, NULL);
  mb_output(g, "Y", KEEL_STRING, -1, NULL);
  mb_node *n = mb_add(g, "StringNormalizer", "X", "Y");
  if (c->action) mb_attr_s(n, "case_change_action", c->action);
  if (c->sensitive >= 0) mb_attr_i(n, "is_case_sensitive", c->sensitive);
  if (c->stop) mb_attr_strs(n, "stopwords", c->nstop, c->stop);
  mb_attr_s(n, "locale", "tr_TR"); /* accepted and ignored: no Turkic i rules */
  return mb_session(g, 10);
}

/* Runs c on x ([C], or [1, C] when two_d) and checks the output against
 * want (nwant strings; the shape follows the spec's rules). */
static void sn_check(const sncase *c, const char *const *x, int nx, bool two_d,
                     const char *const *want, int nwant) {
  keel_session_t *s = sn_session(c);
  CHECK(s != NULL);
  if (!s) return;
  int64_t dims[2] = {1, nx};
  keel_value_t *in = str_tensor(s, two_d ? 2 : 1, two_d ? dims : dims + 1, x, nx), *out = NULL;
  CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, &out));
  if (out) {
    int64_t k = nwant ? nwant : 1;
    CHECK(keel_value_rank(out) == (two_d ? 2 : 1));
    CHECK(keel_value_shape(out)[keel_value_rank(out) - 1] == k);
    if (two_d) CHECK(keel_value_shape(out)[0] == 1);
    for (int i = 0; i < nwant; i++) CHECK(str_at(out, i, want[i]));
    if (!nwant) CHECK(str_at(out, 0, ""));
  }
  keel_value_release(out);
  keel_value_release(in);
  keel_session_destroy(s);
}

static void check_strnorm_ascii(void) {
  static const char *const x[] = {"Monday", "tuesday", "WEDNESDAY", "monday", "Sunday", ""};
  static const char *const stop[] = {"monday", "SUNDAY"};
  sncase ci = {"UPPER", -1, stop, 2}, cs = {"LOWER", 1, stop, 2}, none = {NULL, 1, NULL, 0};
  sn_check(&ci, x, 6, false, (const char *const[]){"TUESDAY", "WEDNESDAY", ""}, 3);
  sn_check(&cs, x, 6, true, (const char *const[]){"monday", "tuesday", "wednesday", "sunday", ""}, 5);
  sn_check(&none, x, 6, false, x, 6);
  /* everything removed: one empty string, [1] or [1, 1] */
  static const char *const only[] = {"MONDAY", "monday"};
  sn_check(&ci, only, 2, false, NULL, 0);
  sn_check(&ci, only, 2, true, NULL, 0);
}

/* Latin-1, Latin Extended-A, Greek, Cyrillic; ß and ŉ have no one-to-one
 * uppercase and stay; other scripts and invalid bytes pass through. */
static const char *const NONASCII[] = {
    "École Ÿvette ÿ", "straße", "ΣΊΣΥΦΟΣ ς ΐ", "Привет, Ёлка", "İı \xC2\xB5 ſ ŉ Ǆ",
    "a\xFF\x62\xC3", "\xC0\xAF\xED\xA0\x80z", "€😀ж",
};
static const char *const NONASCII_UP[] = {
    "ÉCOLE ŸVETTE Ÿ", "STRAßE", "ΣΊΣΥΦΟΣ Σ ΐ", "ПРИВЕТ, ЁЛКА", "İI \xCE\x9C S ŉ Ǆ",
    "A\xFF\x42\xC3", "\xC0\xAF\xED\xA0\x80Z", "€😀Ж",
};
static const char *const NONASCII_LO[] = {
    "école ÿvette ÿ", "straße", "σίσυφοσ ς ΐ", "привет, ёлка", "iı \xC2\xB5 ſ ŉ Ǆ",
    "a\xFF\x62\xC3", "\xC0\xAF\xED\xA0\x80z", "€😀ж",
};

static void check_strnorm_unicode(void) {
  sncase up = {"UPPER", 1, NULL, 0}, lo = {"LOWER", 1, NULL, 0};
  sn_check(&up, NONASCII, 8, false, NONASCII_UP, 8);
  sn_check(&lo, NONASCII, 8, true, NONASCII_LO, 8);
}

/* Case-insensitive stopwords compare folded forms: É/é, final sigma and
 * sigma, µ and μ, Ё and ё; case-sensitive ones compare bytes. */
static void check_strnorm_stopwords(void) {
  /* "\xCE\xBC" is Greek small mu, "\xC2\xB5" the micro sign */
  static const char *const x[] = {"école", "ΣΊΣΥΦΟΣ", "\xCE\xBC", "ёлка", "ÉCOLE", "Straße", "\xFF"};
  static const char *const stop[] = {"ÉCOLE", "σίσυφος", "\xC2\xB5", "ЁЛКА", "STRASSE", "\xFF"};
  sncase ci = {"NONE", 0, stop, 6}, cs = {"NONE", 1, stop, 6};
  sn_check(&ci, x, 7, false, (const char *const[]){"Straße"}, 1);
  sn_check(&cs, x, 7, false,
           (const char *const[]){"école", "ΣΊΣΥΦΟΣ", "\xCE\xBC", "ёлка", "Straße"}, 5);
}

static void check_strnorm_errors(void) {
  sncase c = {"UPPER", 0, NULL, 0};
  keel_session_t *s = sn_session(&c);
  CHECK(s != NULL);
  if (!s) return;
  static const char *const x[] = {"a", "b", "c", "d"};
  keel_value_t *bad = str_tensor(s, 2, (int64_t[]){2, 2}, x, 4), *out = NULL;
  CHECK_STATUS(keel_run(s, (const char *[]){"X"}, &bad, 1, &out), KEEL_ERR_SHAPE);
  CHECK(strstr(keel_last_error(), "[1, C]") != NULL);
  keel_value_t *good = str_tensor(s, 1, (int64_t[]){4}, x, 4);
  CHECK_OK(keel_run(s, (const char *[]){"X"}, &good, 1, &out));
  CHECK(out && str_at(out, 3, "D"));
  keel_value_release(out);
  keel_value_release(good);
  keel_value_release(bad);
  keel_session_destroy(s);
  c.action = "TITLE";
  s = sn_session(&c);
  CHECK(s != NULL);
  keel_value_t *in = s ? str_tensor(s, 1, (int64_t[]){4}, x, 4) : NULL;
  if (s) CHECK_STATUS(keel_run(s, (const char *[]){"X"}, &in, 1, &out), KEEL_ERR_INVALID_MODEL);
  keel_value_release(in);
  keel_session_destroy(s);
}

/* ================================================= TfIdfVectorizer */

enum { MAXP = 2048, MAXG = 800, MAXX = 96 };

typedef struct tfcase {
  const char *mode;
  int64_t min_n, max_n, skip;
  int levels;                   /* n-gram lengths 1..levels in the pool */
  int64_t pool[MAXP];
  int64_t counts[4];
  int64_t idx[MAXG];
  float w[MAXG];
  int npool, ngrams;
  bool weights;
} tfcase;

/* Random pool: for each length 1..levels, distinct n-grams over tokens
 * 0..vocab-1; output positions a random permutation. */
static void tf_random_pool(tfcase *c, int vocab, int per_level) {
  c->npool = c->ngrams = 0;
  for (int len = 1; len <= c->levels; len++) {
    c->counts[len - 1] = c->npool;
    for (int t = 0; t < per_level && c->npool + len <= MAXP && c->ngrams < MAXG; t++) {
      int64_t *g = c->pool + c->npool;
      for (int j = 0; j < len; j++) g[j] = (int64_t)(next() % (uint64_t)vocab);
      bool dup = false;
      for (int64_t o = c->counts[len - 1]; o < c->npool && !dup; o += len)
        dup = !memcmp(c->pool + o, g, sizeof(int64_t) * (size_t)len);
      if (dup) continue;
      c->npool += len;
      c->ngrams++;
    }
  }
  for (int i = 0; i < c->ngrams; i++) c->idx[i] = i, c->w[i] = (float)(next() % 100) / 10.0f;
  for (int i = c->ngrams - 1; i > 0; i--) {
    int j = (int)(next() % (uint64_t)(i + 1));
    int64_t t = c->idx[i];
    c->idx[i] = c->idx[j], c->idx[j] = t;
  }
}

/* The naive reference: every pool n-gram of a counted length, matched at
 * every start and every skip distance (unigrams once), by direct compare. */
static void tf_reference(const tfcase *c, const int64_t *x, int64_t n, float *y, int64_t out_n) {
  memset(y, 0, sizeof(float) * (size_t)out_n);
  for (int len = 1, g = 0; len <= c->levels; len++) {
    int64_t end = len < c->levels ? c->counts[len] : c->npool;
    for (int64_t p = c->counts[len - 1]; p < end; p += len, g++) {
      if (len < c->min_n || len > c->max_n) continue;
      int64_t hits = 0;
      for (int64_t d = 1; d <= (len == 1 ? 1 : c->skip + 1); d++)
        for (int64_t i = 0; i + (len - 1) * d < n; i++) {
          bool eq = true;
          for (int j = 0; j < len && eq; j++) eq = x[i + j * d] == c->pool[p + j];
          hits += eq;
        }
      y[c->idx[g]] += (float)hits;
    }
  }
  for (int64_t q = 0; q < out_n; q++) {
    float w = c->weights ? c->w[q] : 1.0f;
    if (!strcmp(c->mode, "IDF")) y[q] = y[q] > 0 ? w : 0;
    else if (!strcmp(c->mode, "TFIDF")) y[q] *= w;
  }
}

static mb_node *tf_node(mb_graph *g, const tfcase *c) {
  mb_node *n = mb_add(g, "TfIdfVectorizer", "X", "Y");
  mb_attr_s(n, "mode", c->mode);
  mb_attr_i(n, "min_gram_length", c->min_n);
  mb_attr_i(n, "max_gram_length", c->max_n);
  mb_attr_i(n, "max_skip_count", c->skip);
  mb_attr_ints(n, "ngram_counts", c->levels, c->counts);
  mb_attr_ints(n, "ngram_indexes", c->ngrams, c->idx);
  if (c->weights) mb_attr_floats(n, "weights", c->ngrams, c->w);
  return n;
}

static keel_session_t *tf_session(const tfcase *c, int xdt, const char *const *spool) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", xdt, -1, NULL);
  mb_output(g, "Y", KEEL_FLOAT, -1, NULL);
  mb_node *n = tf_node(g, c);
  if (spool) mb_attr_strs(n, "pool_strings", c->npool, spool);
  else mb_attr_ints(n, "pool_int64s", c->npool, c->pool);
  return mb_session(g, 9);
}

/* Runs X (rows x cols tokens, [cols] when rows == 0) and compares each row
 * with the reference. String inputs spell token t as TOKS[t]. */
static const char *const TOKS[] = {"a", "b", "c", "d", "e", "f", "g", "h"};

static void tf_run(keel_session_t *s, const tfcase *c, int xdt, const int64_t *x, int rows,
                   int cols) {
  int64_t n = (int64_t)(rows ? rows : 1) * cols, out_n = 0;
  for (int i = 0; i < c->ngrams; i++) out_n = c->idx[i] + 1 > out_n ? c->idx[i] + 1 : out_n;
  int32_t x32[MAXX];
  const char *xs[MAXX];
  for (int64_t i = 0; i < n; i++) x32[i] = (int32_t)x[i], xs[i] = TOKS[x[i] % 8];
  int64_t dims[2] = {rows, cols};
  int r = rows ? 2 : 1;
  const int64_t *d = rows ? dims : dims + 1;
  keel_value_t *in = xdt == KEEL_STRING ? str_tensor(s, r, d, xs, (int)n)
                     : mb_tensor(s, xdt, r, d, xdt == KEEL_INT32 ? (void *)x32 : x);
  keel_value_t *out = NULL;
  CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, &out));
  CHECK(out && keel_value_rank(out) == r && keel_value_shape(out)[r - 1] == out_n);
  float want[MAXG];
  for (int row = 0; out && row < (rows ? rows : 1); row++) {
    tf_reference(c, x + row * cols, cols, want, out_n);
    int bad = 0;
    for (int64_t q = 0; q < out_n; q++)
      if (fabs(keel_value_at(out, row * out_n + q) - want[q]) > 1e-4 * (1 + fabs(want[q]))) bad++;
    CHECK(bad == 0);
  }
  keel_value_release(out);
  keel_value_release(in);
}

static void check_tfidf_random(int iter) {
  static tfcase c;
  static const char *const modes[] = {"TF", "IDF", "TFIDF"};
  c.levels = 1 + (int)(next() % 3);
  c.min_n = 1 + (int64_t)(next() % (uint64_t)c.levels);
  c.max_n = c.min_n + (int64_t)(next() % (uint64_t)(c.levels - c.min_n + 1));
  c.skip = (int64_t)(next() % 4);
  c.mode = modes[next() % 3];
  c.weights = next() % 2;
  int vocab = 2 + (int)(next() % 5);
  tf_random_pool(&c, vocab, 1 + (int)(next() % 12));
  int xdt = iter % 2 ? KEEL_INT32 : KEEL_INT64;
  keel_session_t *s = tf_session(&c, xdt, NULL);
  CHECK(s != NULL);
  if (!s) return;
  int64_t x[MAXX];
  int rows = (int)(next() % 4), cols = (int)(next() % 24);
  for (int i = 0; i < MAXX; i++) x[i] = (int64_t)(next() % (uint64_t)vocab);
  tf_run(s, &c, xdt, x, rows, cols);
  keel_session_destroy(s);
}

/* A large pool (hash table growth, long probe chains) and the string path. */
static void check_tfidf_large_and_strings(void) {
  static tfcase c;
  c = (tfcase){.mode = "TFIDF", .min_n = 1, .max_n = 3, .skip = 2, .levels = 3, .weights = true};
  tf_random_pool(&c, 12, 260);
  keel_session_t *s = tf_session(&c, KEEL_INT64, NULL);
  CHECK(s != NULL && c.ngrams > 300);
  int64_t x[MAXX];
  for (int i = 0; i < MAXX; i++) x[i] = (int64_t)(next() % 12);
  if (s) tf_run(s, &c, KEEL_INT64, x, 2, 48);
  keel_session_destroy(s);
  c = (tfcase){.mode = "TF", .min_n = 1, .max_n = 2, .skip = 3, .levels = 2};
  tf_random_pool(&c, 4, 6);
  const char *spool[64];
  for (int i = 0; i < c.npool; i++) spool[i] = TOKS[c.pool[i]];
  s = tf_session(&c, KEEL_STRING, spool);
  CHECK(s != NULL);
  for (int i = 0; i < MAXX; i++) x[i] = (int64_t)(next() % 4);
  if (s) tf_run(s, &c, KEEL_STRING, x, 0, 30);
  keel_session_destroy(s);
}

/* The spec's example: [94, 17, 36, 12, 28] with 2-grams [94, 12] and
 * [17, 28] are found with skip 2 only. */
static void check_tfidf_example(void) {
  static tfcase c;
  c = (tfcase){.mode = "TF", .min_n = 2, .max_n = 2, .skip = 2, .levels = 2,
               .pool = {94, 12, 17, 28}, .counts = {0, 0}, .idx = {1, 0}, .npool = 4, .ngrams = 2};
  keel_session_t *s = tf_session(&c, KEEL_INT64, NULL);
  CHECK(s != NULL);
  if (!s) return;
  int64_t x[5] = {94, 17, 36, 12, 28};
  keel_value_t *in = mb_tensor(s, KEEL_INT64, 1, (int64_t[]){5}, x), *out = NULL;
  CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, &out));
  CHECK(out && keel_value_at(out, 0) == 1 && keel_value_at(out, 1) == 1);
  keel_value_release(out);
  keel_session_destroy(s);
  c.skip = 1; /* distance 3 is needed */
  s = tf_session(&c, KEEL_INT64, NULL);
  out = NULL;
  if (s) CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, &out));
  CHECK(out && keel_value_at(out, 0) == 0 && keel_value_at(out, 1) == 0);
  keel_value_release(out);
  keel_value_release(in);
  keel_session_destroy(s);
}

static void check_tfidf_errors(void) {
  static tfcase c;
  c = (tfcase){.mode = "TF", .min_n = 1, .max_n = 1, .skip = 0, .levels = 1,
               .pool = {1, 2, 3}, .counts = {0}, .idx = {0, 1, 2}, .npool = 3, .ngrams = 3};
  static const char *const sp[] = {"x", "y", "z"};
  keel_session_t *s = tf_session(&c, KEEL_UNDEFINED, sp); /* X's type unchecked */
  CHECK(s != NULL);
  if (!s) return;
  int64_t x[3] = {1, 2, 3};
  keel_value_t *in = mb_tensor(s, KEEL_INT64, 1, (int64_t[]){3}, x), *out = NULL;
  CHECK_STATUS(keel_run(s, (const char *[]){"X"}, &in, 1, &out), KEEL_ERR_SHAPE);
  CHECK(strstr(keel_last_error(), "pool_strings") != NULL);
  keel_value_t *sx = str_tensor(s, 1, (int64_t[]){3}, (const char *const[]){"z", "x", "z"}, 3);
  CHECK_OK(keel_run(s, (const char *[]){"X"}, &sx, 1, &out));
  CHECK(out && keel_value_at(out, 0) == 1 && keel_value_at(out, 2) == 2);
  keel_value_release(out);
  keel_value_release(sx);
  keel_session_destroy(s);
  c.levels = 2, c.counts[1] = 2, c.max_n = 2; /* level 2 holds one item: not whole 2-grams */
  s = tf_session(&c, KEEL_INT64, NULL);
  CHECK(s != NULL);
  if (s) CHECK_STATUS(keel_run(s, (const char *[]){"X"}, &in, 1, &out), KEEL_ERR_INVALID_MODEL);
  keel_session_destroy(s);
  c.levels = 1, c.max_n = 1, c.mode = "BM25";
  s = tf_session(&c, KEEL_INT64, NULL);
  CHECK(s != NULL);
  if (s) CHECK_STATUS(keel_run(s, (const char *[]){"X"}, &in, 1, &out), KEEL_ERR_INVALID_MODEL);
  keel_session_destroy(s);
  keel_value_release(in);
}

/* ================================================== StringConcat */

/* Random broadcast shapes; the reference indexes both inputs per element. */
static void check_concat_random(void) {
  static const char *const words[] = {"", "a", "bc", "déf", "ghij", "κλμ"};
  for (int c = 0; c < 40; c++) {
    int ra = (int)(next() % 3), rb = (int)(next() % 3), r = ra > rb ? ra : rb;
    int64_t da[2], db[2], d[2];
    for (int i = 0; i < r; i++) d[i] = 1 + (int64_t)(next() % 3);
    for (int i = 0; i < ra; i++) da[i] = next() % 3 ? d[r - ra + i] : 1;
    for (int i = 0; i < rb; i++) db[i] = next() % 3 ? d[r - rb + i] : 1;
    for (int i = 0; i < r; i++) { /* the broadcast shape */
      int64_t x = i >= r - ra ? da[i - (r - ra)] : 1, y = i >= r - rb ? db[i - (r - rb)] : 1;
      d[i] = x > y ? x : y;
    }
    const char *va[9], *vb[9];
    int na = 1, nb = 1;
    for (int i = 0; i < ra; i++) na *= (int)da[i];
    for (int i = 0; i < rb; i++) nb *= (int)db[i];
    for (int i = 0; i < na; i++) va[i] = words[next() % 6];
    for (int i = 0; i < nb; i++) vb[i] = words[next() % 6];
    mb_graph *g = mb_graph_new("main");
    mb_input(g, "A", KEEL_STRING, -1, NULL);
    mb_input(g, "B", KEEL_STRING, -1, NULL);
    mb_output(g, "Y", KEEL_STRING, -1, NULL);
    mb_add(g, "StringConcat", "A,B", "Y");
    keel_session_t *s = mb_session(g, 20);
    keel_value_t *in[2] = {str_tensor(s, ra, da, va, na), str_tensor(s, rb, db, vb, nb)}, *out = NULL;
    CHECK_OK(keel_run(s, (const char *[]){"A", "B"}, in, 2, &out));
    int64_t n = 1;
    for (int i = 0; i < r; i++) n *= d[i];
    CHECK(out && keel_value_rank(out) == r && keel_value_numel(out) == n);
    for (int64_t e = 0; out && e < n; e++) {
      int64_t i0 = r == 2 ? e / d[1] : 0, i1 = r == 2 ? e % d[1] : e; /* output coords */
      int64_t ia = 0, ib = 0;
      if (ra == 2) ia = (da[0] > 1 ? i0 : 0) * da[1] + (da[1] > 1 ? i1 : 0);
      if (ra == 1) ia = da[0] > 1 ? i1 : 0;
      if (rb == 2) ib = (db[0] > 1 ? i0 : 0) * db[1] + (db[1] > 1 ? i1 : 0);
      if (rb == 1) ib = db[0] > 1 ? i1 : 0;
      char want[32];
      snprintf(want, sizeof want, "%s%s", va[ia], vb[ib]);
      CHECK(str_at(out, e, want));
    }
    keel_value_release(out);
    keel_value_release(in[0]);
    keel_value_release(in[1]);
    keel_session_destroy(s);
  }
}

/* Shapes that do not broadcast and non-string inputs are errors. */
static void check_concat_errors(void) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "A", KEEL_STRING, -1, NULL);
  mb_input(g, "B", KEEL_STRING, -1, NULL);
  mb_output(g, "Y", KEEL_STRING, -1, NULL);
  mb_add(g, "StringConcat", "A,B", "Y");
  keel_session_t *s = mb_session(g, 20);
  const char *v[3] = {"a", "b", "c"};
  keel_value_t *in[2] = {str_tensor(s, 1, (int64_t[]){2}, v, 2), str_tensor(s, 1, (int64_t[]){3}, v, 3)};
  keel_value_t *out = NULL;
  CHECK_STATUS(keel_run(s, (const char *[]){"A", "B"}, in, 2, &out), KEEL_ERR_SHAPE);
  CHECK(out == NULL);
  keel_value_release(in[1]);
  in[1] = NULL;
  CHECK_OK(keel_tensor_create(s, KEEL_FLOAT, 1, (int64_t[]){2}, (float[]){1, 2}, &in[1]));
  CHECK_STATUS(keel_run(s, (const char *[]){"A", "B"}, in, 2, &out), KEEL_ERR_SHAPE);
  keel_value_release(in[0]);
  keel_value_release(in[1]);
  keel_session_destroy(s);
}

/* =================================================== StringSplit */

/* Expected pieces from Python's str.split (ONNX's reference). */
typedef struct splitcase {
  const char *x, *delim;       /* delim NULL: attribute absent */
  int64_t maxsplit;            /* -1: attribute absent */
  int n;
  const char *want[4];
} splitcase;

static const splitcase SPLITS[] = {
    {"a,b,,c", ",", -1, 4, {"a", "b", "", "c"}},
    {"a,b,,c", ",", 1, 2, {"a", "b,,c"}},
    {",a,", ",", -1, 3, {"", "a", ""}},
    {"", ",", -1, 1, {""}},
    {"abc", "bc", -1, 2, {"a", ""}},
    {"aaa", "aa", -1, 2, {"", "a"}},
    {"  a  b\tc\n ", NULL, -1, 3, {"a", "b", "c"}},
    {"  a  b\tc\n ", "", 1, 2, {"a", "b\tc\n "}},
    {"  a  b\tc\n ", NULL, 0, 1, {"a  b\tc\n "}},
    {"", NULL, -1, 0, {0}},
    {"   ", "", -1, 0, {0}},
    {"x\xc2\xa0y\xe3\x80\x80z", NULL, -1, 3, {"x", "y", "z"}},
    {"a--b--", "--", 2, 3, {"a", "b", ""}},
    {"a b", NULL, 5, 2, {"a", "b"}},
};

/* Each case alone ([1]) and all of them in one [2, 7] tensor (padding to
 * the longest). */
static keel_session_t *split_session(const char *delim, int64_t maxsplit) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_STRING, -1, NULL);
  mb_output(g, "Y", KEEL_STRING, -1, NULL);
  mb_output(g, "Z", KEEL_INT64, -1, NULL);
  mb_node *n = mb_add(g, "StringSplit", "X", "Y,Z");
  if (delim) mb_attr_s(n, "delimiter", delim);
  if (maxsplit >= 0) mb_attr_i(n, "maxsplit", maxsplit);
  return mb_session(g, 20);
}

static void check_split_cases(void) {
  for (size_t c = 0; c < sizeof SPLITS / sizeof SPLITS[0]; c++) {
    const splitcase *sc = &SPLITS[c];
    keel_session_t *s = split_session(sc->delim, sc->maxsplit);
    const char *x[3] = {sc->x, "", sc->x};
    keel_value_t *in = str_tensor(s, 2, (int64_t[]){3, 1}, x, 3), *out[2] = {0};
    CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, out));
    int empty_n = sc->delim && sc->delim[0] ? 1 : 0; /* "" splits to [""] with a delimiter */
    int most = sc->n > empty_n ? sc->n : empty_n;
    CHECK(out[0] && keel_value_rank(out[0]) == 3 && keel_value_shape(out[0])[2] == most);
    const int64_t *z = out[1] ? keel_value_data(out[1]) : NULL;
    CHECK(z && keel_value_rank(out[1]) == 2 && z[0] == sc->n && z[1] == empty_n && z[2] == sc->n);
    for (int i = 0; out[0] && i < most; i++) {
      CHECK(str_at(out[0], i, i < sc->n ? sc->want[i] : ""));
      CHECK(str_at(out[0], most + i, ""));
      CHECK(str_at(out[0], 2 * most + i, i < sc->n ? sc->want[i] : ""));
    }
    if (!z || z[0] != sc->n) fprintf(stderr, "  split case %zu\n", c);
    keel_value_release(out[0]);
    keel_value_release(out[1]);
    keel_value_release(in);
    keel_session_destroy(s);
  }
  /* a number tensor is refused */
  keel_session_t *s = split_session(",", -1);
  keel_value_t *in = NULL, *out[2] = {0};
  CHECK_OK(keel_tensor_create(s, KEEL_INT64, 1, (int64_t[]){1}, (int64_t[]){7}, &in));
  CHECK_STATUS(keel_run(s, (const char *[]){"X"}, &in, 1, out), KEEL_ERR_SHAPE);
  keel_value_release(in);
  keel_session_destroy(s);
}

/* ================================================ RegexFullMatch */

/* Expected values from Python's re.fullmatch (ONNX's reference) on
 * patterns where RE2 and Python agree, plus RE2-only syntax (\pL). "." is
 * one UTF-8 code point, as in RE2's default UTF-8 mode. */
typedef struct rcase {
  const char *pattern, *x;
  bool want;
} rcase;

static const rcase REGEXES[] = {
    {"a+b", "aaab", true},           {"a+b", "aaabc", false},
    {"b", "abc", false},             {"", "", true},
    {"(?i)hello", "HeLLo", true},    {"\\d{3}-\\d{4}", "555-1234", true},
    {"\\d{3}-\\d{4}", "555-12345", false}, {"caf.", "caf\xc3\xa9", true},
    {"x*", "", true},                {"\\pL+", "\xce\xba\xce\xbb\xce\xbc", true},
    {"www\\.[\\w.-]+\\.\\bcom\\b", "www.bbc.co.uk", false},
    {"www\\.[\\w.-]+\\.\\bcom\\b", "www.google.com", true},
};

static keel_session_t *regex_session(const char *pattern) {
  mb_graph *g = mb_graph_new("main");
  mb_input(g, "X", KEEL_STRING, -1, NULL);
  mb_output(g, "Y", KEEL_BOOL, -1, NULL);
  mb_node *n = mb_add(g, "RegexFullMatch", "X", "Y");
  if (pattern) mb_attr_s(n, "pattern", pattern);
  return mb_session(g, 20);
}

static void check_regex(void) {
  for (size_t c = 0; c < sizeof REGEXES / sizeof REGEXES[0]; c++) {
    keel_session_t *s = regex_session(REGEXES[c].pattern);
    const char *x[2] = {REGEXES[c].x, REGEXES[c].x};
    keel_value_t *in = str_tensor(s, 2, (int64_t[]){1, 2}, x, 2), *out = NULL;
    CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, &out));
    const uint8_t *y = out ? keel_value_data(out) : NULL;
    CHECK(y && keel_value_rank(out) == 2 && y[0] == REGEXES[c].want && y[1] == REGEXES[c].want);
    if (!y || y[0] != REGEXES[c].want) fprintf(stderr, "  regex '%s' on '%s'\n", REGEXES[c].pattern, REGEXES[c].x);
    keel_value_release(out);
    keel_value_release(in);
    keel_session_destroy(s);
  }
  /* RE2 has no backreferences or lookaround, and refuses patterns whose
   * program is too large: bad patterns, like a missing one and a
   * non-string input, are errors; the session stays usable */
  static const char *const bad[] = {"(a)\\1", "(?=a)a", "(unclosed", "((a{1000}){1000}){1000}", NULL};
  for (int i = 0; i < 5; i++) {
    keel_session_t *s = regex_session(bad[i]);
    const char *x[1] = {"a"};
    keel_value_t *in = str_tensor(s, 1, (int64_t[]){1}, x, 1), *out = NULL;
    CHECK_STATUS(keel_run(s, (const char *[]){"X"}, &in, 1, &out), KEEL_ERR_INVALID_MODEL);
    CHECK(out == NULL);
    keel_value_release(in);
    keel_session_destroy(s);
  }
  keel_session_t *s = regex_session("a");
  keel_value_t *in = NULL, *out = NULL;
  CHECK_OK(keel_tensor_create(s, KEEL_INT64, 1, (int64_t[]){1}, (int64_t[]){7}, &in));
  CHECK_STATUS(keel_run(s, (const char *[]){"X"}, &in, 1, &out), KEEL_ERR_SHAPE);
  keel_value_release(in);
  const char *x[1] = {"a"};
  in = str_tensor(s, 1, (int64_t[]){1}, x, 1);
  CHECK_OK(keel_run(s, (const char *[]){"X"}, &in, 1, &out));
  keel_value_release(out);
  keel_value_release(in);
  keel_session_destroy(s);
}

int main(void) {
  check_strnorm_ascii();
  check_strnorm_unicode();
  check_strnorm_stopwords();
  check_strnorm_errors();
  for (int i = 0; i < 150; i++) check_tfidf_random(i);
  check_tfidf_large_and_strings();
  check_tfidf_example();
  check_tfidf_errors();
  check_concat_random();
  check_concat_errors();
  check_split_cases();
  check_regex();
  return check_report();
}
