/* conv_wg_xf.h: the transforms of keel's Winograd F(2x2, 3x3) kernel
 * (conv_wg.c), written once over a vector of WG_L floats and included by
 * conv_wg.c once per ISA: WG_L 16 under target("avx512f"), WG_L 8 under
 * target("avx2,fma"). Each inclusion defines, suffixed by WG_SFX:
 * wg_weights (U = G g Gᵀ into a worker's panel), wg_input (V = Bᵀ d B)
 * and wg_output (Y = Aᵀ m A + B (+ Z)). Not a header of its own: it reads
 * conv_wg.c's wg_job and tile_at. */
#ifndef WG_L
#error "conv_wg_xf.h is included by conv_wg.c with WG_L, WG_SFX and WG_TARGET set"
#endif

#define WG_CAT2(a, b) a##b
#define WG_CAT(a, b) WG_CAT2(a, b)
#define WG_FN(name) WG_CAT(name, WG_SFX)
#define WG_VEC WG_CAT(wg_vec, WG_SFX)

/* WG_L floats; aligned(4): loads and stores at any float's address */
typedef float WG_VEC __attribute__((vector_size(4 * WG_L), aligned(4)));

WG_TARGET static inline WG_VEC WG_FN(wg_ld)(const float *p) { return *(const WG_VEC *)p; }
WG_TARGET static inline void WG_FN(wg_st)(float *p, WG_VEC v) { *(WG_VEC *)p = v; }

/* One side of U = G g Gᵀ: the 4 rows G (a, b, d) of 3, for WG_L output
 * channels at a time. G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1]. */
WG_TARGET static inline void WG_FN(g_rows)(WG_VEC a, WG_VEC b, WG_VEC d, WG_VEC o[4]) {
  const WG_VEC h = (WG_VEC){0} + 0.5f;
  o[0] = a;
  o[1] = h * ((a + b) + d);
  o[2] = h * ((a - b) + d);
  o[3] = d;
}

/* U[ξ] for ξ = 4 i + k, i in [2 h, 2 h + 2), of output block b, into a
 * worker's panel [8][C][64] (in L2 while its products run). */
WG_TARGET static void WG_FN(wg_weights)(const wg_job *j, int64_t b, int h, float *U) {
  int64_t C = j->C, M = j->M;
  for (int64_t c = 0; c < C; c++)
    for (int64_t l = 0; l < 64; l += WG_L) {
      const float *g = j->p->w + c * 9 * M + b * 64 + l;
      WG_VEC gg[3][4]; /* G g, per kernel column: its 4 rows */
      for (int k = 0; k < 3; k++)
        WG_FN(g_rows)(WG_FN(wg_ld)(g + k * M), WG_FN(wg_ld)(g + (3 + k) * M),
                      WG_FN(wg_ld)(g + (6 + k) * M), gg[k]);
      for (int i = 2 * h; i < 2 * h + 2; i++) {
        WG_VEC u[4];
        WG_FN(g_rows)(gg[0][i], gg[1][i], gg[2][i], u);
        for (int k = 0; k < 4; k++) WG_FN(wg_st)(U + (((i - 2 * h) * 4 + k) * C + c) * 64 + l, u[k]);
      }
    }
}

/* V = Bᵀ d B for the group's tiles of task q (of j->ntask), WG_L channels
 * at a time. Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]. */
WG_TARGET static keel_status WG_FN(wg_input)(void *ctx, int64_t q0, int64_t q1, int worker) {
  const wg_job *j = ctx;
  const keel_win *w = &j->a->g->w;
  int64_t C = j->C, H = w->in[0], W = w->in[1];
  const WG_VEC z = {0};
  (void)worker;
  for (int64_t i = j->tn * q0 / j->ntask; i < j->tn * q1 / j->ntask; i++) {
    int64_t n, oy, ox;
    tile_at(j, j->t0 + i, &n, &oy, &ox);
    const float *x = j->a->x + n * H * W * C;
    for (int64_t c = 0; c < C; c += WG_L) {
      WG_VEC d[4][4], e[4][4];
      for (int r = 0; r < 4; r++)
        for (int s = 0; s < 4; s++) {
          int64_t iy = oy - w->pb[0] + r, ix = ox - w->pb[1] + s;
          d[r][s] = iy >= 0 && iy < H && ix >= 0 && ix < W ? WG_FN(wg_ld)(x + (iy * W + ix) * C + c)
                                                           : z;
        }
      for (int s = 0; s < 4; s++) {
        e[0][s] = d[0][s] - d[2][s];
        e[1][s] = d[1][s] + d[2][s];
        e[2][s] = d[2][s] - d[1][s];
        e[3][s] = d[1][s] - d[3][s];
      }
      for (int r = 0; r < 4; r++) {
        WG_VEC v[4] = {e[r][0] - e[r][2], e[r][1] + e[r][2], e[r][2] - e[r][1], e[r][1] - e[r][3]};
        for (int s = 0; s < 4; s++) WG_FN(wg_st)(j->V + ((r * 4 + s) * j->tn + i) * C + c, v[s]);
      }
    }
  }
  return KEEL_OK;
}

/* Y = Aᵀ m A + B (+ Z) for the group's tiles of task q, through the
 * activation where WG_ACT (the ISA's inline activation) is defined and
 * j->act_inline says it computes this one. Aᵀ = [1 1 1 0; 0 1 -1 -1]. */
WG_TARGET static keel_status WG_FN(wg_output)(void *ctx, int64_t q0, int64_t q1, int worker) {
  const wg_job *j = ctx;
  const keel_nhwc_args *a = j->a;
  const keel_win *w = &a->g->w;
  int64_t M = j->M, OH = w->out[0], OW = w->out[1];
  const float *z = a->z_in_y ? a->y : a->z;
  (void)worker;
  for (int64_t i = j->tn * q0 / j->ntask; i < j->tn * q1 / j->ntask; i++) {
    int64_t n, oy, ox;
    tile_at(j, j->t0 + i, &n, &oy, &ox);
    for (int64_t m = 0; m < M; m += WG_L) {
      WG_VEC q[16], r[2][4];
      for (int k = 0; k < 16; k++) q[k] = WG_FN(wg_ld)(j->Mx + (k * j->tn + i) * M + m);
      for (int s = 0; s < 4; s++) {
        r[0][s] = (q[s] + q[4 + s]) + q[8 + s];
        r[1][s] = (q[4 + s] - q[8 + s]) - q[12 + s];
      }
      WG_VEC bv = a->b ? WG_FN(wg_ld)(a->b + m) : (WG_VEC){0};
      for (int u = 0; u < 2 && oy + u < OH; u++) {
        WG_VEC o[2] = {(r[u][0] + r[u][1]) + r[u][2], (r[u][1] - r[u][2]) - r[u][3]};
        for (int v = 0; v < 2 && ox + v < OW; v++) {
          int64_t at = ((n * OH + oy + u) * OW + ox + v) * M + m;
          WG_VEC y = o[v] + bv;
          if (z) y = y + WG_FN(wg_ld)(z + at);
#ifdef WG_ACT
          if (j->act_inline) y = WG_ACT(&a->act, y);
#endif
          WG_FN(wg_st)(a->y + at, y);
        }
      }
    }
  }
  return KEEL_OK;
}

#undef WG_VEC
#undef WG_FN
#undef WG_CAT
#undef WG_CAT2
