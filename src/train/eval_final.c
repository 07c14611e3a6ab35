/* Answer accuracy at the end of a vision-language run, whatever its layout. The evaluator
 * (eval_vqa.c) runs the training executor's forward on whole logits rows, which it can do
 * when the text decoder is only data parallel and the encoder collocated; for any other
 * layout (tensor, sequence or pipeline parallel, the encoder on ranks of its own) rank 0
 * loads the final checkpoint — pieces reshard into any layout — into a one-process model and
 * evaluates the val split alone while the other ranks wait. The run driver notes the
 * result in train.log. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loom/vision_module.h"
#include "loom/checkpoint.h"
#include "loom/eval.h"
#include "train/eval_final.h"

static bool direct(loom_executor *ex, const loom_mesh *m) {
  loom_vmod *vm = loom_exec_vision(ex);
  return m->world == m->dp && !(vm && loom_vmod_get_plan(vm)->separate);
}

int loom_eval_vqa_final(loom_executor *ex, const loom_config *cfg, const loom_model_spec *spec,
                        const loom_mesh *m, const loom_comm *job, const char *final_ckpt,
                        loom_eval_vqa_result *res) {
  memset(res, 0, sizeof *res);
  if (direct(ex, m)) return loom_eval_vqa_detail(ex, cfg, m, "val", 0, res);
  if (!final_ckpt)
    return loom_err("this layout is evaluated from the final checkpoint; set "
                    "checkpoint.save_final=true");
  loom_config one = *cfg; /* the same model and data on one process */
  loom_config defaults;
  loom_config_defaults(&defaults);
  one.parallel = defaults.parallel;
  one.parallel.timeout_s = cfg->parallel.timeout_s;
  one.vision_parallel = defaults.vision_parallel;
  one.training.grad_accum = 1;
  loom_mesh solo; /* world rank 0 alone; every rank takes part in creating it */
  if (loom_mesh_create_on(&solo, 1, 1, 1, 1, 1, cfg->parallel.timeout_s, 0)) return LOOM_ERR;
  loom_executor *single = NULL;
  int rc = loom_exec_create(&single, &one, spec, &solo);
  if (!rc && solo.member) {
    loom_vmod *vm = loom_exec_vision(single);
    rc = loom_ckpt_load_params(final_ckpt, loom_exec_decoder(single));
    if (!rc && vm) rc = loom_ckpt_load_params(final_ckpt, loom_vmod_decoder(vm));
    if (!rc) rc = loom_eval_vqa_detail(single, &one, &solo, "val", 0, res);
  }
  if (loom_comm_any_failed(job, rc) && !rc) rc = loom_err("rank 0 could not evaluate");
  loom_exec_free(single);
  loom_mesh_free(&solo);
  return rc;
}

void loom_eval_vqa_final_note(loom_executor *ex, const loom_config *cfg,
                              const loom_model_spec *spec, const loom_mesh *m,
                              const loom_comm *job, const char *run_dir, loom_progress *p,
                              loom_eval_vqa_result *res) {
  bool saved = cfg->checkpoint.save_final;
  char *final = saved ? loom_sprintf("%s/final_checkpoint", run_dir) : NULL;
  int rc = loom_eval_vqa_final(ex, cfg, spec, m, job, final, res);
  free(final);
  if (rc) {
    loom_progress_note(p, "no answer accuracy: %s", loom_errmsg());
    return;
  }
  char line[512];
  loom_eval_vqa_kinds_line(res, line, sizeof line);
  if (line[0]) loom_progress_note(p, "%s", line);
  char base[64] = "";
  if (res->baseline >= 0)
    snprintf(base, sizeof base, " (majority-answer baseline %.1f%%)", 100 * res->baseline);
  loom_progress_note(p, "answer accuracy on the val split: %.1f%% of %ld samples%s",
                     100 * res->accuracy, res->samples, base);
}
