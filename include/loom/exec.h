/* The executor: runs one optimizer step of the schedule IR on this rank — forward/backward of
 * its pipeline chunks on real tensors, activations and their gradients by non-blocking
 * point-to-point messages, gradient reduction and the optimizer step — for any mesh. */
#ifndef LOOM_EXEC_H
#define LOOM_EXEC_H
#include "loom/config.h"
#include "loom/decoder.h"
#include "loom/grad_sync.h"
#include "loom/mesh.h"
#include "loom/sched.h"
#include "loom/optim.h"

typedef struct loom_executor loom_executor;

/* Build this rank's shard (tp slice, sequence parallelism, pipeline chunks from
 * parallel.stage_layers or an even split), the schedule (generated, or parallel.schedule_file
 * validated), the decoder with as many activation slots as the schedule keeps in flight, the
 * gradient synchroniser and the optimizer state. Micro-batches per step = training.grad_accum. */
int loom_exec_create(loom_executor **out, const loom_config *cfg, const loom_model_spec *spec,
                     loom_mesh *mesh);
void loom_exec_free(loom_executor *ex);
loom_decoder *loom_exec_decoder(loom_executor *ex);
loom_adamw_state *loom_exec_optimizer(loom_executor *ex);
loom_grad_sync *loom_exec_grad_sync(loom_executor *ex);
const loom_schedule *loom_exec_schedule(const loom_executor *ex);
/* Split of the layers into pp*vpp chunks: first[v] for virtual stage v, first[K] = layers. */
int loom_exec_stage_split(const loom_config_parallel *p, int layers, int *first);
/* One optimizer step over tokens/targets (A, B, T) of this data-parallel rank (identical on
 * its tp/sp/pp peers). Fills loss (global token mean over every rank), grad norm, lr. */
void loom_exec_step(loom_executor *ex, const int32_t *tokens, const int32_t *targets,
                    loom_step_result *r);
/* Forward only over one batch of tokens/targets (A, B, T) of this data-parallel rank, by
 * the forward-only schedule (src/sched/generate_eval.c): pipeline stages pass activations,
 * no backward, no gradient or optimizer state is touched (ZeRO-3 gathers and releases
 * parameters as in a forward). Every rank of the text decoder gets the sum of the token
 * losses over the whole batch (all dp/sp/tp/pp ranks) and the number of counted targets;
 * a rank of the vision encoder only (placement separate) encodes and gets zeros. For a
 * vision-language model, set the batch's micro-batches with loom_exec_set_vision_batches
 * first. */
void loom_exec_eval(loom_executor *ex, const int32_t *tokens, const int32_t *targets,
                    double *loss_sum, double *count);
/* Vision-language models: the micro-batches of the next step (A pointers; tokens and targets
 * passed to loom_exec_step must be their input_ids/targets). The first chunk runs the vision
 * encoder on each micro-batch's images and puts its tokens in place of the image pads; the
 * text model uses the batch's multimodal rotary positions. */
struct loom_vqa_batch_s;
/* The vision encoder's module of a vision-language model (src/exec/vision_module.h), or NULL. */
struct loom_vmod;
struct loom_vmod *loom_exec_vision(loom_executor *ex);
void loom_exec_set_vision_batches(loom_executor *ex, const void *const *vqa_batches);
/* Forward only (evaluation; pipeline-free layouts): the logits of one micro-batch, (B*T, vloc)
 * of this rank's vocabulary slice; vqa_batch for vision-language models, else NULL. */
const float *loom_exec_forward_only(loom_executor *ex, const int32_t *tokens, const void *vqa_batch);
/* Instruction trace hook: called before/after each instruction (for --trace). */
typedef void (*loom_exec_trace_fn)(void *ctx, const loom_instr *in, double t0, double t1);
void loom_exec_set_trace(loom_executor *ex, loom_exec_trace_fn fn, void *ctx);
#endif
