/* Sharded training checkpoints: every rank writes the pieces it holds, rank 0 the trainer
 * state, config and index; loading maps pieces onto any layout (see checkpoint.h). */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "loom/vision_module.h"
#include "loom/checkpoint.h"
#include "loom/safetensors.h"
#include "ckpt/checkpoint_meta.h"
#include "loom/fault.h"

/* ---- writing -------------------------------------------------------------------------------- */

/* One section of a file: values for flat indices [begin, end) of the layout, stored at
 * base[i - begin] (or base16[i - begin]: bf16 storage), written under names
 * "<prefix><tensor>". The file holds the real dtype of the values: F32, or BF16 for bf16
 * storage (base16) and for bf16 values held in fp32 words (bf16: training.param_dtype=bf16
 * parameters and gradients; the conversion is exact). */
typedef struct {
  const char *prefix;
  const float *base;
  size_t begin, end;
  const loom_bf16 *base16;
  bool bf16;
} section;

/* bf16 storage held in fp32 words must hold bf16 values only: BF16 in the file is then exact
 * (a value with low mantissa bits set means a missing rounding: refuse, do not round). */
static int check_bf16(const char *key, const float *x, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &x[i], 4);
    if ((u & 0xffffu) && (u & 0x7fffffffu) <= 0x7f800000u)
      return loom_err("internal error: %s element %zu = %.9g is not a bf16 value although "
                      "training.param_dtype=bf16 stores bf16; the checkpoint is not written",
                      key, i, (double)x[i]);
  }
  return 0;
}

static int add_piece(loom_st_writer *w, json_t *pieces, const loom_param *p, const section *s) {
  size_t b = p->offset > s->begin ? p->offset : s->begin;
  size_t e = p->offset + p->numel < s->end ? p->offset + p->numel : s->end;
  if (b >= e) return 0;
  bool whole = b == p->offset && e == p->offset + p->numel;
  char key[160];
  if (whole) snprintf(key, sizeof key, "%s%s", s->prefix, p->name);
  else snprintf(key, sizeof key, "%s%s@%zu", s->prefix, p->name, b - p->offset);
  int64_t shape[2] = {p->shape[0], p->shape[1]}, flat = (int64_t)(e - b);
  int nd = whole ? p->ndim : 1;
  const int64_t *shp = whole ? shape : &flat;
  int rc;
  if (s->base16)
    rc = loom_st_writer_add(w, key, LOOM_DT_BF16, nd, shp, s->base16 + (b - s->begin));
  else if (s->bf16)
    rc = check_bf16(key, s->base + (b - s->begin), e - b) ||
         loom_st_writer_add_bf16_from_f32(w, key, nd, shp, s->base + (b - s->begin));
  else
    rc = loom_st_writer_add(w, key, LOOM_DT_F32, nd, shp, s->base + (b - s->begin));
  if (!rc && (p->split_dim >= 0 || !whole))
    json_object_set_new(pieces, key,
                        json_pack("{s:s, s:[i,i], s:[i,i], s:i, s:i, s:I}", "tensor", p->name,
                                  "gshape", p->gshape[0], p->gshape[1], "lshape", p->shape[0],
                                  p->shape[1], "split_dim", p->split_dim, "split_start",
                                  p->split_start, "begin", (json_int_t)(b - p->offset)));
  return rc;
}

static int write_sections(const char *path, const loom_param_layout *lay, const section *secs,
                          int nsec, long step) {
  loom_st_writer *w = loom_st_writer_create();
  json_t *pieces = json_object();
  char buf[64];
  snprintf(buf, sizeof buf, "%ld", step);
  loom_st_writer_set_metadata(w, "format", "loom");
  loom_st_writer_set_metadata(w, "step", buf);
  int rc = 0;
  for (int k = 0; k < nsec && !rc; k++)
    for (int i = 0; i < lay->count && !rc; i++) rc = add_piece(w, pieces, &lay->params[i], &secs[k]);
  if (!rc && json_object_size(pieces)) {
    char *text = json_dumps(pieces, JSON_COMPACT | JSON_SORT_KEYS);
    rc = loom_st_writer_set_metadata(w, "loom.pieces", text);
    free(text);
  }
  if (!rc) rc = loom_st_writer_write(w, path);
  json_decref(pieces);
  loom_st_writer_free(w);
  return rc;
}

static char *state_json(const loom_train_state *ts, const loom_mesh *m, int zero) {
  json_t *rng = json_array();
  for (int i = 0; i < 4; i++) {
    char hex[32];
    snprintf(hex, sizeof hex, "%016" PRIx64, ts->rng.s[i]);
    json_array_append_new(rng, json_string(hex));
  }
  char hash[32];
  snprintf(hash, sizeof hash, "%016" PRIx64, ts->config_hash);
  json_t *o = json_pack("{s:I, s:o, s:{s:I, s:I, s:I}, s:s, s:I, s:f, s:{s:i, s:i, s:i, s:i, s:i, s:i}}",
                        "step", (json_int_t)ts->step, "rng", rng, "loader", "epoch",
                        (json_int_t)ts->loader.epoch, "index", (json_int_t)ts->loader.index,
                        "batch_windows", (json_int_t)ts->loader_batch_windows, "config_hash",
                        hash, "tokens_seen", (json_int_t)ts->tokens_seen, "elapsed", ts->elapsed,
                        "layout", "pp", m->pp, "dp", m->dp, "cp", m->cp, "sp", m->sp, "tp", m->tp,
                        "zero", zero);
  json_object_set_new(o, "skipped_bad_samples", json_integer((json_int_t)ts->skipped_bad));
  char *text = json_dumps(o, JSON_INDENT(2));
  json_decref(o);
  return text;
}

/* The parameters of one module of the model as this rank holds them: the text decoder (or
 * the whole model), or a vision-language model's encoder with its own mesh and ZeRO stage.
 * Module files are named "<kind>-r<rank>" ("vision-<kind>-r<rank>" for the encoder); a
 * single-process model without modules writes "<kind>.safetensors". */
typedef struct {
  const char *name;           /* "" (text / whole model) or "vision-" */
  loom_decoder *d;
  loom_adamw_state *opt;
  loom_grad_sync *gs;
  const loom_mesh *m;
  int zero;
  int ep;                     /* expert parallelism: ep consecutive dp ranks hold different
                                 experts, written by the first group (dp rank < ep); else 1 */
} module;

static int modules_of(loom_executor *ex, const loom_mesh *m, module out[2]) {
  loom_grad_sync *gs = loom_exec_grad_sync(ex); /* NULL on ranks of the encoder only */
  loom_decoder *d = loom_exec_decoder(ex);
  out[0] = (module){"", d, loom_exec_optimizer(ex), gs, m, gs ? loom_grad_sync_zero(gs) : 0,
                    d && d->shard.ep > 1 ? d->shard.ep : 1};
  loom_vmod *vm = loom_exec_vision(ex);
  if (!vm) return 1;
  out[1] = (module){"vision-", loom_vmod_decoder(vm), loom_vmod_optimizer(vm),
                    loom_vmod_grad_sync(vm), loom_vmod_mesh(vm), loom_vmod_get_plan(vm)->zero, 1};
  return 2;
}

static char *file_name(const char *dir, const char *module, const char *kind, bool indexed,
                       int rank) {
  if (!indexed) return loom_sprintf("%s/%s.safetensors", dir, kind);
  return loom_sprintf("%s/%s%s-r%05d.safetensors", dir, module, kind, rank);
}

/* Ranks that write parameters: one replica of each (pp, tp) position. */
static bool writes_params(const loom_mesh *m) {
  return m->dp_rank == 0 && m->cp_rank == 0 && m->sp_rank == 0;
}

static void list_files(const module *mo, bool grads, json_t *model, json_t *opt, json_t *gr) {
  const loom_mesh *m = mo->m;
  for (int r = 0; r < m->world; r++) {
    /* replica index (dp, cp, sp) of mesh rank r; 0: the replica that writes parameters */
    int replica = r / m->tp % (m->sp * m->cp * m->dp);
    /* expert parallelism: the first ep dp ranks (sp, cp rank 0) also write their experts */
    int split = m->sp * m->cp;
    bool experts = mo->ep > 1 && replica % split == 0 && replica / split < mo->ep;
    char name[96];
    if (replica == 0 || mo->zero == 3 || experts) {
      snprintf(name, sizeof name, "%smodel-r%05d.safetensors", mo->name, r);
      json_array_append_new(model, json_string(name));
    }
    if (mo->zero > 0 || replica == 0 || experts) {
      snprintf(name, sizeof name, "%soptimizer-r%05d.safetensors", mo->name, r);
      json_array_append_new(opt, json_string(name));
      snprintf(name, sizeof name, "%sgradients-r%05d.safetensors", mo->name, r);
      if (grads) json_array_append_new(gr, json_string(name));
    }
  }
}

static int write_index(const char *dir, const module *mods, int nmod, bool grads) {
  json_t *model = json_array(), *opt = json_array(), *gr = json_array();
  for (int i = 0; i < nmod; i++) list_files(&mods[i], grads, model, opt, gr);
  const loom_mesh *m = mods[0].m;
  json_t *o = json_pack("{s:s, s:i, s:i, s:{s:i, s:i, s:i, s:i, s:i, s:i}, s:o, s:o, s:o}",
                        "format", "loom-sharded", "version", 1, "world", m->world, "mesh", "pp",
                        m->pp, "dp", m->dp, "cp", m->cp, "sp", m->sp, "tp", m->tp, "zero",
                        mods[0].zero,
                        "model_files", model, "optimizer_files", opt, "gradient_files", gr);
  if (nmod > 1)
    json_object_set_new(o, "vision_mesh",
                        json_pack("{s:i, s:i, s:i, s:i}", "dp", mods[1].m->dp, "sp",
                                  mods[1].m->sp, "tp", mods[1].m->tp, "zero", mods[1].zero));
  char *text = json_dumps(o, JSON_INDENT(2));
  char *path = loom_sprintf("%s/index.json", dir);
  int rc = loom_write_file_atomic(path, text, strlen(text));
  free(path);
  free(text);
  json_decref(o);
  return rc;
}

/* Write one kind of file of this rank from its sections (none: no file). */
static int write_kind(const char *tmp, const module *mo, bool indexed, const char *kind,
                      const section *secs, int n, long step) {
  if (n == 0) return 0;
  char *p = file_name(tmp, mo->name, kind, indexed, mo->m->rank);
  int rc = write_sections(p, &mo->d->layout, secs, n, step);
  free(p);
  return rc;
}

/* This rank's files: the parameters (one replica's, or under ZeRO-3 every replica's owned
 * shard), the AdamW moments and the gradients of what its optimizer owns (one replica's, or
 * every replica's under ZeRO), and with expert parallelism its experts from the first rank of
 * their expert-data-parallel group (the moments after the owned range's, layout.c). */
static int save_module_files(const char *tmp, const module *mo, bool indexed, long step,
                             bool save_gradients) {
  const loom_mesh *m = mo->m;
  if (!m->member) return 0;
  loom_decoder *d = mo->d;
  size_t b, e, xb, xe, ob, oe;
  loom_grad_sync_owned(mo->gs, &b, &e);
  loom_grad_sync_experts(mo->gs, &xb, &xe);
  loom_grad_sync_experts_owned(mo->gs, &ob, &oe); /* the experts' moments this rank keeps */
  bool experts = loom_grad_sync_writes_experts(mo->gs), dense = mo->zero > 0 || writes_params(m);
  bool xstate = ob < oe && (mo->zero > 0 || experts); /* (under ZeRO every rank its share) */
  size_t own = e - b; /* the expert region's moments start here */
  const loom_adamw_state *o = mo->opt;
  section sec[4];
  int n = 0, rc = 0;
  if (mo->zero == 3) /* every replica writes the parameter shard it owns */
    sec[n++] = (section){"", loom_grad_sync_owned_params(mo->gs), b, e, NULL, d->param_bf16};
  else if (writes_params(m))
    sec[n++] = (section){"", d->params, 0, xb, NULL, d->param_bf16};
  if (experts) sec[n++] = (section){"", d->params + xb, xb, xe, NULL, d->param_bf16};
  rc = write_kind(tmp, mo, indexed, "model", sec, n, step);
  n = 0;
  if (dense) {
    sec[n++] = (section){"exp_avg.", o->m, b, e, o->m16, false};
    sec[n++] = (section){"exp_avg_sq.", o->v, b, e, o->v16, false};
  }
  if (xstate) {
    sec[n++] = (section){"exp_avg.", o->m ? o->m + own : NULL, ob, oe,
                         o->m16 ? o->m16 + own : NULL, false};
    sec[n++] = (section){"exp_avg_sq.", o->v ? o->v + own : NULL, ob, oe,
                         o->v16 ? o->v16 + own : NULL, false};
  }
  if (!rc) rc = write_kind(tmp, mo, indexed, "optimizer", sec, n, step);
  n = 0;
  if (dense) /* the last step's reduced (and clipped) gradients of the owned range */
    sec[n++] = (section){"", loom_grad_sync_owned_grads(mo->gs), b, e, NULL, d->param_bf16};
  if (xstate)
    sec[n++] = (section){"", loom_grad_sync_expert_grads(mo->gs), ob, oe, NULL, d->param_bf16};
  if (!rc && save_gradients) rc = write_kind(tmp, mo, indexed, "gradients", sec, n, step);
  return rc;
}

/* ---- the completion marker ------------------------------------------------------------------ */

/* COMPLETE, written last into the temporary directory (after every rank's files):
 *   loom-checkpoint 1
 *   step <N>
 *   file <bytes> <name>      one line per file of the checkpoint
 * A checkpoint is complete when the marker parses and every file it lists has that size. */
static int write_marker(const char *tmp, long step) {
  DIR *d = opendir(tmp);
  if (!d) return loom_err("cannot read '%s': %s", tmp, strerror(errno));
  size_t cap = 4096, n = 0;
  char *text = loom_malloc(cap);
  n += (size_t)snprintf(text, cap, "loom-checkpoint 1\nstep %ld\n", step);
  struct dirent *e;
  int rc = 0;
  while ((e = readdir(d)) && !rc) {
    if (e->d_name[0] == '.' || !strcmp(e->d_name, LOOM_CKPT_MARKER)) continue;
    char *p = loom_sprintf("%s/%s", tmp, e->d_name);
    struct stat st;
    if (stat(p, &st) != 0) rc = loom_err("cannot stat '%s': %s", p, strerror(errno));
    free(p);
    if (rc || !S_ISREG(st.st_mode)) continue;
    size_t need = strlen(e->d_name) + 48;
    if (n + need >= cap) {
      cap = 2 * cap + need;
      text = loom_realloc(text, cap, 1);
    }
    n += (size_t)snprintf(text + n, cap - n, "file %lld %s\n", (long long)st.st_size, e->d_name);
  }
  closedir(d);
  char *path = loom_sprintf("%s/" LOOM_CKPT_MARKER, tmp);
  if (!rc) rc = loom_write_file_atomic(path, text, n);
  if (!rc) rc = loom_fsync_path(tmp);
  free(path);
  free(text);
  return rc;
}

int loom_ckpt_check_complete(const char *dir, long *step) {
  char *path = loom_sprintf("%s/" LOOM_CKPT_MARKER, dir);
  FILE *f = fopen(path, "r");
  if (!f) {
    int e = errno;
    free(path);
    if (e == ENOENT)
      return loom_err("checkpoint '%s' is incomplete: it has no " LOOM_CKPT_MARKER " marker (its "
                      "save was interrupted, or a loom without markers wrote it)", dir);
    return loom_err("checkpoint '%s': cannot read " LOOM_CKPT_MARKER ": %s", dir, strerror(e));
  }
  char line[1200];
  int version = 0, files = 0, rc = 0;
  *step = -1;
  if (!fgets(line, sizeof line, f) || sscanf(line, "loom-checkpoint %d", &version) != 1 ||
      version != 1 || !fgets(line, sizeof line, f) || sscanf(line, "step %ld", step) != 1)
    rc = loom_err("%s: not a loom checkpoint marker (expected 'loom-checkpoint 1' and "
                  "'step N'); the checkpoint is damaged", path);
  while (!rc && fgets(line, sizeof line, f)) {
    long long size;
    char name[1024];
    if (sscanf(line, "file %lld %1023[^\n]", &size, &name[0]) != 2) {
      rc = loom_err("%s: malformed line '%.80s'; the checkpoint is damaged", path, line);
      break;
    }
    char *p = loom_sprintf("%s/%s", dir, name);
    struct stat st;
    if (stat(p, &st) != 0)
      rc = loom_err("checkpoint '%s' is damaged: '%s' is missing (" LOOM_CKPT_MARKER
                    " lists it)", dir, name);
    else if ((long long)st.st_size != size)
      rc = loom_err("checkpoint '%s' is damaged: '%s' has %lld bytes, " LOOM_CKPT_MARKER
                    " says %lld", dir, name, (long long)st.st_size, size);
    free(p);
    files++;
  }
  if (!rc && files == 0) rc = loom_err("%s lists no files; the checkpoint is damaged", path);
  fclose(f);
  free(path);
  return rc;
}

int loom_ckpt_save(const char *dir, loom_executor *ex, const loom_mesh *m, const loom_comm *job,
                   const loom_train_state *ts, const loom_config *cfg) {
  char tmp[LOOM_STR_MAX + 64];
  snprintf(tmp, sizeof tmp, "%s.tmp", dir); /* same name on every rank */
  int rc = 0;
  if (job->rank == 0) {
    loom_rm_rf(tmp);
    rc = loom_mkdir_p(tmp);
  }
  if (loom_comm_any_failed(job, rc)) return loom_err_prefix("saving checkpoint '%s': ", dir);
  module mods[2];
  int nmod = modules_of(ex, m, mods);
  bool indexed = m->world > 1 || nmod > 1;
  for (int i = 0; i < nmod && !rc; i++)
    rc = save_module_files(tmp, &mods[i], indexed, ts->step, cfg->checkpoint.save_gradients);
  if (!rc && job->rank == 0) {
    char *p = loom_sprintf("%s/trainer_state.json", tmp);
    char *text = state_json(ts, m, (int)cfg->parallel.zero);
    rc = loom_write_file_atomic(p, text, strlen(text));
    free(text);
    free(p);
    p = loom_sprintf("%s/config.yaml", tmp);
    if (!rc) rc = loom_config_save(cfg, p);
    free(p);
    if (!rc && indexed) rc = write_index(tmp, mods, nmod, cfg->checkpoint.save_gradients);
  }
  loom_fault_point("save", ts->step); /* this rank's files written, the checkpoint incomplete */
  loom_failure f;
  if (loom_comm_agree(job, rc, &f)) { /* every rank reports the first failing rank's error */
    if (job->rank == 0) loom_rm_rf(tmp);
    if (f.rank == job->rank || f.all_same)
      return loom_err("saving checkpoint '%s': %s", dir, f.msg);
    return loom_err("saving checkpoint '%s': rank %d: %s", dir, f.rank, f.msg);
  }
  if (job->rank == 0) { /* every rank's files are written: mark complete, then publish */
    rc = write_marker(tmp, ts->step);
    if (!rc) loom_fault_point("marker", ts->step);
    if (!rc) rc = loom_rename_dir_atomic(tmp, dir);
    char *parent = loom_strdup(dir);
    if (!rc) rc = loom_fsync_path(dirname(parent)); /* the rename is durable */
    free(parent);
    if (rc && loom_is_dir(tmp)) loom_rm_rf(tmp);
  }
  if (loom_comm_any_failed(job, rc))
    return rc ? loom_err_prefix("saving checkpoint '%s': ", dir)
              : loom_err("saving checkpoint '%s': rank 0 failed to complete it", dir);
  return 0;
}

/* ---- reading -------------------------------------------------------------------------------- */

typedef struct {
  int n;
  loom_st_file **f;
  json_t **pieces; /* per file: the loom.pieces object or NULL */
} file_set;

static void close_set(file_set *fs) {
  for (int i = 0; i < fs->n; i++) {
    loom_st_close(fs->f[i]);
    if (fs->pieces[i]) json_decref(fs->pieces[i]);
  }
  free(fs->f);
  free(fs->pieces);
  memset(fs, 0, sizeof *fs);
}

static int add_file(file_set *fs, const char *path) {
  fs->f = loom_realloc(fs->f, (size_t)(fs->n + 1), sizeof *fs->f);
  fs->pieces = loom_realloc(fs->pieces, (size_t)(fs->n + 1), sizeof *fs->pieces);
  if (loom_st_open(&fs->f[fs->n], path)) return LOOM_ERR;
  const char *meta = loom_st_metadata(fs->f[fs->n], "loom.pieces");
  fs->pieces[fs->n] = meta ? json_loads(meta, 0, NULL) : NULL;
  if (meta && !fs->pieces[fs->n]) {
    loom_st_close(fs->f[fs->n]);
    return loom_err("%s: metadata 'loom.pieces' is not valid JSON; the checkpoint is damaged",
                    path);
  }
  if (fs->pieces[fs->n] && loom_ckpt_pieces_check(fs->pieces[fs->n], path)) { /* checkpoint_meta.c */
    json_decref(fs->pieces[fs->n]);
    loom_st_close(fs->f[fs->n]);
    return LOOM_ERR;
  }
  fs->n++;
  return 0;
}

/* kind: "model", "optimizer" or "gradients" */
static int open_set(const char *dir, const char *kind, file_set *fs) {
  memset(fs, 0, sizeof *fs);
  char *index = loom_sprintf("%s/index.json", dir);
  int rc = 0;
  if (loom_path_exists(index)) {
    char *text, **names = NULL;
    size_t len;
    int n = 0;
    rc = loom_read_file(index, &text, &len);
    if (!rc) {
      rc = loom_ckpt_index_parse(text, len, index, kind, &names, &n); /* checkpoint_meta.c */
      free(text);
    }
    for (int i = 0; i < n && !rc; i++) {
      char *p = loom_sprintf("%s/%s", dir, names[i]);
      rc = add_file(fs, p);
      free(p);
    }
    loom_ckpt_names_free(names, n);
  } else {
    char *p = loom_sprintf("%s/%s.safetensors", dir, kind);
    rc = add_file(fs, p);
    free(p);
  }
  free(index);
  if (rc) close_set(fs);
  return rc;
}

typedef struct {
  const char *tensor;     /* global name */
  int gshape[2];          /* the global tensor's shape ([n, 0] for a vector) */
  int lshape[2], split_dim, split_start;
  size_t begin;
} piece;

/* Describe entry i of file k under prefix; false when it belongs to another prefix. */
static bool describe(const file_set *fs, int k, int i, const char *prefix, piece *pc) {
  const char *key = loom_st_name(fs->f[k], i);
  size_t pl = strlen(prefix);
  if (strncmp(key, prefix, pl)) return false;
  json_t *d = fs->pieces[k] ? json_object_get(fs->pieces[k], key) : NULL;
  if (d) {
    json_t *ls = json_object_get(d, "lshape");
    pc->tensor = json_string_value(json_object_get(d, "tensor"));
    json_t *gs = json_object_get(d, "gshape");
    pc->gshape[0] = (int)json_integer_value(json_array_get(gs, 0));
    pc->gshape[1] = (int)json_integer_value(json_array_get(gs, 1));
    pc->lshape[0] = (int)json_integer_value(json_array_get(ls, 0));
    pc->lshape[1] = (int)json_integer_value(json_array_get(ls, 1));
    pc->split_dim = (int)json_integer_value(json_object_get(d, "split_dim"));
    pc->split_start = (int)json_integer_value(json_object_get(d, "split_start"));
    pc->begin = (size_t)json_integer_value(json_object_get(d, "begin"));
    return pc->tensor != NULL;
  }
  const int64_t *sh = loom_st_shape(fs->f[k], i);
  pc->tensor = key + pl;
  pc->lshape[0] = (int)sh[0];
  pc->lshape[1] = loom_st_ndim(fs->f[k], i) > 1 ? (int)sh[1] : 0;
  pc->gshape[0] = pc->lshape[0];
  pc->gshape[1] = pc->lshape[1];
  pc->split_dim = -1;
  pc->split_start = 0;
  pc->begin = 0;
  return true;
}

/* Copy the part of piece (values src) that falls into target tensor p's elements [tb, te)
 * into dst (indexed from tb); mark them in `seen`. */
static void map_piece(const piece *pc, const float *src, size_t n, const loom_param *p,
                      size_t tb, size_t te, float *dst, unsigned char *seen) {
  long sc_cols = pc->lshape[1] > 0 ? pc->lshape[1] : 1;
  long t_rows = p->shape[0], t_cols = p->ndim > 1 ? p->shape[1] : 1;
  long srow0 = pc->split_dim == 0 ? pc->split_start : 0, scol0 = pc->split_dim == 1 ? pc->split_start : 0;
  long trow0 = p->split_dim == 0 ? p->split_start : 0, tcol0 = p->split_dim == 1 ? p->split_start : 0;
  for (size_t k = 0; k < n; k++) {
    size_t i = pc->begin + k;
    long tr = (long)(i / (size_t)sc_cols) + srow0 - trow0;
    long tc = (long)(i % (size_t)sc_cols) + scol0 - tcol0;
    if (tr < 0 || tr >= t_rows || tc < 0 || tc >= t_cols) continue;
    size_t j = (size_t)(tr * t_cols + tc);
    if (j < tb || j >= te) continue;
    dst[j - tb] = src[k];
    seen[(j - tb) >> 3] |= (unsigned char)(1u << ((j - tb) & 7));
  }
}

static bool is_vocab(const char *name) {
  return !strcmp(name, "embed.weight") || !strcmp(name, "lm_head.weight");
}

/* Fill dst (flat indices [rb, re) of d's layout, dst[i - rb]) from the pieces under prefix. */
static int assemble(const file_set *fs, const char *prefix, const loom_decoder *d, float *dst,
                    size_t rb, size_t re, const char *dir) {
  for (int t = 0; t < d->layout.count; t++) {
    const loom_param *p = &d->layout.params[t];
    size_t b = p->offset > rb ? p->offset : rb, e = p->offset + p->numel < re ? p->offset + p->numel : re;
    if (b >= e) continue;
    size_t tb = b - p->offset, te = e - p->offset, n = te - tb;
    float *out = dst + (b - rb);
    memset(out, 0, n * sizeof(float));
    unsigned char *seen = loom_calloc(n / 8 + 1, 1);
    for (int k = 0; k < fs->n; k++)
      for (int i = 0; i < loom_st_count(fs->f[k]); i++) {
        piece pc;
        if (!describe(fs, k, i, prefix, &pc) || strcmp(pc.tensor, p->name)) continue;
        size_t cnt = (size_t)loom_st_numel(fs->f[k], i);
        float *src = loom_malloc_for((cnt + 1) * sizeof(float), "one checkpoint piece");
        int rc = loom_st_read_f32(fs->f[k], loom_st_name(fs->f[k], i), src, cnt);
        if (!rc) map_piece(&pc, src, cnt, p, tb, te, out, seen);
        free(src);
        if (rc) {
          free(seen);
          return LOOM_ERR;
        }
      }
    /* every element must have come from the checkpoint, except vocabulary padding rows */
    long cols = p->ndim > 1 ? p->shape[1] : 1;
    for (size_t j = 0; j < n; j++) {
      if (seen[j >> 3] & (1u << (j & 7))) continue;
      long grow = (long)((tb + j) / (size_t)cols) + (p->split_dim == 0 ? p->split_start : 0);
      if (is_vocab(p->name) && grow >= d->spec.vocab_size) continue;
      free(seen);
      return loom_err("checkpoint '%s' has no value for element %zu of %s%s (shape [%d, %d] on "
                      "this rank); it was written for a different model (check model.* in the "
                      "config)", dir, tb + j, prefix, p->name, p->shape[0], p->shape[1]);
    }
    free(seen);
  }
  return 0;
}

static void shape_text(char *buf, size_t n, const int *shape) {
  if (shape[1] > 0) snprintf(buf, n, "[%d, %d]", shape[0], shape[1]);
  else snprintf(buf, n, "[%d]", shape[0]);
}

/* Every tensor of the checkpoint's model files is a tensor of lay with the same global
 * shape, and every tensor of lay is in the checkpoint. */
static int check_tensors(const char *dir, const file_set *fs, const loom_param_layout *lay) {
  unsigned char *seen = loom_calloc((size_t)lay->count + 1, 1);
  int rc = 0;
  for (int k = 0; k < fs->n && !rc; k++)
    for (int i = 0; i < loom_st_count(fs->f[k]) && !rc; i++) {
      piece pc;
      if (!describe(fs, k, i, "", &pc)) {
        rc = loom_err("checkpoint '%s': entry '%s' has no description in loom.pieces; the "
                      "checkpoint is damaged", dir, loom_st_name(fs->f[k], i));
        break;
      }
      const loom_param *p = loom_param_find(lay, pc.tensor);
      char want[48], got[48];
      shape_text(got, sizeof got, pc.gshape);
      if (!p) {
        rc = loom_err("checkpoint '%s' does not fit the model: it holds tensor %s (shape %s), "
                      "which the model of this config does not have (model.* differs from the "
                      "checkpoint's config.yaml: e.g. fewer layers)", dir, pc.tensor, got);
        break;
      }
      int expect[2] = {p->gshape[0], p->ndim > 1 ? p->gshape[1] : 0};
      shape_text(want, sizeof want, expect);
      if (expect[0] != pc.gshape[0] || expect[1] != pc.gshape[1]) {
        rc = loom_err("checkpoint '%s' does not fit the model: tensor %s: expected shape %s "
                      "(from the config's model.*), found %s in the checkpoint", dir, pc.tensor,
                      want, got);
        break;
      }
      seen[p - lay->params] = 1;
    }
  for (int t = 0; t < lay->count && !rc; t++) {
    if (seen[t]) continue;
    const loom_param *p = &lay->params[t];
    int expect[2] = {p->gshape[0], p->ndim > 1 ? p->gshape[1] : 0};
    char want[48];
    shape_text(want, sizeof want, expect);
    rc = loom_err("checkpoint '%s' does not fit the model: tensor %s: expected shape %s (from "
                  "the config's model.*), found no such tensor in the checkpoint", dir, p->name,
                  want);
  }
  free(seen);
  return rc;
}

int loom_ckpt_validate(const char *dir, const loom_model_spec *spec) {
  long marked;
  if (loom_ckpt_check_complete(dir, &marked)) return LOOM_ERR;
  loom_train_state ts;
  char *p = loom_sprintf("%s/trainer_state.json", dir);
  int rc = loom_ckpt_state_read(p, &ts);
  if (!rc && ts.step != marked)
    rc = loom_err("%s: step %ld, but " LOOM_CKPT_MARKER " says step %ld; the checkpoint is "
                  "damaged", p, ts.step, marked);
  free(p);
  if (rc) return rc;
  loom_param_layout lay;
  if (loom_param_layout_build(&lay, spec)) return LOOM_ERR;
  file_set fs;
  rc = open_set(dir, "model", &fs);
  if (!rc) {
    rc = check_tensors(dir, &fs, &lay);
    close_set(&fs);
  }
  loom_param_layout_free(&lay);
  return rc;
}

int loom_ckpt_load_params(const char *dir, loom_decoder *d) {
  if (!loom_is_dir(dir))
    return loom_err("checkpoint '%s' is not a directory (expected runs/<id>/checkpoint_<step>)",
                    dir);
  if (loom_ckpt_check_readable(dir)) return LOOM_ERR;
  file_set fs;
  if (open_set(dir, "model", &fs)) return LOOM_ERR;
  int rc = assemble(&fs, "", d, d->params, 0, d->layout.total, dir);
  close_set(&fs);
  if (!rc) loom_decoder_params_updated(d);
  return rc;
}

static int load_module(const char *dir, const module *mo) {
  if (!mo->m->member) return 0;
  size_t b, e, xb, xe;
  loom_grad_sync_owned(mo->gs, &b, &e);
  loom_grad_sync_experts_owned(mo->gs, &xb, &xe);
  int rc = loom_ckpt_load_params(dir, mo->d);
  file_set fs;
  if (!rc && !(rc = open_set(dir, "optimizer", &fs))) {
    /* moments read as fp32 (F32 or BF16 files), stored in the run's optim_dtype */
    size_t n = mo->opt->n;
    float *mv = mo->opt->m16 ? loom_alloc_for(2 * (n + 1) * sizeof(float),
                                              "fp32 copy of the AdamW moments being loaded")
                              : mo->opt->m;
    /* the owned range, then (expert parallelism) this rank's experts */
    size_t own = e - b;
    rc = assemble(&fs, "exp_avg.", mo->d, mv, b, e, dir);
    if (!rc) rc = assemble(&fs, "exp_avg_sq.", mo->d, mv + n, b, e, dir);
    if (!rc) rc = assemble(&fs, "exp_avg.", mo->d, mv + own, xb, xe, dir);
    if (!rc) rc = assemble(&fs, "exp_avg_sq.", mo->d, mv + n + own, xb, xe, dir);
    if (!rc && mo->opt->m16) loom_adamw_state_set(mo->opt, mv);
    if (mo->opt->m16) loom_free(mv);
    close_set(&fs);
  }
  return rc;
}

int loom_ckpt_load(const char *dir, loom_executor *ex, const loom_mesh *m, loom_train_state *ts) {
  module mods[2];
  int nmod = modules_of(ex, m, mods);
  long marked;
  int rc = loom_ckpt_check_complete(dir, &marked); /* never a partly written checkpoint */
  for (int i = 0; i < nmod && !rc; i++) rc = load_module(dir, &mods[i]);
  if (!rc) {
    char *p = loom_sprintf("%s/trainer_state.json", dir);
    rc = loom_ckpt_state_read(p, ts); /* checkpoint_meta.c */
    free(p);
  }
  for (int i = 0; i < nmod && !rc; i++) mods[i].opt->step = ts->step;
  return rc;
}
