/* progress.c: progress for long commands. On a terminal (stderr), one bar
 * redrawn in place with the rate and the time left; otherwise a plain line
 * at every tenth, so logs stay readable. Under mpirun only rank 0 shows it. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

void cli_progress_start(cli_progress *p, const char *what, long total) {
  memset(p, 0, sizeof *p);
  p->what = what;
  p->total = total;
  p->tty = isatty(STDERR_FILENO);
  p->t0 = cli_now();
  p->quiet = cli_dist_rank() != 0;
}

static void eta_text(double secs, char *buf, size_t cap) {
  if (secs >= 3600) snprintf(buf, cap, "%.0fh%02.0fm", secs / 3600, (double)((long)secs % 3600) / 60);
  else if (secs >= 60) snprintf(buf, cap, "%.0fm%02.0fs", (double)((long)secs / 60), (double)((long)secs % 60));
  else snprintf(buf, cap, "%.1fs", secs);
}

void cli_progress_update(cli_progress *p, long done) {
  if (p->quiet) return;
  double el = cli_now() - p->t0, rate = el > 0 ? (double)done / el : 0;
  char eta[32];
  eta_text(rate > 0 ? (double)(p->total - done) / rate : 0, eta, sizeof eta);
  if (p->tty) {
    int width = 30, fill = p->total ? (int)((double)width * (double)done / (double)p->total) : width;
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
    bar[width] = 0;
    fprintf(stderr, "\r\033[K%s [%s] %ld/%ld  %.1f/s  ETA %s", p->what, bar, done, p->total, rate, eta);
    p->shown = true;
  } else if (p->total >= 10 && done % (p->total / 10) == 0) {
    fprintf(stderr, "%s: %ld/%ld (%.0f%%), %.1f/s, ETA %s\n", p->what, done, p->total,
            100.0 * (double)done / (double)p->total, rate, eta);
  }
  fflush(stderr);
}

/* Clears the bar before other output goes to the terminal. */
void cli_progress_clear(cli_progress *p) {
  if (p->tty && p->shown) fprintf(stderr, "\r\033[K");
  p->shown = false;
}

void cli_progress_end(cli_progress *p) {
  if (p->quiet) return;
  cli_progress_clear(p);
  if (p->tty) fprintf(stderr, "%s: %ld done in %.1fs\n", p->what, p->total, cli_now() - p->t0);
}
