/* test_select.c: the selections of the matrix products
 * (src/ops/math/matmul/select.c), the recurrences (src/ops/nn/rnn/select.c)
 * and attention (src/ops/nn/attention/select.c); the convolutions' has its
 * own test (test_conv_select.c).
 *
 * keel_matmul_select_path on the shapes each rule was written for (the
 * LSTM bench's small head, a classifier's one-row product, a transformer's
 * 128-row products), on a first run and on later shapes of a node that
 * already chose; the cuts of oneDNN's product (column parts, bands of
 * rows) and of keel's GEMM for 1, 2 and 16 splits; and the rule keel info
 * prints for a FusedMatMul where keel has oneDNN. keel's gemv needs
 * AVX-512: it is expected exactly where this CPU has it, so the test
 * passes on any x86 CPU and checks the other branch there (so for
 * attention's panels).
 *
 * Recurrences: the CRNN's bidirectional LSTM (96 units) runs its two
 * directions at once, a 512-unit one splits its steps instead; GRU and
 * reference weights stay serial. Attention: whole heads only with heads
 * for every split.
 */
#include <string.h>

#include "check.h"
#include "mb.h"
#include "ops/common/gemv.h"
#include "ops/common/panel_gemm.h"
#include "ops/math/matmul/select.h"
#include "ops/nn/attention/select.h"
#include "ops/nn/rnn/select.h"

static void paths(void) {
  bool gv = keel_gemv_fast();
  /* the LSTM bench's head: 16 x 128 x 32 with a small B: keel's GEMM, before
   * and after the mode is set; a large B never takes that path */
  keel_mm_facts head = {16, 32, 128, true};
  CHECK(keel_matmul_select_path(KEEL_MM_UNDECIDED, &head) == KEEL_MM_SMALL);
  CHECK(keel_matmul_select_path(KEEL_MM_LIB, &head) == KEEL_MM_SMALL);
  head.keep_b = false;
  CHECK(keel_matmul_select_path(KEEL_MM_UNDECIDED, &head) == KEEL_MM_LIB);
  /* a classifier's product on one image: gemv where keel has it */
  keel_mm_facts one = {1, 1000, 1280, false};
  CHECK(keel_matmul_select_path(KEEL_MM_UNDECIDED, &one) == (gv ? KEEL_MM_GEMV : KEEL_MM_LIB));
  /* ... for good at 4 rows or fewer; a taller run of that node: oneDNN */
  keel_mm_facts four = {4, 1000, 1280, false}, five = {5, 1000, 1280, false};
  CHECK(keel_matmul_select_path(KEEL_MM_GEMV, &four) == KEEL_MM_GEMV);
  CHECK(keel_matmul_select_path(KEEL_MM_GEMV, &five) == KEEL_MM_LIB);
  /* a node whose first run was tall never takes gemv later */
  CHECK(keel_matmul_select_path(KEEL_MM_LIB, &one) == KEEL_MM_LIB);
  /* a transformer's 128 x 768 x 256 */
  keel_mm_facts qkv = {128, 768, 256, false};
  CHECK(keel_matmul_select_path(KEEL_MM_UNDECIDED, &qkv) == KEEL_MM_LIB);
}

static void cuts(void) {
  /* column parts: only when the rows are fewer than 8 per split */
  CHECK(keel_matmul_parts(1, 1000, 1) == 1);
  CHECK(keel_matmul_parts(1, 1000, 2) == 2);
  CHECK(keel_matmul_parts(1, 1000, 16) == KEEL_MM_MAX_PARTS);
  CHECK(keel_matmul_parts(1, 100, 16) == 1); /* parts of 64 columns at least */
  CHECK(keel_matmul_parts(64, 768, 16) == 8);
  CHECK(keel_matmul_parts(128, 768, 16) == 1);
  CHECK(keel_matmul_parts(16, 768, 2) == 1);
  /* B's packed rows: strides of a multiple of 512 bytes get a cache line more */
  CHECK(keel_matmul_ld(1024) == 1040);
  CHECK(keel_matmul_ld(768) == 784);
  CHECK(keel_matmul_ld(128) == 144);
  CHECK(keel_matmul_ld(1000) == 1000);
  CHECK(keel_matmul_ld(576) == 576);
  CHECK(keel_matmul_ld(64) == 64);
  /* bands: 8 rows at least, one per split at most */
  CHECK(keel_matmul_bands(128, 1) == 1);
  CHECK(keel_matmul_bands(128, 2) == 2);
  CHECK(keel_matmul_bands(128, 16) == 16);
  CHECK(keel_matmul_bands(100, 16) == 12);
  CHECK(keel_matmul_bands(7, 4) == 1);
  CHECK(keel_matmul_bands(100000, 256) == KEEL_MM_MAX_BANDS);
  /* keel's GEMM: one call at 1 split or under 2^18 multiply-adds, else
   * panels of the longer side */
  bool rows = false;
  int64_t grain = 0;
  CHECK(!keel_gemm_split(128, 768, 768, 1, &rows, &grain));
  CHECK(!keel_gemm_split(16, 32, 128, 16, &rows, &grain));
  CHECK(keel_gemm_split(100, 64, 768, 2, &rows, &grain) && rows && grain == 16);
  CHECK(keel_gemm_split(16, 768, 768, 16, &rows, &grain) && !rows && grain == 64);
}

/* keel info --nodes names the rule of the implementation bound */
static void described(void) {
  mb_graph *g = mb_graph_new("g");
  static float w[256 * 64];
  for (int i = 0; i < 256 * 64; i++) w[i] = (float)(i % 7) / 7.0f;
  mb_input(g, "x", KEEL_FLOAT, 2, (int64_t[]){32, 256});
  mb_init(g, "w", KEEL_FLOAT, 2, (int64_t[]){256, 64}, w);
  mb_add(g, "MatMul", "x,w", "y");
  mb_output(g, "y", KEEL_FLOAT, -1, NULL);
  keel_session_t *s = mb_session(g, 17);
  CHECK(s != NULL);
  char *d = NULL;
  CHECK_OK(keel_session_describe(s, KEEL_DESCRIBE_NODES, &d));
  if (d && strstr(d, "[onednn]")) CHECK(strstr(d, "ops/math/matmul/select.c") != NULL);
  else CHECK(d && strstr(d, "FusedMatMul") && strstr(d, "[reference]"));
  keel_free(d);
  keel_session_destroy(s);
}

static void rnn(void) {
  /* packed, gru, float, dirs, batch, gates, hid */
  keel_rnn_facts crnn = {true, false, true, 2, 1, 4, 96};
  CHECK(keel_rnn_dirs_parallel(&crnn, 2));
  CHECK(!keel_rnn_dirs_parallel(&crnn, 1));
  CHECK(keel_rnn_step_parts(&crnn, 2) == 2); /* unused when the directions run at once */
  keel_rnn_facts big = {true, false, true, 2, 1, 4, 512}; /* 1M multiply-adds a step */
  CHECK(!keel_rnn_dirs_parallel(&big, 2));
  CHECK(keel_rnn_step_parts(&big, 2) == 2);
  CHECK(keel_rnn_step_parts(&big, 16) == 16);
  CHECK(keel_rnn_step_parts(&big, 1) == 1);
  keel_rnn_facts narrow = {true, false, true, 1, 1, 4, 40}; /* not a multiple of 16 */
  CHECK(keel_rnn_step_parts(&narrow, 4) == 1);
  keel_rnn_facts tiny = {true, false, true, 1, 1, 1, 32}; /* 1K multiply-adds a step */
  CHECK(keel_rnn_step_parts(&tiny, 4) == 1);
  keel_rnn_facts gru = {true, true, true, 2, 1, 3, 256};
  CHECK(keel_rnn_step_parts(&gru, 4) == 1);
  keel_rnn_facts ref = {false, false, true, 2, 1, 4, 96};
  CHECK(!keel_rnn_dirs_parallel(&ref, 2) && keel_rnn_step_parts(&ref, 2) == 1);
  keel_rnn_facts dbl = {true, false, false, 2, 1, 4, 96};
  CHECK(!keel_rnn_dirs_parallel(&dbl, 2));
}

static void attention(void) {
  bool p = keel_panel_gemm_avx512();
  keel_attn_facts bert = {1, 12, 64, 64, 128};
  CHECK(keel_attention_panels(&bert, 2) == p);
  CHECK(keel_attention_panels(&bert, 12) == p);
  CHECK(!keel_attention_panels(&bert, 16)); /* 12 heads, 16 splits */
  keel_attn_facts long_keys = {1, 12, 64, 64, 10000};
  CHECK(!keel_attention_panels(&long_keys, 2));
  /* query rows per block: the held-out ViT (3 heads, 197 tokens) */
  keel_attn_facts vit = {1, 3, 64, 64, 197};
  CHECK(keel_attention_block_rows(&vit, 1, 197) == 128);
  CHECK(keel_attention_block_rows(&vit, 2, 197) == 64);
  CHECK(keel_attention_block_rows(&vit, 16, 197) == 32);
  CHECK(keel_attention_block_rows(&long_keys, 1, 10000) == 32); /* 128 KB of scores */
  CHECK(keel_attention_block_rows(&bert, 1, 128) == 128);
}

int main(void) {
  paths();
  cuts();
  rnn();
  attention();
  described();
  return check_report();
}
