/* plot.c: SVG line charts of memory figures (keel memcheck --plot): axes
 * with byte units, a legend and a title, readable without any tool. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

/* A "nice" tick step (1, 2 or 5 times a power of ten) for about 5 ticks. */
static double nice_step(double span) {
  if (span <= 0) return 1;
  double raw = span / 5, mag = pow(10, floor(log10(raw))), r = raw / mag;
  return (r < 1.5 ? 1 : r < 3.5 ? 2 : r < 7.5 ? 5 : 10) * mag;
}

static void unit_for(double max, double *div, const char **unit) {
  if (max >= 1073741824.0) *div = 1073741824.0, *unit = "GB";
  else if (max >= 1048576.0) *div = 1048576.0, *unit = "MB";
  else if (max >= 1024.0) *div = 1024.0, *unit = "KB";
  else *div = 1, *unit = "B";
}

/* One y axis: its scale in a display unit and its tick step. */
typedef struct yaxis {
  double div, top, step;   /* bytes per unit; axis top and tick step in units */
  const char *unit;
} yaxis;

static yaxis scale_for(const cli_panel *p, int axis) {
  double max = 1;
  for (int s = 0; s < p->n_series; s++)
    if (p->series[s].axis == axis)
      for (size_t i = 0; i < p->series[s].n; i++) max = fmax(max, p->series[s].y[i]);
  yaxis a;
  unit_for(max, &a.div, &a.unit);
  a.step = nice_step(max / a.div * 1.05);
  a.top = ceil(max / a.div * 1.05 / a.step) * a.step;
  return a;
}

/* Ticks and label of one y axis, on the left (side 0) or right (side 1). */
static void y_axis(FILE *f, const yaxis *a, int side, const char *color, double x, double y,
                   double w, double h, const char *name) {
  double ax = side ? x + w : x;
  for (double v = 0; v <= a->top + a->step * 1e-9; v += a->step) {
    double yy = y + h - h * v / a->top;
    if (!side) fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#e4e4e4'/>\n", x, yy, x + w, yy);
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='11' fill='%s' text-anchor='%s'>%g</text>\n",
            side ? ax + 6 : ax - 6, yy + 4, color, side ? "start" : "end", v);
  }
  double lx = side ? ax + 58 : ax - 52;
  fprintf(f, "<text x='%.1f' y='%.1f' font-size='12' fill='%s' text-anchor='middle' "
             "transform='rotate(-90 %.1f %.1f)'>%s (%s)</text>\n",
          lx, y + h / 2, color, lx, y + h / 2, name, a->unit);
}

static void x_axis(FILE *f, const cli_panel *p, double x, double y, double w, double h, size_t n) {
  size_t xs = n > 10 ? (size_t)nice_step((double)n) : 1;
  for (size_t i = 1; i <= n; i += xs ? xs : 1) {
    double xx = x + (n > 1 ? w * (double)(i - 1) / (double)(n - 1) : w / 2);
    fprintf(f, "<text x='%.1f' y='%.1f' font-size='11' text-anchor='middle'>%zu</text>\n", xx, y + h + 16, i);
  }
  fprintf(f, "<text x='%.1f' y='%.1f' font-size='12' text-anchor='middle'>%s</text>\n", x + w / 2, y + h + 34, p->xlabel);
}

static void series_line(FILE *f, const cli_series *se, const yaxis *a, double x, double y,
                        double w, double h, size_t n) {
  fprintf(f, "<polyline fill='none' stroke='%s' stroke-width='2' points='", se->color);
  for (size_t i = 0; i < se->n; i++)
    fprintf(f, "%.1f,%.1f ", x + (n > 1 ? w * (double)i / (double)(n - 1) : w / 2),
            y + h - h * (se->y[i] / a->div) / a->top);
  fprintf(f, "'/>\n");
}

static void legend(FILE *f, const cli_series *se, int i, double x, double y, double w) {
  char last[32] = "";
  if (se->n) cli_bytes((uint64_t)se->y[se->n - 1], last, sizeof last);
  double ly = y + 18 + 18.0 * i;
  fprintf(f, "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='%s' stroke-width='3'/>\n",
          x + w - 262, ly - 4, x + w - 238, ly - 4, se->color);
  fprintf(f, "<text x='%.1f' y='%.1f' font-size='12'>%s, %s axis (last: %s)</text>\n",
          x + w - 232, ly, se->name, se->axis ? "right" : "left", last);
}

/* A panel: series on the left axis and, with their own scale, on the right
 * (allocated bytes would vanish next to reserved bytes on one scale). */
static void panel(FILE *f, const cli_panel *p, double x, double y, double w, double h) {
  size_t n = 0;
  bool right = false;
  for (int s = 0; s < p->n_series; s++) n = KEEL_CLI_MAX(n, p->series[s].n), right |= p->series[s].axis;
  yaxis ax[2] = {scale_for(p, 0), scale_for(p, 1)};
  fprintf(f, "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='white' stroke='#333'/>\n", x, y, w, h);
  fprintf(f, "<text x='%.1f' y='%.1f' font-size='14' font-weight='bold'>%s</text>\n", x, y - 10, p->title);
  for (int side = 0; side < (right ? 2 : 1); side++) {
    const char *color = "#333", *name = "bytes";
    int on_side = 0;
    for (int s = 0; s < p->n_series; s++)
      if (p->series[s].axis == side) color = p->series[s].color, name = p->series[s].name, on_side++;
    if (on_side > 1) color = "#333", name = "bytes"; /* the legend names them */
    y_axis(f, &ax[side], side, color, x, y, w, h, name);
  }
  x_axis(f, p, x, y, w, h, n);
  for (int s = 0; s < p->n_series; s++) {
    series_line(f, &p->series[s], &ax[p->series[s].axis], x, y, w, h, n);
    legend(f, &p->series[s], s, x, y, w);
  }
}

int cli_svg_write(const char *path, const char *title, const cli_panel *panels, int n_panels) {
  FILE *f = fopen(path, "w");
  if (!f) return 1;
  double W = 900, ph = 300, top = 60;
  double H = top + n_panels * (ph + 90) + 10;
  fprintf(f, "<?xml version='1.0' encoding='UTF-8'?>\n<svg xmlns='http://www.w3.org/2000/svg' "
             "width='%.0f' height='%.0f' font-family='DejaVu Sans, Arial, sans-serif'>\n", W, H);
  fprintf(f, "<rect width='100%%' height='100%%' fill='#fafafa'/>\n");
  fprintf(f, "<text x='%.0f' y='30' font-size='18' font-weight='bold' text-anchor='middle'>", W / 2);
  for (const char *c = title; *c; c++) { /* escape for XML */
    if (*c == '<') fputs("&lt;", f);
    else if (*c == '&') fputs("&amp;", f);
    else fputc(*c, f);
  }
  fprintf(f, "</text>\n");
  for (int i = 0; i < n_panels; i++) panel(f, &panels[i], 90, top + 20 + i * (ph + 90), W - 190, ph);
  fprintf(f, "</svg>\n");
  return fclose(f) ? 1 : 0;
}
