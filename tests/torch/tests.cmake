# PyTorch cross-checks: loom_refdump runs loom's model on random weights and data, and
# check_refdump.py recomputes everything with an independent PyTorch implementation
# (Debian's python3-torch) and compares within the tolerances written in that script.
add_executable(loom_refdump ${CMAKE_SOURCE_DIR}/tests/torch/refdump.c)
target_link_libraries(loom_refdump PRIVATE loomlib)

set(LOOM_TORCH_DIR ${CMAKE_SOURCE_DIR}/tests/torch)
# name | overrides
set(LOOM_TORCH_CASES
  "torch_gpt2_fp32|model.preset= model.arch=gpt2 model.vocab_size=1000 model.hidden=96 model.heads=3 model.layers=2 model.max_seq=64 training.seq_len=33 training.micro_batch_size=2"
  "torch_gpt2_accum_recompute_fp32|model.preset= model.arch=gpt2 model.vocab_size=1000 model.hidden=64 model.heads=4 model.layers=2 model.max_seq=40 training.seq_len=17 training.micro_batch_size=3 training.grad_accum=2 training.activation_checkpointing=true training.lr_schedule=linear training.grad_clip=0.5"
  "torch_llama_gqa_untied_fp32|model.preset= model.arch=llama model.vocab_size=1000 model.hidden=96 model.heads=6 model.kv_heads=2 model.intermediate=200 model.layers=2 model.max_seq=64 model.qkv_bias=false model.tied_embeddings=false training.seq_len=33 training.micro_batch_size=2"
  "torch_qwen2_bias_tied_fp32|model.preset= model.arch=llama model.vocab_size=1000 model.hidden=96 model.heads=3 model.kv_heads=1 model.intermediate=160 model.layers=2 model.max_seq=64 model.qkv_bias=true model.tied_embeddings=true model.rope_theta=1000000 training.seq_len=33 training.micro_batch_size=2 training.grad_accum=2 training.activation_checkpointing=true"
  "torch_gpt2_bf16|model.preset= model.arch=gpt2 model.vocab_size=1000 model.hidden=96 model.heads=3 model.layers=2 model.max_seq=64 training.seq_len=33 training.micro_batch_size=2 training.dtype=bf16"
  "torch_gpt2_param_bf16_optim_fp32|model.preset= model.arch=gpt2 model.vocab_size=1000 model.hidden=96 model.heads=3 model.layers=2 model.max_seq=64 training.seq_len=33 training.micro_batch_size=2 training.dtype=bf16 training.param_dtype=bf16 training.optim_dtype=fp32"
  "torch_gpt2_param_bf16_optim_bf16|model.preset= model.arch=gpt2 model.vocab_size=1000 model.hidden=96 model.heads=3 model.layers=2 model.max_seq=64 training.seq_len=33 training.micro_batch_size=2 training.dtype=bf16 training.param_dtype=bf16 training.optim_dtype=bf16"
  "torch_llama_param_bf16_optim_fp32|model.preset= model.arch=llama model.vocab_size=1000 model.hidden=96 model.heads=6 model.kv_heads=2 model.intermediate=200 model.layers=2 model.max_seq=64 model.qkv_bias=true model.tied_embeddings=false training.seq_len=33 training.micro_batch_size=2 training.grad_accum=2 training.grad_clip=0.5 training.dtype=bf16 training.param_dtype=bf16 training.optim_dtype=fp32"
  "torch_llama_param_bf16_optim_bf16|model.preset= model.arch=llama model.vocab_size=1000 model.hidden=96 model.heads=6 model.kv_heads=2 model.intermediate=200 model.layers=2 model.max_seq=64 model.qkv_bias=true model.tied_embeddings=false training.seq_len=33 training.micro_batch_size=2 training.grad_accum=2 training.grad_clip=0.5 training.dtype=bf16 training.param_dtype=bf16 training.optim_dtype=bf16"
  "torch_llama_gqa_packed_fp32|model.preset= model.arch=llama model.vocab_size=1000 model.hidden=96 model.heads=6 model.kv_heads=2 model.intermediate=200 model.layers=2 model.max_seq=64 model.qkv_bias=true model.tied_embeddings=false training.seq_len=33 training.micro_batch_size=2 training.grad_accum=2 data.pack_documents=true"
  "torch_gpt2_packed_fp32|model.preset= model.arch=gpt2 model.vocab_size=1000 model.hidden=96 model.heads=3 model.layers=2 model.max_seq=64 training.seq_len=33 training.micro_batch_size=2 data.pack_documents=true"
  "torch_llama_gqa_bf16|model.preset= model.arch=llama model.vocab_size=1000 model.hidden=96 model.heads=6 model.kv_heads=2 model.intermediate=200 model.layers=2 model.max_seq=64 model.qkv_bias=true model.tied_embeddings=false training.seq_len=33 training.micro_batch_size=2 training.dtype=bf16"
  # Qwen3 attention (per-head q/k norms before RoPE, head_dim 20 != hidden/heads 16), dense:
  # GQA 3/1, packed documents with recompute, bf16 with a tied head
  "torch_qwen3_fp32|model.preset= model.arch=llama model.vocab_size=300 model.hidden=48 model.heads=3 model.kv_heads=1 model.head_dim=20 model.intermediate=72 model.layers=2 model.max_seq=64 model.qkv_bias=false model.tied_embeddings=false model.qk_norm=true training.seq_len=21 training.micro_batch_size=2 training.grad_accum=2"
  "torch_qwen3_packed_recompute_fp32|model.preset= model.arch=llama model.vocab_size=300 model.hidden=48 model.heads=3 model.kv_heads=1 model.head_dim=20 model.intermediate=72 model.layers=2 model.max_seq=64 model.qkv_bias=false model.tied_embeddings=false model.qk_norm=true training.seq_len=21 training.micro_batch_size=2 training.grad_accum=2 data.pack_documents=true training.activation_checkpointing=true"
  "torch_qwen3_bf16|model.preset= model.arch=llama model.vocab_size=300 model.hidden=48 model.heads=3 model.kv_heads=1 model.head_dim=20 model.intermediate=72 model.layers=2 model.max_seq=64 model.qkv_bias=false model.tied_embeddings=true model.qk_norm=true training.seq_len=21 training.micro_batch_size=2 training.dtype=bf16"
  # Mixture-of-Experts layers on Qwen3 attention (E not a power of two, k=3, 21-token sequences):
  # the routing (every step's selections, dropped pairs, balancing bias) must match exactly in
  # fp32 (check_refdump.py: router_rows); the run.seed of each case keeps the k-th and (k+1)-th
  # scores of every token >= 1e-5 apart over the run (printed), 100x fp32 rounding.
  #  - E=5 k=3, shared expert, norm_topk, layer 1 dense (mlp_only_layers), aux + z-loss
  "torch_moe_mixed_fp32|model.preset= model.arch=llama model.vocab_size=300 model.hidden=48 model.heads=3 model.kv_heads=1 model.head_dim=20 model.intermediate=72 model.layers=3 model.max_seq=64 model.qkv_bias=false model.tied_embeddings=false model.qk_norm=true model.moe.experts=5 model.moe.top_k=3 model.moe.intermediate=40 model.moe.shared_intermediate=56 model.moe.norm_topk=true model.moe.sparse_step=1 model.moe.mlp_only_layers=1 model.moe.aux_loss_coef=0.01 model.moe.z_loss_coef=0.001 training.seq_len=21 training.micro_batch_size=2 training.grad_accum=2"
  #  - E=6 k=3, no shared expert, plain top-k weights, MoE every 2nd layer (sparse_step), recompute, clipping
  "torch_moe_sparse_recompute_fp32|model.preset= model.arch=llama model.vocab_size=300 model.hidden=48 model.heads=3 model.kv_heads=1 model.head_dim=20 model.intermediate=72 model.layers=4 model.max_seq=64 model.qkv_bias=false model.tied_embeddings=false model.qk_norm=true model.moe.experts=6 model.moe.top_k=3 model.moe.intermediate=40 model.moe.shared_intermediate=0 model.moe.norm_topk=false model.moe.sparse_step=2 model.moe.aux_loss_coef=0.02 model.moe.z_loss_coef=0 training.seq_len=21 training.micro_batch_size=2 training.grad_accum=2 training.activation_checkpointing=true training.grad_clip=0.5 run.seed=1"
  #  - the first case in bf16 (selections may differ by a bf16 rounding flip: TOL_BF16_ROUTED)
  "torch_moe_bf16|model.preset= model.arch=llama model.vocab_size=300 model.hidden=48 model.heads=3 model.kv_heads=1 model.head_dim=20 model.intermediate=72 model.layers=3 model.max_seq=64 model.qkv_bias=false model.tied_embeddings=false model.qk_norm=true model.moe.experts=5 model.moe.top_k=3 model.moe.intermediate=40 model.moe.shared_intermediate=56 model.moe.norm_topk=true model.moe.sparse_step=1 model.moe.mlp_only_layers=1 model.moe.aux_loss_coef=0.01 model.moe.z_loss_coef=0.001 training.seq_len=21 training.micro_batch_size=2 training.dtype=bf16"
  #  - capacity factor 1 dropping the pairs of lowest weight (a third of the pairs dropped)
  "torch_moe_capacity_fp32|model.preset= model.arch=llama model.vocab_size=300 model.hidden=48 model.heads=3 model.kv_heads=1 model.head_dim=20 model.intermediate=72 model.layers=2 model.max_seq=64 model.qkv_bias=false model.tied_embeddings=false model.qk_norm=true model.moe.experts=6 model.moe.top_k=3 model.moe.intermediate=40 model.moe.shared_intermediate=0 model.moe.norm_topk=true model.moe.sparse_step=1 model.moe.aux_loss_coef=0.01 model.moe.capacity_factor=1.0 training.seq_len=21 training.micro_batch_size=2 training.grad_accum=2 run.seed=3"
  #  - auxiliary-loss-free balancing (bias +-0.01 per step, no aux loss), capacity 1.25 dropping by position
  "torch_moe_bias_balance_fp32|model.preset= model.arch=llama model.vocab_size=300 model.hidden=48 model.heads=3 model.kv_heads=1 model.head_dim=20 model.intermediate=72 model.layers=2 model.max_seq=64 model.qkv_bias=false model.tied_embeddings=false model.qk_norm=true model.moe.experts=5 model.moe.top_k=2 model.moe.intermediate=40 model.moe.shared_intermediate=32 model.moe.norm_topk=false model.moe.sparse_step=1 model.moe.aux_loss_coef=0 model.moe.bias_update_rate=0.01 model.moe.capacity_factor=1.25 model.moe.drop_policy=position training.seq_len=21 training.micro_batch_size=2 training.grad_accum=2 run.seed=3"
)
foreach(case ${LOOM_TORCH_CASES})
  string(REPLACE "|" ";" parts "${case}")
  list(GET parts 0 name)
  list(GET parts 1 overrides)
  add_test(NAME ${name}
    COMMAND sh -c "$<TARGET_FILE:loom_refdump> ${name}.safetensors ${overrides} && ${LOOM_PYTHON} ${LOOM_TORCH_DIR}/check_refdump.py ${name}.safetensors"
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(${name} PROPERTIES TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=2")
endforeach()
# bf16 GEMMs on weights in oneDNN's blocked layout (loom_gemm_bf16_w, LOOM_GEMM_PACK=1) against
# the plain layout (LOOM_GEMM_PACK=0): the whole dump — losses, logits, gradients, weights and
# AdamW moments after the steps — bitwise the same, and the packed run passes the PyTorch check.
foreach(name torch_llama_gqa_bf16 torch_llama_param_bf16_optim_fp32 torch_gpt2_bf16)
  foreach(case ${LOOM_TORCH_CASES})
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts 0 cname)
    if(cname STREQUAL name)
      list(GET parts 1 overrides)
    endif()
  endforeach()
  add_test(NAME ${name}_weights_layout
    COMMAND sh -c "LOOM_GEMM_PACK=0 $<TARGET_FILE:loom_refdump> ${name}_plain.safetensors ${overrides} && LOOM_GEMM_PACK=1 $<TARGET_FILE:loom_refdump> ${name}_packed.safetensors ${overrides} && cmp ${name}_plain.safetensors ${name}_packed.safetensors && ${LOOM_PYTHON} ${LOOM_TORCH_DIR}/check_refdump.py ${name}_packed.safetensors"
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(${name}_weights_layout PROPERTIES TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=2")
endforeach()
add_executable(loom_vision_dump ${CMAKE_SOURCE_DIR}/tests/torch/vision_dump.c)
target_link_libraries(loom_vision_dump PRIVATE loomlib)
foreach(preset tiny-qwen2.5-vl tiny-llava)
  foreach(dt fp32 bf16)
    add_test(NAME torch_vision_${preset}_${dt}
      COMMAND sh -c "$<TARGET_FILE:loom_vision_dump> vision_${preset}_${dt}.safetensors ${preset} ${dt} && ${LOOM_PYTHON} ${LOOM_TORCH_DIR}/check_vision.py vision_${preset}_${dt}.safetensors"
      WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
    set_tests_properties(torch_vision_${preset}_${dt} PROPERTIES TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=1")
  endforeach()
endforeach()
add_executable(loom_vlm_dump ${CMAKE_SOURCE_DIR}/tests/torch/vlm_dump.c)
target_link_libraries(loom_vlm_dump PRIVATE loomlib)
foreach(preset tiny-qwen2.5-vl tiny-llava)
  add_test(NAME torch_vlm_${preset}
    COMMAND sh -c "$<TARGET_FILE:loom_vlm_dump> vlm_${preset}.safetensors ${preset} && ${LOOM_PYTHON} ${LOOM_TORCH_DIR}/check_vlm.py vlm_${preset}.safetensors"
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(torch_vlm_${preset} PROPERTIES TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=1")
endforeach()
add_test(NAME torch_checker_selftest COMMAND ${LOOM_PYTHON} ${LOOM_TORCH_DIR}/selftest.py
  WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
set_tests_properties(torch_checker_selftest PROPERTIES TIMEOUT 300)
# HF export layout: the exported VLM loaded by HF name into the reference (check_vlm_hf.py).
foreach(preset tiny-qwen2.5-vl tiny-llava)
  add_test(NAME torch_vlm_hf_${preset}
    COMMAND sh -c "$<TARGET_FILE:loom_vlm_dump> vlmhf_${preset}.safetensors ${preset} && ${LOOM_PYTHON} ${LOOM_TORCH_DIR}/check_vlm_hf.py $<TARGET_FILE:loom> vlmhf_${preset}.safetensors vlmhf_${preset}.d"
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(torch_vlm_hf_${preset} PROPERTIES TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=1")
endforeach()
# MoE layer and Qwen3 attention against ref_moe.py (written from Hugging Face's Qwen3-MoE,
# Qwen2-MoE and Mixtral blocks, load_balancing_loss_func and Megatron's z_loss_func):
# loom_moe_block_dump runs loom's layer (two layers, pooled load-balancing loss, z-loss) or
# Qwen3 attention on loom's kernels; check_moe_block.py recomputes in float64 and compares the
# routing exactly and values within the tolerances written in it.
add_executable(loom_moe_block_dump ${CMAKE_SOURCE_DIR}/tests/torch/moe_block_dump.c)
target_link_libraries(loom_moe_block_dump PRIVATE loomlib)
foreach(case qwen3 qwen2 mixtral capacity_weight capacity_position qwen2_bf16 capacity_weight_bf16 qwen3_attention)
  add_test(NAME torch_moe_block_${case}
    COMMAND sh -c "$<TARGET_FILE:loom_moe_block_dump> moe_${case}.safetensors ${case} && ${LOOM_PYTHON} ${LOOM_TORCH_DIR}/check_moe_block.py moe_${case}.safetensors"
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  set_tests_properties(torch_moe_block_${case} PROPERTIES TIMEOUT 300 ENVIRONMENT "OMP_NUM_THREADS=1")
endforeach()
