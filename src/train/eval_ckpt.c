/* `loom eval`'s work on every rank: the meshes of the config's layout (the text decoder's,
 * and with a vision encoder on ranks of its own, the job's), the executor, the checkpoint's
 * parameters loaded into this rank's shard (pieces reshard into any layout), then the
 * evaluator's forward-only pass over the validation batches. Nothing is written. */
#include <stdio.h>
#include <string.h>

#include "loom/vision_module.h"
#include "loom/checkpoint.h"
#include "loom/exec.h"
#include "loom/mesh.h"
#include "loom/eval_ckpt.h"

static int build_meshes(const loom_config *cfg, const loom_model_spec *spec, loom_mesh *job,
                        loom_mesh *text) {
  const loom_config_parallel *p = &cfg->parallel;
  int world = loom_dist_world();
  if (loom_mesh_create_on(job, 1, world, 1, 1, 1, p->timeout_s, 0)) return LOOM_ERR;
  bool separate = spec->vision.arch != LOOM_VISION_NONE &&
                  !strcmp(cfg->vision_parallel.placement, "separate");
  if (!separate) return loom_mesh_create(text, p, p->timeout_s);
  loom_vmod_plan plan;
  if (loom_vmod_resolve(cfg, spec, world, &plan)) return LOOM_ERR;
  return loom_mesh_create_on(text, (int)p->pp, (int)p->dp, (int)p->cp, (int)p->sp, (int)p->tp, p->timeout_s, 0);
}

static int load(loom_executor *ex, const char *dir) {
  loom_decoder *d = loom_exec_decoder(ex);
  loom_vmod *vm = loom_exec_vision(ex);
  if (d && loom_ckpt_load_params(dir, d)) return LOOM_ERR;
  if (vm && loom_vmod_decoder(vm) && loom_ckpt_load_params(dir, loom_vmod_decoder(vm)))
    return LOOM_ERR;
  if (d) loom_grad_sync_params_loaded(loom_exec_grad_sync(ex));
  if (vm) loom_vmod_params_loaded(vm);
  return 0;
}

int loom_eval_checkpoint(const loom_config *cfg, const char *dir, loom_eval_loss_result *r,
                         char *describe, size_t cap) {
  const loom_config_training *t = &cfg->training;
  loom_model_spec spec;
  loom_mesh job, text;
  memset(&job, 0, sizeof job);
  memset(&text, 0, sizeof text);
  loom_executor *ex = NULL;
  loom_evaluator *ev = NULL;
  int rc = loom_model_spec_from_config(&spec, &cfg->model);
  if (!rc) rc = build_meshes(cfg, &spec, &job, &text);
  if (!rc) rc = loom_mesh_check_model(&cfg->parallel, &spec, (int)t->micro_batch_size,
                                      (int)t->seq_len, text.world);
  if (!rc) rc = loom_exec_create(&ex, cfg, &spec, &text);
  if (!rc) rc = loom_evaluator_open(&ev, cfg, &spec, ex, &text);
  if (!rc && !ev)
    rc = loom_err("no validation data: give --data PATH (token shards, or a vqa dataset), "
                  "data.val_fraction=F (a held-out tail of data.train_shards) or, for vqa, a "
                  "prepared data.vqa_path with a val split");
  if (!rc) rc = load(ex, dir);
  if (job.world > 0 && loom_comm_any_failed(&job.world_comm, rc) && !rc)
    rc = loom_err("another rank failed (see its message)");
  if (!rc) {
    snprintf(describe, cap, "%s", loom_evaluator_describe(ev));
    rc = loom_evaluator_run(ev, &job.world_comm, r);
  }
  loom_evaluator_free(ev);
  loom_exec_free(ex);
  loom_mesh_free(&text);
  loom_mesh_free(&job);
  return rc;
}
