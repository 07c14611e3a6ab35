/* Private to the decoder: the activations one transformer block saves for its backward. */
#ifndef LOOM_DECODER_INTERNAL_H
#define LOOM_DECODER_INTERNAL_H
struct loom_layer_acts {
  float *ln1, *ln1_mean, *ln1_rstd; /* (N,C), (N), (N) */
  float *q, *k, *v;                 /* (N,QD), (N,KD), (N,KD); q,k after rope */
  float *att, *lse;                 /* (N,QD), (B,Hq,T) */
  float *mid;                       /* (N,C) residual after attention */
  float *ln2, *ln2_mean, *ln2_rstd; /* (N,C), (N), (N) */
  float *gate, *up, *act;           /* (N,I): llama gate/up/silu(gate)*up; gpt2 up/gelu(up) */
};
#endif
