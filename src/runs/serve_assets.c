/* Lookup of the dashboard's page assets, which the build embeds as byte arrays
 * (src/runs/web/embed.cmake writes the table into build/generated/serve_assets_data.c). */
#include <string.h>

#include "loom/serve.h"

extern const loom_serve_asset loom_serve_assets[];
extern const size_t loom_serve_nassets;

const loom_serve_asset *loom_serve_find_asset(const char *path) {
  if (!strcmp(path, "/")) path = "/index.html";
  for (size_t i = 0; i < loom_serve_nassets; i++)
    if (!strcmp(loom_serve_assets[i].path, path)) return &loom_serve_assets[i];
  return NULL;
}
