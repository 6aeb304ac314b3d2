/*
 * mhe.h: the mha engine, the one public header of libmhe.
 *
 * libmha (lib/mha.h) is the arithmetic.  The engine is everything between
 * files and that arithmetic: reading matrices and checkpoints (JSON, CSV,
 * .npy, .npz, safetensors, a Hugging Face checkpoint's config.json), resolving
 * a layer (the model families' table: what config.json says, what its class
 * leaves out), running the steps, and comparing someone's numbers with mha's
 * (which step differs first, and the mistake that explains it).  The mha
 * program is a front over it (options, writing, pictures); so is the Python
 * package.  Like libmha it never prints and never exits: what goes wrong is
 * an mhe_message, handed to the handler the front sets and kept as the
 * thread's last error, in the words the program prints.
 *
 * A run is an opaque mhe_run: settings are set by name, as the program's
 * options spell them ("x", "checkpoint", "layer", "heads", "causal", ...),
 * so that a setting added later changes no struct and no signature
 * (zstd's ZSTD_CCtx_setParameter).  Status codes are the program's exit
 * statuses: MHE_OK 0, MHE_DATA 1 (a file, a shape, a value of the data),
 * MHE_USAGE 2 (a setting).
 *
 *   mhe_run *r = mhe_run_new();
 *   mhe_run_set(r, "checkpoint", "model/");    (config.json beside it)
 *   mhe_run_set(r, "layer", "0");
 *   mhe_run_set(r, "x", "x.npy");
 *   if (mhe_run_forward(r) == MHE_OK)
 *           mhe_run_step(r, "output", &m);     (m.v: m.rows x m.cols, float64)
 *   mhe_run_compare(r, "theirs.npz", &verdict);
 *   mhe_run_free(r);
 *
 * Stable: everything here (there is no experimental part yet; one would
 * sit behind MHE_EXPERIMENTAL, as libmha's behind MHA_EXPERIMENTAL):
 * opaque runs, settings by name, and a message that only grows at its end;
 * docs/library.md.
 */
#ifndef MHE_H
#define MHE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && __GNUC__ >= 4
#define MHE_API __attribute__((visibility("default")))
#else
#define MHE_API
#endif

#define MHE_VERSION_MAJOR 1
#define MHE_VERSION_MINOR 3
#define MHE_VERSION_RELEASE 0
#define MHE_VERSION_NUMBER (MHE_VERSION_MAJOR * 10000 + MHE_VERSION_MINOR * 100 + \
			    MHE_VERSION_RELEASE)
/* the engine this program was built with, against the one it runs on */
MHE_API unsigned mhe_version_number(void);

/* what a call returns: the program's exit statuses */
enum {
	MHE_OK = 0,
	MHE_DATA = 1,  /* bad data: a file that cannot be read, parsed or used */
	MHE_USAGE = 2  /* a setting the engine does not take, or not with that value */
};

/* ---- messages --------------------------------------------------------------- */

enum mhe_severity {
	MHE_ERROR,   /* the call fails */
	MHE_WARNING, /* the call goes on; something the user should know */
	MHE_NOTE     /* nothing wrong: something the engine assumed, said */
};

/*
 * One message, as the program prints it after "mha: " ("mha: warning: ",
 * "mha: note: "): lowercase, no full stop, no control character (the
 * file's own text is made safe before it reaches text).  Where the engine
 * knows them, file is the file being read and key the setting
 * (mhe_run_set's name) or config.json key at fault; command is the command
 * whose help a usage error points to ("forward"), or NULL.  The engine
 * hands messages over and the front never frees them: fields are only ever
 * added at the end.  Valid during the handler's call only.
 */
typedef struct mhe_message {
	enum mhe_severity severity;
	int status;          /* MHE_DATA or MHE_USAGE for an error; MHE_OK otherwise */
	const char *text;
	const char *file;    /* or NULL */
	const char *command; /* or NULL */
	const char *key;     /* or NULL */
} mhe_message;

typedef void mhe_message_fn(void *ctx, const mhe_message *m);

/* Every message from now on to fn (NULL: none, the default; errors are kept
 * all the same).  For the whole process: set it before the first run. */
MHE_API void mhe_set_message_handler(mhe_message_fn *fn, void *ctx);

/* The calling thread's last error (its text "" when there was none), valid
 * until the thread's next error. */
MHE_API const mhe_message *mhe_last_error(void);

/* Progress of the long computations (a phase: "attention", "backward"; done
 * from 0 to 1), for a front's bar; NULL (the default): none is counted. */
typedef void mhe_progress_fn(void *ctx, const char *phase, double done);
MHE_API void mhe_set_progress_handler(mhe_progress_fn *fn, void *ctx);

/* Whether to stop (1.2.0), for a front's Ctrl-C: asked during a long
 * computation, on the calling thread, from 50 ms into it and then at most
 * every 20 ms (a short call is never asked).  Nonzero stops it at once (the
 * library's threads skip the work left): the call fails, MHE_DATA, "stopped
 * on request".  NULL (the default): never asked.  For the whole process. */
typedef int mhe_stop_fn(void *ctx);
MHE_API void mhe_set_stop_handler(mhe_stop_fn *fn, void *ctx);

/* ---- a run ---------------------------------------------------------------- */

/*
 * Every setting mhe_run_set and mhe_run_set_array take (1.2.0), for a
 * front's signatures: its name and what its value is.  Fills out[0..cap)
 * and returns how many there are (cap 0: just the count).  The names are
 * the engine's, valid for the process.
 */
enum mhe_kind {
	MHE_FLAG,         /* no value: "exact", "alibi" */
	MHE_FLAG_OR_WORD, /* no value, or a word: "causal", "causal bottom-right" */
	MHE_COUNT,        /* a whole number: "heads", "layer" */
	MHE_NUMBER,       /* a real number: "rope-theta", "softcap" */
	MHE_NUMBER_OR_WORD, /* a number or a word: "scale" (0.5, dmodel), "window" */
	MHE_WORD,         /* a word: "rope", "layout", "print" */
	MHE_ARRAY,        /* a file, or an array in memory (mhe_run_set_array) */
	MHE_PATH          /* a file or a folder alone: "w", "config" */
};
typedef struct mhe_setting {
	const char *name;
	enum mhe_kind kind;
} mhe_setting;
MHE_API size_t mhe_settings(mhe_setting *out, size_t cap);

typedef struct mhe_run mhe_run;

/* A new run (float64, one head, nothing read yet), or NULL out of memory.
 * The memory limit (max-memory) is the process's, as the handlers are: one
 * run computes at a time in a process; runs may be kept side by side. */
MHE_API mhe_run *mhe_run_new(void);
MHE_API void mhe_run_free(mhe_run *r);

/*
 * A setting by the program's long option name, without the dashes, and its
 * value as the command line gives it (NULL for a setting that takes none:
 * "causal", "alibi", "exact"):
 *   inputs:   x, w, kv, xk, xv, q, k, kt, v, mask, mask-bool, positions,
 *             rope-cos, rope-sin, alibi-slopes, q-norm, k-norm, checkpoint,
 *             config, layer, prefix, layout, tokens, kv-tokens, kv-len,
 *             grad-output, wq ... bo, and latent attention's tensors
 *   settings: heads, kv-heads, scale, causal, window, sinks, alibi, rope,
 *             rope-theta, rope-dim, rope-scaling, softcap, norm, norm-eps,
 *             norm-over, biases, qk-rope-head-dim, mla-eps, absorb
 *   the run:  threads, max-memory, dtype (f64; bf16 or fp16: a forward's
 *             low-precision reference, and for a comparison (1.3.0) the type
 *             their numbers were in), exact, print (the steps a forward or a
 *             backward keeps as results, mhe_run_results), sequence (the
 *             batch's sequence a comparison takes, from 1), factor (1.3.0:
 *             how far their bfloat16 and float16 steps may err, in the
 *             reference's errors, as mha compare --factor)
 * MHE_OK; MHE_USAGE for a name it does not take (said, with the nearest
 * name) or a value it refuses.  Files are read by mhe_run_forward, not here.
 */
MHE_API int mhe_run_set(mhe_run *r, const char *name, const char *value);

/*
 * An array in memory instead of a file (1.1.0): the input called name (one
 * of mhe_run_set's files: x, kv, xk, xv, q, k, kt, v, mask, positions,
 * rope-cos, rope-sin, sinks, alibi-slopes, q-norm, k-norm, grad-output, the
 * single weights wq ... bo and latent attention's tensors) read from
 * a->data: row-major, rank 1 to 4, its numbers float64, float32, float16 or
 * bfloat16 (widened to float64 exactly) or, for a mask, booleans (one byte
 * each, nonzero true).  The array is borrowed, never written: it must stay
 * until the last mhe_run_forward or mhe_run_compare that reads it.  The
 * same checks as a file's (ranks, finite numbers), in messages that call
 * it "<name>".  MHE_OK, or MHE_USAGE (said).
 */
enum mhe_dtype { MHE_F64, MHE_F32, MHE_F16, MHE_BF16, MHE_BOOL };
typedef struct mhe_array {
	const void *data;
	enum mhe_dtype dtype;
	size_t rank;
	size_t dim[4];
} mhe_array;
MHE_API int mhe_run_set_array(mhe_run *r, const char *name, const mhe_array *a);

/* Read the inputs, resolve the layer (a checkpoint's family and config.json,
 * every check of the program's) and compute every step, float64, the plain
 * path.  MHE_OK, MHE_DATA or MHE_USAGE (said). */
MHE_API int mhe_run_forward(mhe_run *r);

/*
 * The results of the last forward when the setting "print" named the steps
 * (1.1.0; mhe_run_set(r, "print", "softmax,output"), as mha forward --print
 * takes them, "all" too), or of the last backward (1.2.0), with or without
 * "print" (mha backward --print's names: "dX", "dW_Q", "heads", "all";
 * without: the gradients of what was given): each as 'mha forward -o
 * run.npz' ('mha backward -o run.npz') names its members, "X", "Q",
 * "output", "heads.softmax" (a per-head step, the heads stacked: heads x
 * rows x cols), "dX", "dW_Q", a batch's with the sequences ahead, in the
 * order of the computation; the same numbers as the program's (forward's
 * fast path when only the output is asked for).  A step's names are read
 * when the run computes: a wrong one fails it then (MHE_USAGE, about the
 * setting "print").  mhe_run_result: result i (from 0, below
 * mhe_run_results()), owned by the run as mhe_run_step's are; MHE_USAGE
 * past the last.  After such a forward or backward the run holds its
 * results and their meta and nothing else (the problem let go: the arrays
 * it read may go), and a forward reads float64 arrays in memory where they
 * lie, no copy.  mhe_run_meta: the run's "meta" object as the JSON output
 * writes it, a new string (mhe_free), or NULL (said).
 */
MHE_API int mhe_run_backward(mhe_run *r);

/*
 * A checkpoint's layer (1.2.0), as mha model describes it: the run's
 * checkpoint ("w") and its layer ("layer" or "prefix") and any setting
 * over config.json resolved as a run resolves them (no x needed; a layer a
 * run would refuse is refused here in the same words).  Its results are
 * the tensors a run computes with, as 'mha model -o' names them (W_Q ...
 * b_O as -w takes them, d_in x d_out; q_norm, k_norm, sinks, latent
 * attention's); mhe_run_meta is the layer's object of 'mha model -f json'
 * ("heads", "rope", "config_keys", ...).  MHE_OK, MHE_DATA or MHE_USAGE.
 */
MHE_API int mhe_run_model(mhe_run *r);
typedef struct mhe_tensor {
	const double *v;
	size_t rank;
	size_t dim[4];
} mhe_tensor;
MHE_API size_t mhe_run_results(const mhe_run *r);
MHE_API int mhe_run_result(const mhe_run *r, size_t i, const char **name, mhe_tensor *t);
MHE_API char *mhe_run_meta(const mhe_run *r);

/*
 * A step of the last forward, by the name mha forward --print takes ("q",
 * "scores", "softmax", "heads", "output", ...): planes (heads, or 1) of
 * rows by cols float64 numbers, row-major, owned by the run (valid until
 * the next mhe_run_forward or mhe_run_free).  MHE_OK; MHE_USAGE for a name
 * that is not a step or a step this run does not have.
 */
typedef struct mhe_matrix {
	const double *v;
	size_t planes, rows, cols;
} mhe_matrix;
MHE_API int mhe_run_step(const mhe_run *r, const char *step, mhe_matrix *out);

/*
 * Their results (the program's --against PATH: a JSON file of named arrays,
 * a .npz, a folder of files, one matrix; NULL: the arrays given with
 * mhe_run_set_theirs) against this run's steps, as mha compare does (the
 * run's settings and inputs; the forward, and the backward when they give
 * gradients, computed again).  rtol and atol: the tolerances, or negative
 * for compare's own (bfloat16 and float16 arrays, by their type or the run's
 * dtype, judged by their precision, 1.3.0).  MHE_OK and *v filled in, whether they agree or not;
 * MHE_DATA or MHE_USAGE (said) when the comparison cannot be made.  The
 * comparison stays with the run for mhe_run_report.
 */
typedef struct mhe_verdict {
	int agree;              /* every step they gave agrees */
	int steps_compared;
	char first_step[32];    /* the first step that differs, or "" */
	char mistake[64];       /* the mistake that explains it ("scale-dmodel"), or "" */
	char why[640];          /* the diagnosis in words, or "" */
} mhe_verdict;
MHE_API int mhe_run_compare(mhe_run *r, const char *against, double rtol, double atol,
			    mhe_verdict *v);

/*
 * One of their arrays in memory (1.1.0), under any name compare reads
 * (mha's keys, "attn_weights", "query_states", "head2_scores", ...), for
 * mhe_run_compare with against NULL; borrowed as mhe_run_set_array's.
 * MHE_OK, or MHE_USAGE (said).
 */
MHE_API int mhe_run_set_theirs(mhe_run *r, const char *name, const mhe_array *a);

/*
 * The report of the run's last comparison (1.1.0), in mha compare's words:
 * its table (json 0) or its JSON (json 1, as 'mha compare -f json'), a new
 * string to give back with mhe_free; NULL when there is no comparison to
 * report or no memory (said).
 */
MHE_API char *mhe_run_report(const mhe_run *r, int json);
MHE_API void mhe_free(void *p);

#ifdef __cplusplus
}
#endif

#endif
