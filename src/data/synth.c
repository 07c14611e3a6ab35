/* Synthetic demo corpus: short English-like stories from a small probabilistic grammar.
 * A hero (a child or an animal, with pronouns), a friend, a place, a treasured object, a
 * problem that befalls the object, a matching solution, quoted dialogue and an ending with
 * a moral. Sentences recur with variations, so a tiny model can learn visible structure.
 * Deterministic for a given seed (loom_rng). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom/core.h"
#include "loom/tokenizer.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

typedef struct {
  char *s;
  size_t len, cap;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (b->len + (size_t)n + 1 > b->cap) {
    while (b->len + (size_t)n + 1 > b->cap) b->cap = b->cap ? 2 * b->cap : 4096;
    b->s = loom_realloc(b->s, b->cap, 1);
  }
  va_start(ap, fmt);
  vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

typedef struct {
  const char *name, *kind; /* "Mia", "girl" */
  const char *He, *he, *his, *him;
} who;

static const char *girls[] = {"Mia", "Lily", "Sara", "Emma", "Zoe", "Anna", "Lucy", "Nora", "Ruby", "Ella"};
static const char *boys[] = {"Tom", "Ben", "Max", "Sam", "Leo", "Jack", "Finn", "Noah", "Owen", "Theo"};
static const char *animals[] = {"cat", "dog", "bird", "rabbit", "fox", "frog", "bear", "duck", "mouse", "owl"};
static const char *pet_names[] = {"Spot", "Pip", "Coco", "Tiger", "Bella", "Bingo", "Fluffy", "Sunny"};
static const char *adjs[] = {"little", "happy", "brave", "curious", "kind", "shy", "silly", "clever"};
static const char *places[] = {"the park", "the forest", "the beach", "the garden", "the market",
                               "the river", "the hill", "the farm", "the lake", "the old barn"};
static const char *objects[][2] = {{"a red", "ball"},    {"a blue", "kite"}, {"a shiny", "stone"},
                                   {"a big", "box"},     {"a toy", "boat"},  {"a yellow", "hat"},
                                   {"a small", "drum"},  {"a green", "apple"}, {"an old", "map"},
                                   {"a funny", "book"}};
static const char *activities[] = {"sing songs", "read books", "run fast", "draw pictures",
                                   "look at the stars", "build sand castles", "climb trees",
                                   "play games", "dance in the rain", "pick flowers"};
static const char *times[] = {"One day", "One morning", "Later that day", "In the afternoon",
                              "One sunny day", "That evening"};
static const char *weathers[] = {"sunny", "rainy", "windy", "cold", "warm", "bright"};
static const char *feelings[] = {"very sad", "scared", "upset", "worried"};
static const char *morals[] = {"friends help each other", "sharing makes everyone happy",
                               "it is good to be brave", "being kind is the best thing",
                               "you should never give up"};

/* A problem and its matching fix: what happened, the idea, what they did, the result. */
static const char *problems[][4] = {
    {"fell into the river", "We can use a long stick to get it", "got it out with a long stick",
     "was safe again"},
    {"got stuck in a tall tree", "Let us shake the tree", "shook the tree until it fell down",
     "was back on the ground"},
    {"was lost", "Let us look for it together", "looked under the bushes and behind the rocks",
     "was found at last"},
    {"broke into two pieces", "We can fix it with some glue", "fixed it with some glue",
     "was as good as new"},
    {"was taken by a big wind", "Let us run after it", "ran and ran across the grass",
     "was caught just in time"},
};

static const char *pick(loom_rng *r, const char **list, size_t n) {
  return list[loom_rng_below(r, n)];
}
#define PICK(r, list) pick(r, list, N_OF(list))

static int chance(loom_rng *r, double p) { return loom_rng_uniform(r) < p; }

/* Note: one random draw per statement everywhere below, because C leaves the order in
 * which function arguments are evaluated unspecified (and so the stream of draws). */
static who make_who(loom_rng *r, int allow_animal) {
  int k = (int)loom_rng_below(r, allow_animal ? 3 : 2);
  if (k == 0) return (who){PICK(r, girls), "girl", "She", "she", "her", "her"};
  if (k == 1) return (who){PICK(r, boys), "boy", "He", "he", "his", "him"};
  const char *name = PICK(r, pet_names);
  return (who){name, PICK(r, animals), "It", "it", "its", "it"};
}

static void opening(sbuf *b, loom_rng *r, const who *h) {
  const char *adj = PICK(r, adjs);
  const char *home = PICK(r, places);
  switch (loom_rng_below(r, 3)) {
  case 0: put(b, "Once upon a time, there was a %s %s named %s. ", adj, h->kind, h->name); break;
  case 1: put(b, "%s was a %s %s who lived near %s. ", h->name, adj, h->kind, home); break;
  default: put(b, "There once was a %s %s called %s. ", adj, h->kind, h->name); break;
  }
  put(b, "%s loved to %s.", h->He, PICK(r, activities));
}

static void treasure(sbuf *b, loom_rng *r, const who *h, int obj) {
  put(b, " %s had %s %s.", h->name, objects[obj][0], objects[obj][1]);
  if (chance(r, 0.6)) put(b, " %s loved %s %s very much.", h->He, h->his, objects[obj][1]);
  put(b, "\n");
}

static void meeting(sbuf *b, loom_rng *r, const who *h, const who *f, const char *place) {
  const char *w = PICK(r, weathers);
  const char *when = PICK(r, times);
  const char *with = chance(r, 0.5) ? "mom" : "friends";
  put(b, "%s, %s went to %s with %s %s. ", when, h->name, place, h->his, with);
  if (chance(r, 0.5)) put(b, "It was a %s day. ", w);
  put(b, "At %s, %s met a %s %s named %s. ", place, h->he, PICK(r, adjs), f->kind, f->name);
  put(b, "\"Hello, %s!\" said %s. \"Do you want to play with me?\" ", f->name, h->name);
  if (chance(r, 0.7))
    put(b, "\"Yes!\" said %s. \"I love to %s.\"\n", f->name, PICK(r, activities));
  else
    put(b, "%s smiled and said, \"Yes, I do!\"\n", f->name);
}

static void trouble(sbuf *b, loom_rng *r, const who *h, const who *f, int obj, int pr) {
  const char *thing = objects[obj][1];
  put(b, "They played all day. But then, the %s %s. ", thing, problems[pr][0]);
  put(b, "%s was %s. \"Oh no!\" cried %s. \"My %s!\"\n", h->name, PICK(r, feelings), h->name,
      thing);
  put(b, "%s had an idea. \"%s!\" %s said. ", f->name, problems[pr][1], f->he);
  put(b, "So %s and %s %s. Soon, the %s %s.\n", h->name, f->name, problems[pr][2], thing,
      problems[pr][3]);
}

static void ending(sbuf *b, loom_rng *r, const who *h, const who *f) {
  put(b, "%s smiled. \"Thank you, %s!\" %s said.", h->name, f->name, h->he);
  if (chance(r, 0.7)) put(b, " From that day on, %s and %s were best friends.", h->name, f->name);
  if (chance(r, 0.5)) put(b, " %s learned that %s.", h->name, PICK(r, morals));
  if (chance(r, 0.3)) put(b, " The end.");
  put(b, "\n");
}

static void story(sbuf *b, loom_rng *r) {
  who h = make_who(r, 1);
  who f = make_who(r, 1);
  while (!strcmp(f.name, h.name)) f = make_who(r, 1);
  int obj = (int)loom_rng_below(r, N_OF(objects));
  int pr = (int)loom_rng_below(r, N_OF(problems));
  const char *place = PICK(r, places);
  opening(b, r, &h);
  treasure(b, r, &h, obj);
  meeting(b, r, &h, &f, place);
  trouble(b, r, &h, &f, obj, pr);
  ending(b, r, &h, &f);
}

int loom_synth_text(size_t bytes, uint64_t seed, char **text, size_t *len) {
  loom_rng r;
  loom_rng_seed(&r, seed);
  sbuf out = {0}, one = {0};
  for (;;) {
    one.len = 0;
    if (out.len) put(&one, "\n"); /* blank line between stories */
    story(&one, &r);
    if (out.len && out.len + one.len > bytes) break;
    put(&out, "%s", one.s);
    if (out.len >= bytes) break;
  }
  free(one.s);
  *text = out.s;
  *len = out.len;
  return 0;
}
