/*
 * svg.c — renders a memory timeline as an SVG chart a browser opens: the
 * device location stacked by category (filled areas), and one line per
 * location for its total. A <desc> element carries the chart's totals as
 * JSON (peak bytes per location, sample count) so that a test can hold the
 * picture to the data it was drawn from.
 */
#include <stdio.h>
#include <string.h>

#include "engine/memory/timeline.h"
#include "zinc.h"

#define W 960.0
#define H 440.0
#define L 80.0  /* left margin */
#define T 40.0  /* top margin */
#define PW (W - L - 200.0)
#define PH (H - T - 60.0)

static const char *colors[ZINC_MEM_NCAT] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                            "#59a14f", "#b07aa1"};
static const char *line_colors[ZINC_LOC_N] = {"#000000", "#1f3bbf", "#2a8a2a"};

static double total(const zinc_timeline_sample *s, int loc) {
  double v = 0;
  for (int c = 0; c < ZINC_MEM_NCAT; c++)
    v += (double)s->bytes[loc][c];
  return v;
}

int zinc_mem_render_svg(const zinc_timeline *tl, FILE *f) {
  int n = tl->nsamples;
  double tmax = n > 0 ? tl->samples[n - 1].t : 1.0, ymax = 1.0;
  double peak[ZINC_LOC_N] = {0, 0, 0};
  for (int i = 0; i < n; i++)
    for (int l = 0; l < ZINC_LOC_N; l++) {
      double v = total(&tl->samples[i], l);
      if (v > peak[l])
        peak[l] = v;
      if (v > ymax)
        ymax = v;
    }
  if (tmax <= 0)
    tmax = 1.0;
  ymax *= 1.08;
#define X(t) (L + PW * (t) / tmax)
#define Y(v) (T + PH - PH * (v) / ymax)
  fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
             "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
             "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
          W, H, W, H);
  fprintf(f, "<title>zinc memory, rank %d of %d, stage %d</title>\n", tl->rank, tl->world_size,
          tl->stage);
  fprintf(f, "<desc>{\"samples\": %d, \"peak\": {\"device\": %.0f, \"host\": %.0f, "
             "\"nvme\": %.0f}}</desc>\n", n, peak[0], peak[1], peak[2]);
  fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", W, H);
  fprintf(f, "<text x=\"%.0f\" y=\"22\" font-size=\"15\">zinc memory timeline: rank %d of %d, "
             "stage %d (%d samples)</text>\n", L, tl->rank, tl->world_size, tl->stage, n);
  /* device: stacked areas by category, drawn top category first */
  for (int c = ZINC_MEM_NCAT - 1; c >= 0 && n > 0; c--) {
    fprintf(f, "<polygon fill=\"%s\" fill-opacity=\"0.8\" stroke=\"none\" points=\"", colors[c]);
    for (int i = 0; i < n; i++) {
      double v = 0;
      for (int k = 0; k <= c; k++)
        v += (double)tl->samples[i].bytes[ZINC_LOC_DEVICE][k];
      fprintf(f, "%.1f,%.1f ", X(tl->samples[i].t), Y(v));
    }
    for (int i = n - 1; i >= 0; i--) {
      double v = 0;
      for (int k = 0; k < c; k++)
        v += (double)tl->samples[i].bytes[ZINC_LOC_DEVICE][k];
      fprintf(f, "%.1f,%.1f ", X(tl->samples[i].t), Y(v));
    }
    fprintf(f, "\"/>\n");
  }
  /* one line per location */
  for (int l = 0; l < ZINC_LOC_N && n > 0; l++) {
    if (peak[l] == 0)
      continue;
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s points=\"",
            line_colors[l], l == 0 ? " stroke-dasharray=\"4 2\"" : "");
    for (int i = 0; i < n; i++)
      fprintf(f, "%.1f,%.1f ", X(tl->samples[i].t), Y(total(&tl->samples[i], l)));
    fprintf(f, "\"/>\n");
  }
  /* axes and ticks */
  fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", L,
          T + PH, L + PW, T + PH);
  fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", L, T,
          L, T + PH);
  for (int k = 0; k <= 5; k++) {
    double v = ymax * k / 5;
    fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%.1f MiB</text>\n", L - 6,
            Y(v) + 4, v / 1048576.0);
    double t = tmax * k / 5;
    fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%.2f s</text>\n", X(t),
            T + PH + 18, t);
  }
  /* legend */
  double ly = T + 10;
  for (int c = 0; c < ZINC_MEM_NCAT; c++, ly += 18)
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"%s\"/><text "
               "x=\"%.0f\" y=\"%.0f\">device %s</text>\n", L + PW + 20, ly, colors[c],
            L + PW + 38, ly + 10, zinc_mem_category_name(c));
  for (int l = 0; l < ZINC_LOC_N; l++, ly += 18)
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" "
               "stroke-width=\"2\"/><text x=\"%.0f\" y=\"%.0f\">%s total (peak %.1f MiB)</text>\n",
            L + PW + 20, ly + 6, L + PW + 32, ly + 6, line_colors[l], L + PW + 38, ly + 10,
            zinc_mem_location_name(l), peak[l] / 1048576.0);
  fprintf(f, "</svg>\n");
#undef X
#undef Y
  return ferror(f) ? -1 : 0;
}
