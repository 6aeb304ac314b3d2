#ifndef UNIT_H
#define UNIT_H

/*
 * unit.h: what the files of the Check unit tests for libmha share: the
 * includes, the test cases each file adds its tests to, and the helpers
 * and types more than one file uses (each defined in the file named by its
 * subject: helpers.c, reference.c, memory.c, backward.c, …).
 */
/* sched_getaffinity: the CPUs the default thread count is checked against */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "../ref.h"
#include "../../lib/kernels/kernel.h" /* the GEMM itself (libmha.a has it) */
#include "util/number.h"

#include <check.h>
#include <errno.h>
#include <sched.h>
#include <dirent.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RTOL 1e-12

/* the test cases each file adds its tests to (main.c) */
struct unit_suite {
	TCase *hand, *ref, *err, *bw;
};

void unit_add_forward(const struct unit_suite *u);
void unit_add_rope(const struct unit_suite *u);
void unit_add_norm(const struct unit_suite *u);
void unit_add_mla(const struct unit_suite *u);
void unit_add_reference(const struct unit_suite *u);
void unit_add_stream(const struct unit_suite *u);
void unit_add_extremes(const struct unit_suite *u);
void unit_add_batch(const struct unit_suite *u);
void unit_add_memory(const struct unit_suite *u);
void unit_add_errors(const struct unit_suite *u);
void unit_add_threads(const struct unit_suite *u);
void unit_add_gemm(const struct unit_suite *u);
void unit_add_backward(const struct unit_suite *u);
void unit_add_backward_fast(const struct unit_suite *u);
void unit_add_backward_f32(const struct unit_suite *u);
void unit_add_progress(const struct unit_suite *u);
void unit_add_lowp(const struct unit_suite *u);

/* Every stage an observer saw: [stage][head + 1] (index 0: whole model). */
typedef struct seen {
	size_t heads;
	double *m[MHA_STAGE_COUNT][17];
	size_t rows[MHA_STAGE_COUNT][17], cols[MHA_STAGE_COUNT][17];
	int calls;
	int stop_at; /* stop when calls reaches this (0: never) */
} seen;

const mha_config *with_rope(const mha_rope *r);

void seen_free(seen *sn);

int ignore_stop(void *ctx, mha_stage s, int head, const double *m, size_t rows, size_t cols);

mha_observer watch_all(seen *sn);

void check_close(const char *what, const double *got, const double *want, size_t n);

void check_close_norm(const char *what, const double *got, const double *want, size_t n);

#if defined(__aarch64__)
#define N_KERNEL_NAMES 2
#else
#define N_KERNEL_NAMES 3
#endif
extern const char *const kernel_names[N_KERNEL_NAMES];

char *env_save(const char *name);

void env_restore(const char *name, const char *saved);

extern uint64_t rng_state;

double rnd(void);

double *rnd_matrix(size_t n);

struct random_case {
	mha_dims d;
	mha_config cfg;
	int weights, biases, wo, cross, direct;
	double *xq, *xk, *xv, *W[4], *b[4], *bias;
	unsigned char *allow;
	double sinks[8]; /* (H) when cfg.sinks points here */
	double slopes[8]; /* (H) when cfg.alibi.slopes points here */
	ptrdiff_t q_pos[16], k_pos[16]; /* rope positions when cfg.rope's point here */
	double *norm_q, *norm_k;        /* cfg.norm's weights, or NULL */
	double *rope_cos, *rope_sin;    /* (ROPE_ROWS, R/2) rope tables, or NULL */
};

void make_case(struct random_case *c, unsigned seed);

/* n doubles rounded to floats, n floats widened (NULL stays NULL) */
float *floats_of(const double *v, size_t n);
double *doubles_of(const float *f, size_t n);

void free_case(struct random_case *c);

extern long stream_suite;

double *batch_of(const double *first, size_t n, size_t B);

void track_start(void);

size_t track_stop(void);

int track_works(void);

extern double grad_floor;

double ref_grads_scale(const ref_grads *r, const mha_dims *d);

void grad_close(const char *what, const double *got, const double *want, size_t n, double tol);

/* the gradients of a case, each array sized as mha.h says: dxq … dsinks,
 * dq_norm and dk_norm (as long as per-head weights) */
#define N_GRADS 14
struct grad_set {
	mha_grads g;
	double *all[N_GRADS];
	size_t n[N_GRADS];
};

void grads_alloc(struct grad_set *s, const mha_dims *d, size_t B);

int grads_same(const struct grad_set *a, const struct grad_set *b);

void grads_free(struct grad_set *s);

/* what the observer of a backward run saw: the last copy of each stage per head */
typedef struct gseen {
	double *m[MHA_GRAD_COUNT][9]; /* [stage][head + 1] */
	size_t rows[MHA_GRAD_COUNT], cols[MHA_GRAD_COUNT];
	int last;                      /* the stage before, for the order */
	int order_ok;
} gseen;

int gignore(void *ctx, mha_grad_stage s, int head, const double *m, size_t rows, size_t cols);

void gseen_free(gseen *sn);

#endif /* UNIT_H */
