/*
 * mha.h: multi-head attention, computed exactly, with every step visible.
 *
 * This is the whole public interface of libmha.  The library does the
 * arithmetic and nothing else: it depends on libc and libm only, never
 * prints, never exits, never reads a file.  Errors come back as an
 * mha_status; mha_strerror() names them.
 *
 * What it computes, for a query source Xq (n_q rows) and key and value
 * sources Xk, Xv (n_kv rows each), all row vectors:
 *
 *   Q = Xq·W_Q + b_Q        (n_q,  H·d_k)
 *   K = Xk·W_K + b_K        (n_kv, G·d_k)
 *   V = Xv·W_V + b_V        (n_kv, G·d_v)
 *
 * With rotary embeddings (mha_config.rope) Q and K then turn by position,
 * q_rot and k_rot (mha_rope below), and the heads use those.
 *
 * Query head h uses column block h of Q and column block g = h / (H/G) of
 * K and V (G = H: ordinary multi-head; G < H: grouped-query; G = 1:
 * multi-query).  Per head:
 *
 *   scores     = Q_h·K_gᵀ                    (n_q, n_kv)
 *   scaled     = scores × scale
 *   softcapped = c·tanh(scaled / c)          (only when softcap c > 0)
 *   masked     = softcapped + mask           (mask: 0 or -inf from the causal
 *                                             rule and a boolean mask, plus
 *                                             an additive mask, plus ALiBi's
 *                                             slope_h·(j - p) where the key
 *                                             is seen)
 *   softmax    = row-wise softmax(masked)    (a row that is -inf throughout
 *                                             gives zeros, never NaN)
 *                with a sink s_h (optional):  exp(masked_j - m) / (Σ_j exp(masked_j - m)
 *                                             + exp(s_h - m)), m = max(row max, s_h):
 *                                             the sink takes part of the mass, no
 *                                             column is added, rows sum to less than 1
 *   output_h   = softmax·V_g                 (n_q, d_v)
 *
 *   concat = [output_0 … output_{H-1}]      (n_q, H·d_v)
 *   output = concat·W_O + b_O               (n_q, d_out), or concat without W_O
 *
 * Weights are stored (d_in, d_out) and applied as x·W, as the tutorials
 * write them.  A NULL projection weight means the identity: Q = Xq, which
 * is how Q = K = V = X (no weights at all) and directly given Q, K, V
 * (Xq = Q, Xk = K, Xv = V) are both expressed.
 *
 * Matrices are dense, row-major arrays of double.  Shapes are written
 * (rows, cols) next to every pointer.
 *
 * Batches: with dims.batch = B > 1, the call computes B independent
 * sequences at once.  Every input is then B of its matrices one after
 * another ((B, n_q, d_q_in) for Xq, (B, n_kv, d_k_in) for Xk, …), the weights
 * are shared, and out is (B, n_q, out_cols).  The mask may hold one matrix
 * per sequence (mha_mask.per_batch) and each sequence may have a key length
 * of its own (mha_config.kv_lens).
 *
 * Memory: the caller owns every input and the output array; the library
 * allocates only scratch space, which it frees before returning.  Matrices
 * handed to an observer are the library's: valid only during the call.
 *
 * Versions: every struct a caller fills or hands over to be filled
 * (mha_dims, mha_inputs, mha_weights, mha_config, mha_observer, mha_report,
 * mha_inputs_f32, mha_weights_f32, mha_grad_observer, mha_grads,
 * mha_grads_f32) starts with size_t size, which must be sizeof that struct
 * as this header declares it; the other fields start at zero, their
 * defaults, in an initialiser:
 *
 *   mha_config cfg = MHA_INIT(mha_config);          (all defaults)
 *   mha_dims d = { .size = sizeof(mha_dims), .n_q = 4, ... };
 *
 * A struct of an older, smaller version (a program built against an
 * earlier header) is read as far as its size goes, the fields it lacks
 * taking their defaults (zero), and a struct the library writes (the
 * report, a fault) is written only as far: such a program runs against a
 * newer library unchanged.  Every function refuses a struct larger than its
 * own (a newer header's) or of a size no version has (not whole size_t's)
 * with MHA_ERR_VERSION, before reading or writing any other field of any
 * argument: never read or written past the end of a caller's struct.  mha_mask, mha_window, mha_alibi and mha_rope are
 * parts of mha_config and carry no size of their own.  A struct only ever
 * grows at its end, and always by whole size_t's worth (the check compares
 * sizes: a field hidden in padding would pass it), its default zero, with
 * a new version (MHA_VERSION_MINOR while 0.x) and the same soname: older
 * programs keep running.  The
 * functions that return no status answer a wrong size as they answer NULL
 * (see each).
 *
 * Environment: the library reads two variables, when a call needs them,
 * and no others:
 *   OMP_NUM_THREADS  the number of threads when mha_config.threads is 0
 *                    (a number, or the first of a list: "4" or "4,2");
 *   MHA_KERNEL       "base" or "avx2": use no wider kernels than these,
 *                    though the CPU has them (for comparing and testing
 *                    the kernels; anything else, "neon" and "avx512"
 *                    among them: the widest the CPU runs, mha_kernel()
 *                    says which).
 */
#ifndef MHA_H
#define MHA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && defined(MHA_BUILDING)
#define MHA_API __attribute__((visibility("default")))
#else
#define MHA_API
#endif

#define MHA_VERSION_MAJOR 0
#define MHA_VERSION_MINOR 10
#define MHA_VERSION_PATCH 0
#define MHA_VERSION_STRING "0.10.0"
#define MHA_VERSION_NUMBER (MHA_VERSION_MAJOR * 10000 + MHA_VERSION_MINOR * 100 + \
			    MHA_VERSION_PATCH)

/* ---- status codes ------------------------------------------------------ */

typedef enum mha_status {
	MHA_OK = 0,
	MHA_ERR_NULL,      /* a required pointer is NULL */
	MHA_ERR_DIM,       /* a dimension is zero */
	MHA_ERR_HEADS,     /* heads is zero, or kv_heads does not divide heads */
	MHA_ERR_SHAPE,     /* an identity projection needs a width the input lacks */
	MHA_ERR_SCALE,     /* the scale is not a finite number */
	MHA_ERR_SOFTCAP,   /* the softcap is negative or not finite */
	MHA_ERR_MASK,      /* a mask entry is NaN or +inf */
	MHA_ERR_RANGE,     /* a value the run produces or holds is truly not finite
			      (the overflow rule: see mha_forward) */
	MHA_ERR_NOMEM,     /* scratch memory could not be allocated */
	MHA_ERR_TOOBIG,    /* a size does not fit in size_t */
	MHA_ERR_OBSERVER,  /* the observer asked to stop */
	MHA_ERR_KV_LEN,    /* kv_len is larger than n_kv */
	MHA_ERR_WINDOW,    /* a window side is below -1 */
	MHA_ERR_SINK,      /* a sink logit is not a finite number */
	MHA_ERR_ALIBI,     /* an ALiBi slope is not a finite number */
	MHA_ERR_ROPE,      /* a rotary setting is out of range (mode, theta, dim,
			      tables, a position) */
	MHA_ERR_VERSION,   /* a struct's size field is not its size in this
			      header: built against another version of mha.h */
	MHA_ERR_NORM,      /* a q/k norm setting is out of range (kind, eps, a
			      weight that is not finite) */
	MHA_ERR_MLA,       /* a latent attention setting or weight is out of
			      range or missing (mha_mla) */
	MHA_ERR_STOPPED,   /* the observer's stop answered yes (0.9.0) */
	MHA_ERR_PRECISION  /* a setting the low-precision reference does not
			      compute, or a precision it does not know (0.9.0) */
} mha_status;

/* A short lowercase description of a status, never NULL. */
MHA_API const char *mha_strerror(mha_status status);

/* The library's version, "MAJOR.MINOR.PATCH". */
MHA_API const char *mha_version(void);
/* The same as a number, MAJOR * 10000 + MINOR * 100 + PATCH (MHA_VERSION_NUMBER
 * of the header a program was built with, against the library it runs with). */
MHA_API unsigned mha_version_number(void);

/*
 * An initialiser for any struct with a size field: the size set, every
 * other field zero (its default).  mha_report rep = MHA_INIT(mha_report);
 */
#define MHA_INIT(type) { .size = sizeof(type) }

/* ---- shapes ------------------------------------------------------------ */

typedef struct mha_dims {
	size_t size;      /* sizeof(mha_dims): see "Versions" above */
	size_t n_q;       /* query positions: rows of Xq */
	size_t n_kv;      /* key/value positions: rows of Xk and Xv */
	size_t d_q_in;    /* columns of Xq (d_model); rows of W_Q */
	size_t d_k_in;    /* columns of Xk; rows of W_K */
	size_t d_v_in;    /* columns of Xv; rows of W_V */
	size_t heads;     /* query heads H, at least 1 */
	size_t kv_heads;  /* key/value heads G, dividing H; 0 means H */
	size_t d_k;       /* per-head width of Q and K: W_Q has H·d_k columns, W_K G·d_k */
	size_t d_v;       /* per-head width of V: W_V has G·d_v columns, W_O H·d_v rows */
	size_t d_out;     /* columns of W_O; ignored without W_O (output = concat) */
	size_t batch;     /* sequences B computed at once; 0 means 1 */
} mha_dims;

/* ---- inputs ------------------------------------------------------------ */

typedef struct mha_inputs {
	size_t size;      /* sizeof(mha_inputs): see "Versions" above */
	const double *xq; /* (B, n_q,  d_q_in) query source: X */
	const double *xk; /* (B, n_kv, d_k_in) key source: X, or X_kv for cross-attention */
	const double *xv; /* (B, n_kv, d_v_in) value source, usually the same array as xk */
} mha_inputs;

typedef struct mha_weights {
	size_t size;      /* sizeof(mha_weights): see "Versions" above */
	const double *W_Q; /* (d_q_in, H·d_k); NULL: identity (needs d_q_in == H·d_k) */
	const double *W_K; /* (d_k_in, G·d_k); NULL: identity (needs d_k_in == G·d_k) */
	const double *W_V; /* (d_v_in, G·d_v); NULL: identity (needs d_v_in == G·d_v) */
	const double *W_O; /* (H·d_v, d_out);  NULL: output = concat */
	const double *b_Q; /* (H·d_k) or NULL for zero */
	const double *b_K; /* (G·d_k) or NULL */
	const double *b_V; /* (G·d_v) or NULL */
	const double *b_O; /* (d_out) or NULL; ignored without W_O */
	/* latent attention's (mha_mla; ignored without it), DeepSeek's names: */
	const double *W_QA;  /* (d_q_in, q_rank) q_a_proj; NULL when q_rank is 0 */
	const double *W_KVA; /* (d_k_in, kv_rank + d_rope) kv_a_proj_with_mqa */
	const double *W_KVB; /* (kv_rank, H·(d_k − d_rope + d_v)) kv_b_proj */
} mha_weights;

/* ---- options ----------------------------------------------------------- */

/* The multiplier applied to the scores.  The tutorials disagree. */
typedef enum mha_scale_mode {
	MHA_SCALE_DK = 0,  /* 1/√d_k (the default, "Attention is all you need") */
	MHA_SCALE_DMODEL,  /* 1/√d_q_in (d_model) */
	MHA_SCALE_SEQLEN,  /* 1/√n_kv (the key sequence length) */
	MHA_SCALE_NONE,    /* 1 */
	MHA_SCALE_VALUE    /* mha_config.scale, used as given */
} mha_scale_mode;

/*
 * Causal masking: query i sees keys j <= i + offset, where the offset is
 * 0 (top-left), n_kv - n_q (bottom-right: the last query lines up with the
 * last key, as in decoding with a cache; kv_len - n_q when kv_len is set),
 * or mha_config.causal_offset (the query block starts at key position
 * offset, e.g. after offset cached keys; it may be negative).
 */
typedef enum mha_causal {
	MHA_CAUSAL_NONE = 0,
	MHA_CAUSAL_TOP_LEFT,
	MHA_CAUSAL_BOTTOM_RIGHT,
	MHA_CAUSAL_OFFSET
} mha_causal;

/*
 * A mask, shared by all heads ((n_q, n_kv)) or one per query head
 * ((H, n_q, n_kv), per_head = 1), and shared by all sequences of a batch
 * or one per sequence (per_batch = 1): (B|1, H|1, n_q, n_kv), the dimensions
 * of size 1 broadcast, as ONNX broadcasts a mask.  Either part, or both, may
 * be given: where allow is 0 the score becomes -inf; bias is added to the
 * scores (-inf blocks; NaN and +inf are refused with MHA_ERR_MASK).
 */
typedef struct mha_mask {
	const unsigned char *allow; /* (B|1, H|1, n_q, n_kv); nonzero: may attend; NULL: all */
	const double *bias;         /* (B|1, H|1, n_q, n_kv); NULL: zero */
	int per_head;               /* 0: one matrix for every head; 1: one per query head */
	int per_batch;              /* 0: the same for every sequence; 1: one per sequence */
} mha_mask;

/*
 * A sliding window (ONNX opset 25's left/right_window_size): the query at
 * position p = i + offset (offset: the causal rule's, 0 when not causal)
 * sees key j only if p - left <= j <= p + right; -1 leaves that side
 * unbounded.  On top of the causal rule, kv_len and the mask.  on = 0 (the
 * default) is no window; left = right = 0 is the diagonal alone.
 */
typedef struct mha_window {
	int on;              /* 0: no window */
	ptrdiff_t left;      /* keys before p seen: -1 unbounded, else >= 0 */
	ptrdiff_t right;     /* keys after p seen: -1 unbounded, else >= 0 */
} mha_window;

/*
 * ALiBi (Press et al., "Train short, test long"): query head h adds
 * slope_h·(j - p) to its softcapped score of each key j it sees, p = i +
 * offset the query's position as for the window; it is part of the mask
 * stage.  Without slopes, Press et al.'s for H heads (mha_alibi_slopes).
 */
typedef struct mha_alibi {
	int on;               /* 0: no ALiBi */
	const double *slopes; /* (H) one per query head, finite; NULL: Press et al.'s */
} mha_alibi;

/*
 * Press et al.'s ALiBi slopes for H query heads into out (H): with n the
 * largest power of two <= H, 2^(-8/n), 2^(-16/n), … 2^(-8), then, when H is
 * not a power of two, the first H - n odd-numbered slopes of the sequence
 * for 2n heads (2^(-4/n), 2^(-12/n), …), as BLOOM's build_alibi_tensor and
 * the paper's code.  MHA_ERR_NULL without out, MHA_ERR_HEADS when H is 0.
 */
MHA_API mha_status mha_alibi_slopes(double *out, size_t H);

/*
 * Rotary position embeddings (RoPE).  After the projections, each head's
 * block of Q and K turns by its row's position p: the first R features
 * (R = dim, even; 0 means d_k) form R/2 pairs (x1, x2), pair i turned by
 * the angle a = p·θ^(−2i/R):
 *
 *   x1' = x1·cos a − x2·sin a,   x2' = x1·sin a + x2·cos a
 *
 * MHA_ROPE_HALF pairs feature i with i + R/2 (GPT-NeoX, Llama: rotate_half),
 * MHA_ROPE_INTERLEAVED 2i with 2i+1 (GPT-J, RoFormer).  Features from R on
 * pass through.  The angle is computed in double exactly as
 * (double)p * pow(θ, -(double)(2·i) / (double)R), then cos() and sin().
 *
 * Given tables (ONNX RotaryEmbedding's form) replace the angles: cos and sin
 * are (rows, R/2) and row p is used for position p (0 <= p < rows).
 *
 * Positions: q_pos and k_pos as given (each >= 0), or by default key j at
 * j and query i at i + the causal offset (mha_rule: 0 without a causal
 * rule, n_kv − n_q bottom-right), as the window counts them: a run after
 * cached keys continues their positions.  Float32 runs turn their floats
 * in double with the same cos and sin and round each result once.
 */
typedef enum mha_rope_mode {
	MHA_ROPE_NONE = 0,
	MHA_ROPE_HALF,        /* pairs (i, i + R/2) */
	MHA_ROPE_INTERLEAVED  /* pairs (2i, 2i + 1) */
} mha_rope_mode;

/*
 * Rope scaling: the frequencies as Hugging Face's transformers computes them
 * from a model's rope_scaling (modeling_rope_utils.py), in double.  With
 * f_t = θ^(−2t/R) the default frequency of pair t, the angle becomes p·g_t
 * and both cos and sin are multiplied by the attention factor A (1 but for
 * YaRN and LongRoPE), so that Q·K's rotated part is scaled by A²:
 *
 *   LINEAR    g_t = f_t / factor
 *   DYNAMIC   (NTK) when seq_len > original_max, g_t = b^(−2t/R) with the
 *             base b = θ·(factor·seq_len/original_max − (factor − 1))^(R/(R−2));
 *             else f_t
 *   LLAMA3    w_t = 2π/f_t; g_t = f_t/factor where w_t > original_max/
 *             low_freq_factor, f_t where w_t < original_max/high_freq_factor,
 *             between them (1 − s)·f_t/factor + s·f_t with s =
 *             (original_max/w_t − low_freq_factor)/(high_freq_factor −
 *             low_freq_factor)
 *   YARN      e_t = 1/θ^(2t/R), i_t = 1/(factor·θ^(2t/R)); the correction
 *             range lo, hi = R·ln(original_max/(β·2π))/(2 ln θ) for β =
 *             beta_fast (32 when 0), beta_slow (1 when 0), floor(lo) and
 *             ceil(hi) unless no_truncate, then max(lo, 0), min(hi, R − 1);
 *             r_t = clamp((t − lo)/(hi − lo), 0, 1) (hi + 0.001 when equal);
 *             g_t = i_t·r_t + e_t·(1 − r_t).  A = attention_factor, else
 *             m(factor, mscale)/m(factor, mscale_all_dim) when both are set,
 *             else m(factor, 1), with m(s, k) = 1 for s <= 1, else
 *             0.1·k·ln s + 1
 *   LONGROPE  g_t = 1/(x_t·θ^(2t/R)), x = long_factor when seq_len >
 *             original_max, else short_factor (R/2 each).  A =
 *             attention_factor, else √(1 + ln factor / ln original_max)
 *             when factor > 1, else 1
 *
 * seq_len is the sequence the model sees (its largest position + 1), which
 * only DYNAMIC and LONGROPE read.  Not with given tables (cos, sin).
 */
typedef enum mha_rope_scaling_type {
	MHA_ROPE_SCALING_NONE = 0,
	MHA_ROPE_SCALING_LINEAR,
	MHA_ROPE_SCALING_DYNAMIC,
	MHA_ROPE_SCALING_LLAMA3,
	MHA_ROPE_SCALING_YARN,
	MHA_ROPE_SCALING_LONGROPE
} mha_rope_scaling_type;

typedef struct mha_rope_scaling {
	mha_rope_scaling_type type; /* MHA_ROPE_SCALING_NONE (the default): θ's own */
	double factor;              /* finite, > 0 (LONGROPE: > 0, or 0 for none) */
	double original_max;        /* original_max_position_embeddings, > 0 */
	double low_freq_factor, high_freq_factor; /* LLAMA3: > 0, different */
	double beta_fast, beta_slow;              /* YARN: 0 for 32 and 1 */
	double mscale, mscale_all_dim;            /* YARN: 0 for none */
	double attention_factor;    /* YARN, LONGROPE: > 0 given; 0 from factor */
	int no_truncate;            /* YARN: 1 keeps lo and hi unrounded (truncate false) */
	const double *short_factor; /* LONGROPE: (R/2) each, finite and > 0 */
	const double *long_factor;
	size_t seq_len;             /* DYNAMIC, LONGROPE: largest position + 1 */
} mha_rope_scaling;

typedef struct mha_rope {
	mha_rope_mode mode;      /* MHA_ROPE_NONE (the default): no rotation */
	double theta;            /* the base θ, finite and > 0; 0 means 10000 */
	size_t dim;              /* R: features turned per head, even, <= d_k; 0: d_k */
	const ptrdiff_t *q_pos;  /* (n_q) query positions, or NULL for the default */
	const ptrdiff_t *k_pos;  /* (n_kv) key positions, or NULL for 0 … n_kv−1 */
	const double *cos;       /* (rows, R/2) given cos table, with sin; NULL: from θ */
	const double *sin;       /* (rows, R/2) given sin table */
	size_t rows;             /* rows of cos and sin: positions 0 … rows−1 */
	mha_rope_scaling scaling; /* the frequencies scaled (above); type 0: θ's */
} mha_rope;

/* What the rotation uses, for a caller that shows it: pair t's frequency
 * (θ^(−2t/R), or as rope.scaling scales it; R the features turned) and
 * the factor on cos and sin (1 but for YaRN and LongRoPE).  r as mha_check
 * accepts it. */
MHA_API double mha_rope_frequency(const mha_rope *r, size_t R, size_t t);
MHA_API double mha_rope_attention_factor(const mha_rope *r);

/*
 * Q/K normalisation (Qwen3, Gemma 3, OLMo 2, Cohere Command R+): after the
 * projections and before the rotation, each row of Q and of K is
 * normalised per head (its d_k features) or over the whole row (H·d_k of
 * Q, G·d_k of K: OLMo 2).  With m the features normalised together:
 *
 *   RMS     y = x / √(Σx²/m + eps) · w
 *   RMS1P   y = x / √(Σx²/m + eps) · (1 + w)      (Gemma's weights)
 *   LAYER   y = (x − μ) / √(Σ(x − μ)²/m + eps) · w,  μ = Σx/m (no bias)
 *
 * each sum in ascending order, in double; float32 runs read their floats
 * as double and round each result once.  The weights: q_weight and
 * k_weight, NULL for none (a factor of 1, in every kind); per_head 0: one
 * (d_k) vector that every head shares, 1: a block per head, (H·d_k) for Q
 * and (G·d_k) for K (Cohere's (heads, head_dim)); over_all: (H·d_k) and
 * (G·d_k) whatever per_head says.  A row whose sum of squares overflows is
 * summed again scaled by a power of two; a row that still normalises to a
 * number that is not finite (all zeros with eps 0) is MHA_ERR_RANGE.
 */
typedef enum mha_norm_kind {
	MHA_NORM_NONE = 0,
	MHA_NORM_RMS,
	MHA_NORM_RMS1P,
	MHA_NORM_LAYER
} mha_norm_kind;

typedef struct mha_qk_norm {
	mha_norm_kind kind;     /* MHA_NORM_NONE (the default): no normalisation */
	int over_all;           /* 0: each head's d_k features; 1: the whole row */
	int per_head;           /* the weights' layout (above) */
	double eps;             /* added to the mean square (variance), finite, >= 0 */
	const double *q_weight; /* Q's weights, finite, or NULL: none */
	const double *k_weight; /* K's */
} mha_qk_norm;

/*
 * Multi-head latent attention (MLA: DeepSeek-V2 and V3, Kimi K2).  The
 * queries, keys and values come from low-rank latents, with each head's
 * d_k = d_nope + d_rope features in two parts, only the second turned:
 *
 *   c_q      = Xq·W_QA                      (n_q,  q_rank)   q_a_proj
 *   c_q_norm = RMSNorm(c_q)·q_a_norm        (n_q,  q_rank)   q_a_layernorm
 *   Q0       = c_q_norm·W_Q                 (n_q,  H·d_k)    q_b_proj
 *              (q_rank 0: Q0 = Xq·W_Q, one q_proj)
 *   q_nope, q_pe = each head's block of Q0 split at d_nope
 *   [c_kv, k_pe] = Xk·W_KVA                 (n_kv, kv_rank + d_rope)
 *   c_kv_norm = RMSNorm(c_kv)·kv_a_norm     (n_kv, kv_rank)  kv_a_layernorm
 *   [k_nope_h, v_h] = c_kv_norm·W_KVB's block h  (d_nope, then d_v columns)
 *   q_pe_rot, k_pe_rot = q_pe, k_pe turned by cfg->rope (R = d_rope), k_pe
 *              one (n_kv, d_rope) matrix that every head shares
 *   Q_h = [q_nope_h, q_pe_rot_h],  K_h = [k_nope_h, k_pe_rot],  V_h = v_h
 *
 * and then attention as ever: H heads of d_k and d_v (kv_heads is H), the
 * scale of cfg (1/√d_k by default), masks, causal rule, window, sinks,
 * softcap, W_O.  RMSNorm is y = x / √(Σx²/m + eps)·w in double, each
 * result rounded once.  With MHA_ROPE_INTERLEAVED the pairs are (2i, 2i+1)
 * and the turned rows are laid out as DeepSeek-V3's Hugging Face code
 * returns them: the pairs' first features, then their second (the scores
 * are the same either way); MHA_ROPE_HALF pairs (i, i + R/2).
 *
 * The absorbed form (absorbed = 1), as inference engines run it: W_KVB's
 * key block folded into each head's query, q_h' = [q_nope_h·W_UK_hᵀ,
 * q_pe_rot_h] (kv_rank + d_rope), one shared key [c_kv_norm, k_pe_rot]
 * and value c_kv_norm (multi-query attention over the latent), and the
 * value block folded into W_O: W_O' = each head's W_UV_h·(W_O's block h)
 * (without W_O, the blocks W_UV_h themselves).  The same numbers to
 * rounding; the stages Q, K, V, the heads', concat then are the latent
 * ones, and k_nope is not computed.  The backward pass always
 * differentiates the expanded form.
 *
 * Given: W_Q (q_b_proj or q_proj), W_QA when q_rank > 0, W_KVA and W_KVB;
 * W_K, W_V, b_Q, b_K, b_V NULL; d_v_in = d_k_in (xv is not read: the
 * values come from Xk).  The q/k norm is not used with it.
 */
typedef struct mha_mla {
	int on;                  /* 0 (the default): ordinary attention */
	int absorbed;            /* 1: the absorbed form (above) */
	size_t q_rank;           /* q_lora_rank; 0: W_Q alone (DeepSeek-V2-Lite) */
	size_t kv_rank;          /* kv_lora_rank, >= 1 */
	size_t d_rope;           /* qk_rope_head_dim, <= d_k; even when turned */
	double eps;              /* the two RMSNorms', finite, >= 0 */
	const double *q_a_norm;  /* (q_rank) q_a_layernorm's weight, finite; NULL: ones */
	const double *kv_a_norm; /* (kv_rank) kv_a_layernorm's */
} mha_mla;

/*
 * All fields zero is the default: scale 1/√d_k, not causal, no softcap, no
 * mask, no window, every key valid, no sinks, no ALiBi, no rope, no q/k norm.
 */
typedef struct mha_config {
	size_t size;      /* sizeof(mha_config): see "Versions" above */
	mha_scale_mode scale_mode;
	double scale;       /* the multiplier when scale_mode is MHA_SCALE_VALUE */
	mha_causal causal;
	ptrdiff_t causal_offset; /* for MHA_CAUSAL_OFFSET */
	double softcap;     /* 0: none; c > 0: scores become c·tanh(scores / c) */
	mha_mask mask;
	size_t kv_len;      /* 0: all n_kv keys; else keys j >= kv_len are masked
			       (padding after a shorter sequence in a batch) */
	int threads;        /* 0: OMP_NUM_THREADS when set (a number, or the
			       first of a list), else the processors this
			       process may run on (its affinity mask); at most
			       4096 are used, and never more than the fast path
			       has blocks of work (a head's 96 queries, or a
			       product's 96 rows); the result is the same bits
			       whatever the number.  The threads are the
			       library's own (POSIX threads, not OpenMP), started
			       on first use and kept, asleep when idle, until the
			       program ends.  One call uses them at a time: a
			       call made while another thread's call has them
			       (mha is safe to call from several threads at
			       once) runs on its caller's thread alone, with the
			       same results.  In a child of fork() the library
			       starts threads of its own.  They end with the
			       process (exit, or return from main): a main
			       thread that calls pthread_exit() leaves them
			       asleep and the process running, as OpenMP's
			       would. */
	int exact;          /* 1: the plain path even when no intermediate is
			       watched (see mha_forward) */
	mha_window window;  /* sliding window; on = 0: none */
	const double *sinks; /* (H) one logit per query head (gpt-oss's attention
				sinks), finite; NULL: none.  Each joins its head's
				softmax denominator as exp(sink - m); a row whose
				keys are all masked still gets zeros (the sink
				alone would take all the mass: weights 0, output 0) */
	const size_t *kv_lens; /* (B) each sequence's key length, at most n_kv, 0
				  for all n_kv keys; NULL: kv_len for every
				  sequence.  Keys j >= kv_lens[b] are masked in
				  sequence b, and bottom-right causal lines up
				  with kv_lens[b] (mha_causal_offset) */
	mha_alibi alibi;    /* ALiBi; on = 0: none */
	mha_rope rope;      /* rotary embeddings; mode MHA_ROPE_NONE: none */
	mha_qk_norm norm;   /* q/k normalisation; kind MHA_NORM_NONE: none */
	mha_mla mla;        /* latent attention; on = 0: none */
	size_t precision;   /* (0.9.0) an mha_precision: the low-precision
			       reference (mha_lowp_round); 0, float64: none */
	size_t lowp_scale;  /* (0.10.0) an mha_lowp_scale: how that reference
			       applies the scale (ports differ; all correct) */
	size_t lowp_sum;    /* (0.10.0) an mha_lowp_sum: where it sums each
			       softmax row (the type's: a port's mistake) */
#ifdef MHA_ABI_TEST_GROWN
	/* the next version's field, in a test build only (make test-abi): a
	 * program built without it must run against that library unchanged */
	size_t abi_test_grown;
#endif
} mha_config;

/*
 * The low-precision reference (0.9.0): with mha_config.precision bfloat16
 * or float16, mha_forward computes as Hugging Face's eager attention does
 * in that type on PyTorch (X, weights and every step rounded to the type
 * where PyTorch rounds them, each product summed in float32; lowp.c lists
 * each rounding point), and every stage it hands over holds values of the
 * type.  The plain path only (no threads); not with ALiBi, a q/k norm or
 * latent attention (MHA_ERR_PRECISION), nor in float32 or the backward
 * (0.10.0: with RoPE scaling, the frequencies made floats).  mha_lowp_round: v rounded to the type, ties to even,
 * infinity past its largest value (v itself for float64 or an unknown p).
 */
typedef enum mha_precision {
	MHA_PRECISION_F64 = 0,
	MHA_PRECISION_BF16,
	MHA_PRECISION_FP16
} mha_precision;
/*
 * (0.10.0) How a port in the type applies the scale s, each as correct as
 * the others: PRODUCT, as PyTorch multiplies a tensor by a Python float
 * (score·s in float32, rounded); ROUNDED, s rounded to the type first
 * (a scale held in a tensor of the type); DIVIDED, the score divided by
 * 1/s rounded to the type (score / √d_k with √d_k a tensor of the type).
 * And where each softmax row's sum of exponentials is kept: FLOAT32, as
 * PyTorch's softmax does, or TYPE, each addition rounded to the type (a
 * port's mistake, computed so that it can be named).  Either set with
 * precision float64 is MHA_ERR_PRECISION.
 */
typedef enum mha_lowp_scale {
	MHA_LOWP_SCALE_PRODUCT = 0,
	MHA_LOWP_SCALE_ROUNDED,
	MHA_LOWP_SCALE_DIVIDED
} mha_lowp_scale;
typedef enum mha_lowp_sum {
	MHA_LOWP_SUM_FLOAT32 = 0,
	MHA_LOWP_SUM_TYPE
} mha_lowp_sum;
MHA_API double mha_lowp_round(double v, mha_precision p);

/* ---- intermediates ----------------------------------------------------- */

/*
 * The stages, in one list: each with its name (mha_stage_name) and its
 * shape.  X(ID, "name") for each; the enum and the names are made from it.
 */
#define MHA_STAGE_LIST(X) \
	X(Q, "Q")                     /* (n_q,  H·d_k)  whole projection, head < 0 */ \
	X(K, "K")                     /* (n_kv, G·d_k) */ \
	X(V, "V")                     /* (n_kv, G·d_v) */ \
	X(HEAD_Q, "head_Q")           /* (n_q,  d_k)    head h's column block of Q */ \
	X(HEAD_K, "head_K")           /* (n_kv, d_k)    the block of K that head h uses */ \
	X(HEAD_V, "head_V")           /* (n_kv, d_v) */ \
	X(SCORES, "scores")           /* (n_q, n_kv)    Q_h·K_gᵀ */ \
	X(SCALED, "scaled")           /* (n_q, n_kv)    × scale */ \
	X(SOFTCAPPED, "softcapped")   /* (n_q, n_kv)    c·tanh(scaled / c); only with a softcap */ \
	X(MASK, "mask")               /* (n_q, n_kv)    what is added: 0, -inf or the bias
					 (causal, window, kv_len and the mask together),
					 plus ALiBi's slope_h·(j - p) */ \
	X(MASKED, "masked")           /* (n_q, n_kv)    softcapped + mask */ \
	X(SOFTMAX, "softmax")         /* (n_q, n_kv)    attention weights */ \
	X(HEAD_OUTPUT, "head_output") /* (n_q, d_v)     softmax·V_g */ \
	X(CONCAT, "concat")           /* (n_q, H·d_v),  head < 0 */ \
	X(OUTPUT, "output")           /* (n_q, d_out or H·d_v), head < 0 */ \
	X(Q_ROT, "q_rot")             /* (n_q,  H·d_k)  Q turned by position (rope), head < 0;
					 handed over after V, before the heads */ \
	X(K_ROT, "k_rot")             /* (n_kv, G·d_k)  K turned likewise */ \
	X(Q_NORM, "q_norm")           /* (n_q,  H·d_k)  Q normalised (mha_qk_norm), head < 0;
					 handed over after V, before q_rot, which turns it */ \
	X(K_NORM, "k_norm")           /* (n_kv, G·d_k)  K normalised */ \
	X(C_Q, "c_q")                 /* latent attention's (mha_mla), head < 0, handed over \
					 in this order before Q: (n_q, q_rank) Xq·W_QA */ \
	X(C_Q_NORM, "c_q_norm")       /* (n_q, q_rank)   c_q normalised */ \
	X(Q_NOPE, "q_nope")           /* (n_q, H·d_nope) each head's unturned part */ \
	X(Q_PE, "q_pe")               /* (n_q, H·d_rope) each head's part to turn */ \
	X(Q_PE_ROT, "q_pe_rot")       /* (n_q, H·d_rope) turned */ \
	X(C_KV, "c_kv")               /* (n_kv, kv_rank) the latent of Xk·W_KVA */ \
	X(C_KV_NORM, "c_kv_norm")     /* (n_kv, kv_rank) normalised */ \
	X(K_PE, "k_pe")               /* (n_kv, d_rope)  the shared key part to turn */ \
	X(K_PE_ROT, "k_pe_rot")       /* (n_kv, d_rope)  turned */ \
	X(K_NOPE, "k_nope")           /* (n_kv, H·d_nope) c_kv_norm·W_KVB's key blocks */

#define MHA_STAGE_ENUM_(id, name) MHA_STAGE_##id,
typedef enum mha_stage {
	MHA_STAGE_LIST(MHA_STAGE_ENUM_)
	MHA_STAGE_COUNT
} mha_stage;

/* A stage's bit of the 32-bit wanted below: stages 0 to 31 alone. */
#define MHA_STAGE_BIT(stage) (1u << (stage))

/*
 * A set of stages (0.8.0), forward's or the gradients': MHA_STAGE_SET(s)
 * for each, any of 64 (the library holds each list to that with static
 * asserts).  An observer's stages say which to hand over; a program that
 * sets only the older wanted keeps running, with the first 32.
 */
typedef unsigned long long mha_stages;
#define MHA_STAGE_SET(stage) (1ull << (stage))

/* A lowercase name for a stage ("scores", "head_output", …), never NULL. */
MHA_API const char *mha_stage_name(mha_stage stage);

/*
 * Called once per wanted stage, in the order of the computation: Q, K, V,
 * (with a q/k norm) q_norm and k_norm, (with rope) q_rot and k_rot, then
 * for each head in turn its Q, K, V blocks, scores, scaled, softcapped,
 * mask, masked, softmax and output, then concat and output.  head is the
 * query head (0-based), or -1 for whole-model stages.  m is (rows, cols),
 * row-major, owned by the library and valid only during the call.  Return
 * 0 to go on; anything else stops the computation with MHA_ERR_OBSERVER.
 *
 * With a batch every stage is handed over once per sequence, one
 * sequence's matrix at a time (Q is (n_q, H·d_k) of that sequence), and
 * the stages of sequence b follow a call sequence(ctx, b) when that is set.
 * The plain path takes the sequences in turn, all stages of each; the fast
 * path hands over Q, K and V of every sequence, then every concat, then
 * every output, each group in sequence order.
 */
typedef int (*mha_observe_fn)(void *ctx, mha_stage stage, int head,
			      const double *m, size_t rows, size_t cols);

/* The sequence (0-based) the next stages belong to; nonzero stops as fn does. */
typedef int (*mha_sequence_fn)(void *ctx, size_t sequence);

/*
 * How far a call has come (0.7.0): done, the fraction of its work finished,
 * from 0 to 1 and never less than the time before, its last call 1 when the
 * call ends well; phase what it is doing ("projections", "attention",
 * "output", "forward", "backward", "gradients", "done"), a string of the
 * library's.  The work is counted in multiply-adds, estimated up front from
 * the shapes and the keys each query sees, and told as pieces of it end:
 * about a thousand calls at most, always on the calling thread (never from
 * the library's workers), so the function may print.  It cannot stop the
 * call (stop, below, can).  Told for the plain and the fast path alike; not for the float32
 * functions, which take no observer.
 */
typedef void (*mha_progress_fn)(void *ctx, const char *phase, double done);

/*
 * Whether to stop (0.9.0): asked where progress would be told (on the
 * calling thread, as the work grows by a thousandth), whether or not a
 * progress function is set.  Nonzero stops the call at once: the work not
 * begun is skipped by every thread, what was begun ends, and the call fails
 * with MHA_ERR_STOPPED, its outputs undefined.  For a front's Ctrl-C.
 */
typedef int (*mha_stop_fn)(void *ctx);

typedef struct mha_observer {
	size_t size;      /* sizeof(mha_observer): see "Versions" above */
	mha_observe_fn fn;
	void *ctx;
	unsigned wanted; /* MHA_STAGE_BIT()s of the stages to hand over */
	mha_sequence_fn sequence; /* NULL: not told (fine without a batch) */
	mha_progress_fn progress; /* NULL: not told (0.7.0); fn may be NULL with it */
	void *progress_ctx;
	mha_stages stages; /* (0.8.0) MHA_STAGE_SET()s of the stages to hand over;
			      0: wanted's */
	mha_stop_fn stop;  /* (0.9.0) NULL: never stopped; also for float32 */
	void *stop_ctx;
#ifdef MHA_ABI_TEST_GROWN
	size_t abi_test_grown; /* as mha_config's */
#endif
} mha_observer;

/* What a run noticed that is not an error. */
typedef struct mha_report {
	size_t size;      /* sizeof(mha_report): see "Versions" above */
	size_t blocked_rows;   /* query rows, over all heads and sequences, whose every
				  key was masked */
	int first_blocked_head;    /* the first such row's head, -1 if none */
	size_t first_blocked_row;  /* and its row */
	size_t first_blocked_sequence; /* and its sequence (0 without a batch) */
	double scale;          /* the multiplier that was applied to the scores */
	ptrdiff_t causal_offset;   /* causal: query i saw keys j <= i + causal_offset
				      (bottom-right worked out); 0 when not causal.
				      Sequence 0's: with kv_lens see mha_causal_offset */
	int fast_path;         /* 1: the fast path computed it (always in float32),
				  0: the plain path (see mha_forward) */
} mha_report;

/* ---- the computation --------------------------------------------------- */

/* Checks dims and cfg as mha_forward() would, without computing: the
 * sizes, every setting and every number cfg points at (mask, sinks, ALiBi
 * slopes, rotary tables' positions). */
MHA_API mha_status mha_check(const mha_dims *dims, const mha_config *cfg);

/*
 * Which rule a setting broke, and where, for a caller that words its own
 * message (the option, the file, the element): mha_check_fault() is
 * mha_check() that also says so.  index is the entry at fault: of the mask
 * as cfg->mask lays it out, (B|1, H|1, n_q, n_kv); a head of sinks or
 * slopes; a key or a query (of sequence 'sequence') whose rotary position
 * ('position') is below 0 or past the tables' rows; a sequence of kv_lens.
 */
typedef enum {
	MHA_FAULT_NONE = 0,        /* no fault, or one only the status tells */
	MHA_FAULT_MASK_ENTRY,      /* mask.bias[index] is NaN or +inf */
	MHA_FAULT_SINK,            /* sinks[index] is not finite */
	MHA_FAULT_ALIBI_SLOPE,     /* alibi.slopes[index] is not finite */
	MHA_FAULT_KV_LEN,          /* kv_len (index 0) or kv_lens[index] past n_kv */
	MHA_FAULT_ROPE_MODE,       /* rope.mode is none of mha_rope_mode */
	MHA_FAULT_ROPE_THETA,      /* rope.theta is not finite and above 0 */
	MHA_FAULT_ROPE_DIM_WIDE,   /* rope.dim is past d_k */
	MHA_FAULT_ROPE_DIM_ODD,    /* R (rope.dim, else d_k) is odd */
	MHA_FAULT_ROPE_TABLES,     /* one table without the other, or no rows */
	MHA_FAULT_ROPE_KEY_POSITION,   /* key index's position is out of range */
	MHA_FAULT_ROPE_QUERY_POSITION, /* query index's (of sequence) is */
	MHA_FAULT_ROPE_SCALING,    /* rope.scaling: an unknown type, a value out of its
				      range (mha_rope_scaling), or with given tables */
	MHA_FAULT_NORM_KIND,       /* norm.kind is none of mha_norm_kind */
	MHA_FAULT_NORM_EPS,        /* norm.eps is not finite and >= 0 */
	MHA_FAULT_NORM_Q_WEIGHT,   /* norm.q_weight[index] is not finite */
	MHA_FAULT_NORM_K_WEIGHT,   /* norm.k_weight[index] is not finite */
	MHA_FAULT_MLA_SHAPE,       /* mla: kv_rank 0, d_rope past d_k or odd when
				      turned, rope.dim not 0 or d_rope, kv_heads not
				      H, d_v_in not d_k_in, or a q/k norm with it */
	MHA_FAULT_MLA_EPS,         /* mla.eps is not finite and >= 0 */
	MHA_FAULT_MLA_Q_A_NORM,    /* mla.q_a_norm[index] is not finite */
	MHA_FAULT_MLA_KV_A_NORM    /* mla.kv_a_norm[index] is not finite */
} mha_fault_kind;

typedef struct mha_fault {
	size_t size;        /* sizeof(mha_fault) */
	mha_fault_kind kind;
	size_t index;       /* the entry at fault (above) */
	size_t sequence;    /* a query's sequence, 0-based */
	ptrdiff_t position; /* a rotary position out of range */
} mha_fault;

/* mha_check(), and what it refused in *fault (may be NULL; its size set
 * as every struct's): MHA_FAULT_NONE when the status alone says it (or
 * MHA_OK). */
MHA_API mha_status mha_check_fault(const mha_dims *dims, const mha_config *cfg, mha_fault *fault);

/* Columns of the output: d_out with W_O (has_wo != 0), else H·d_v; 0
 * without dims or for a wrong dims->size. */
MHA_API size_t mha_output_cols(const mha_dims *dims, int has_wo);

/* The multiplier cfg applies to the scores for these dims; NaN for a
 * wrong size. */
MHA_API double mha_scale_of(const mha_dims *dims, const mha_config *cfg);

/*
 * The causal offset of sequence b (0-based): query i sees keys j <= i +
 * offset; bottom-right uses that sequence's key length (kv_lens[b]).  0
 * when not causal or for a wrong size.  dims and cfg as mha_check()
 * accepts them.
 */
MHA_API ptrdiff_t mha_causal_offset(const mha_dims *dims, const mha_config *cfg, size_t b);

/*
 * Multi-head attention.  out is (B, n_q, mha_output_cols()) and caller-owned.
 * w may be NULL (all identity, no W_O), cfg may be NULL (defaults), obs may
 * be NULL, and rep may be NULL.  On error out's contents are unspecified.
 *
 * Two paths give the same numbers to rounding.  When obs wants a per-head
 * stage (or cfg->exact is set), the plain path computes every stage row by
 * row, summing in the order the formula is written.  Otherwise the fast
 * path runs: blocked, vectorised matrix products, the attention fused with
 * an online softmax (no (n_q, n_kv) matrix, memory O((n_q + n_kv)·d)),
 * key blocks outside the causal rule and the window skipped (a window of
 * width w costs about n_q·w), cfg->threads threads; it still hands over Q, K,
 * V, concat and output.  Its projections are one product over the rows of
 * every sequence, and its threads share batch × heads × query blocks.
 * Past a few MiB of Q, K and V, and unless obs wants Q, K or V (turned or
 * not) whole, it takes the heads in groups (some key/value heads and their
 * query heads): only a group's columns of Q, K and V are held, the heads'
 * outputs go into out, and W_O is applied there in place when d_out is
 * H·d_v; the same numbers to the bit.
 *
 * Overflow: the run fails with MHA_ERR_RANGE exactly when a value it
 * produces or must hold is truly not finite, the same on both paths and
 * in both element types (each in its own range):
 *   - Q, K, V, q_rot, k_rot, concat, output: any entry.  An entry whose
 *     partial sums overflowed is summed again, rescaled, and counts only
 *     if the sum itself is too large (X·W with X = [a, a, -a], W = ones,
 *     a = 1e308 is a, not an overflow).
 *   - scores, scaled, softcapped, mask (ALiBi's slope·(j - p)), masked:
 *     only where the query may see the key.  A masked-out key (the mask
 *     -inf or allow 0, j >= kv_len, outside the window, past
 *     the causal diagonal) never counts, whatever its score: its masked
 *     value is -inf (never NaN), its weight 0.  Its score is still handed
 *     to an observer as computed, possibly inf or NaN.
 *   - softmax, head outputs: never.  Each head output is an average of
 *     values, so no larger than the largest |V| entry; a sum that overflows
 *     on the way is redone with the weights scaled down.
 * A mask bias (and ALiBi's term) is added to the score in double; in
 * float32 the sum must fit a float.
 */
MHA_API mha_status mha_forward(double *out, const mha_dims *dims,
			       const mha_inputs *in, const mha_weights *w,
			       const mha_config *cfg, const mha_observer *obs,
			       mha_report *rep);

/* ---- float32 ------------------------------------------------------------ */

typedef struct mha_inputs_f32 {
	size_t size;      /* sizeof(mha_inputs_f32): see "Versions" above */
	const float *xq, *xk, *xv; /* as in mha_inputs */
} mha_inputs_f32;

typedef struct mha_weights_f32 {
	size_t size;      /* sizeof(mha_weights_f32): see "Versions" above */
	const float *W_Q, *W_K, *W_V, *W_O, *b_Q, *b_K, *b_V, *b_O; /* as in mha_weights */
	const float *W_QA, *W_KVA, *W_KVB;
} mha_weights_f32;

/*
 * The fast path in float32: the same computation and options (the mask
 * stays double), no intermediates.  Agrees with mha_forward() to about
 * 1e-5 relative on well-scaled inputs.
 */
MHA_API mha_status mha_forward_f32(float *out, const mha_dims *dims,
				   const mha_inputs_f32 *in, const mha_weights_f32 *w,
				   const mha_config *cfg, mha_report *rep);


/*
 * The most mha_forward() (f32 = 0) or mha_forward_f32() (f32 = 1) has
 * allocated at any one time, for these dims and options when obs wants the
 * stages in wanted; SIZE_MAX when that does not fit in a size_t (or
 * mha_check() refuses dims and cfg).  An upper
 * bound: every allocation the run makes, at the block sizes, paddings and
 * thread count the kernels use, plus 64 bytes of allocator overhead each,
 * taking every weight and bias as given (without them the caller's arrays
 * serve, and less is allocated).  The unit tests hold it to within a
 * quarter (and 4 KiB) of the measured peak.  Not counted: the caller's
 * arrays, what an observer keeps, and the threads' stacks.  For refusing a
 * run up front rather than failing in it.  Between calls the library keeps
 * up to 8 of its freed blocks of 256 KiB or more (64 MiB in all) mapped, for
 * a next call of the same shape to reuse without faulting fresh pages in;
 * they go when reused, pushed out, or at exit.
 */
MHA_API size_t mha_memory(const mha_dims *dims, const mha_config *cfg, unsigned wanted, int f32);
/* The same for a set of any of the stages (0.8.0). */
MHA_API size_t mha_memory_stages(const mha_dims *dims, const mha_config *cfg, mha_stages stages,
				 int f32);

/*
 * Rotary embeddings alone (as ONNX's RotaryEmbedding): out (rows, heads·d)
 * = x with each head's block of d features turned as cfg->rope says, row r
 * at position pos[r] (pos NULL: r).  Only cfg->rope is looked at, and its
 * q_pos and k_pos are not used; cfg->rope.dim <= d.  out may be x.
 * MHA_ERR_ROPE for a bad setting or a position out of range, MHA_ERR_RANGE
 * when a result is not finite.
 */
MHA_API mha_status mha_rope_apply(double *out, const double *x, size_t rows, size_t heads,
				  size_t d, const mha_config *cfg, const ptrdiff_t *pos);

/* The kernels the fast path uses here: "avx512", "avx2", "neon" (arm64) or "base". */
MHA_API const char *mha_kernel(void);

/* ---- the backward pass -------------------------------------------------- */

/*
 * Every gradient of the layer (mha_backward): given the upstream gradient
 * dO = dL/d(output), the gradients of the inputs, the weights, the biases
 * and the sink logits.  Per head h (g its key/value head), with P its
 * softmax and O_h its output as mha_forward computes them:
 *
 *   dconcat  = dO·W_Oᵀ                (dO itself without W_O); dO_h its block h
 *   dV_h     = Pᵀ·dO_h                (n_kv, d_v)
 *   dP       = dO_h·V_gᵀ              (n_q, n_kv)
 *   D        = rowsum(dO_h ∘ O_h)     (n_q, 1)
 *   dS       = P ∘ (dP − D)           the gradient of masked (and of softcapped:
 *                                     the mask and ALiBi add constants); 0 where
 *                                     the key is masked out
 *   dscaled  = dS ∘ (1 − tanh²(scaled/c))  (the softcap's derivative; dS without one)
 *   dscores  = dscaled × scale
 *   dQ_h     = dscores·K_g            (with rope: of q_rot's block)
 *   dK_h     = dscoresᵀ·Q_h           (with rope: of k_rot's block)
 *   dsink_h  = −Σ_i p_sink,i·D_i      p_sink,i = exp(s_h − m_i)/sum_i, the mass the
 *                                     sink took from row i
 *
 * dK and dV of key/value head g sum dK_h and dV_h over its query heads, in
 * ascending order; with rope dQ and dK turn back (the inverse rotation, by
 * the same angles).  With a q/k norm, per normalised group of m features x
 * (μ 0 but for LAYER), r = 1/√(mean square + eps), x̂ = (x − μ)·r, w' the
 * factor (w, 1 + w, or 1) and dy the gradient of the normalised row:
 *   dx = r·(g − x̂·mean(g ∘ x̂))                (RMS, RMS1P; g = dy ∘ w')
 *   dx = r·(g − mean(g) − x̂·mean(g ∘ x̂))      (LAYER)
 *   dw += dy ∘ x̂                               (summed over rows, and over
 *                                              heads for a shared vector)
 * in double.  Then through the projections: dW_Q = Xqᵀ·dQ, db_Q =
 * the column sums of dQ, dXq = dQ·W_Qᵀ (dQ itself without W_Q), and so for
 * K and V; dW_O = concatᵀ·dO, db_O = the column sums of dO.  A batch: the
 * weights' and sinks' gradients sum over the sequences (ascending), the
 * inputs' are per sequence.  A query row whose every key is masked has
 * weights 0 and output 0 whatever its scores: all its gradients are 0,
 * never NaN.
 */
/* The gradient stages, in one list as MHA_STAGE_LIST: X(ID, "name"). */
#define MHA_GRAD_LIST(X) \
	X(DOUTPUT, "doutput")         /* (n_q, out_cols) dO as used (all ones when not given), head < 0 */ \
	X(DCONCAT, "dconcat")         /* (n_q, H·d_v)  dO·W_Oᵀ, head < 0 */ \
	X(HEAD_P, "P")                /* (n_q, n_kv)   the head's softmax, recomputed */ \
	X(HEAD_O, "O")                /* (n_q, d_v)    the head's output, recomputed */ \
	X(HEAD_DO, "dO")              /* (n_q, d_v)    dO_h, the head's block of dconcat */ \
	X(HEAD_DV, "dV")              /* (n_kv, d_v)   Pᵀ·dO_h, this query head's part */ \
	X(HEAD_DP, "dP")              /* (n_q, n_kv)   dO_h·V_gᵀ */ \
	X(HEAD_D, "D")                /* (n_q, 1)      rowsum(dO_h ∘ O_h) */ \
	X(HEAD_DS, "dS")              /* (n_q, n_kv)   P ∘ (dP − D) */ \
	X(HEAD_DSCALED, "dscaled")    /* (n_q, n_kv)   dS ∘ (1 − tanh²(scaled/c)); only with a softcap */ \
	X(HEAD_DSCORES, "dscores")    /* (n_q, n_kv)   dscaled × scale */ \
	X(HEAD_DQ, "dQ")              /* (n_q, d_k)    dscores·K_g */ \
	X(HEAD_DK, "dK")              /* (n_kv, d_k)   dscoresᵀ·Q_h, this query head's part */ \
	X(DQ_ROT, "dq_rot")           /* (n_q, H·d_k)  the gradient of q_rot (rope only), head < 0 */ \
	X(DK_ROT, "dk_rot")           /* (n_kv, G·d_k) the gradient of k_rot (rope only), head < 0 */ \
	X(DQ, "dQ")                   /* (n_q, H·d_k)  the gradient of Q, head < 0 */ \
	X(DK, "dK")                   /* (n_kv, G·d_k) the gradient of K, head < 0 */ \
	X(DV, "dV")                   /* (n_kv, G·d_v) the gradient of V, head < 0 */ \
	X(DQ_NORM, "dq_norm")         /* (n_q, H·d_k)  the gradient of q_norm (a q/k norm only),
					 handed over before dQ, head < 0 */ \
	X(DK_NORM, "dk_norm")         /* (n_kv, G·d_k) the gradient of k_norm, before dK */ \
	X(DC_Q, "dc_q")               /* latent attention's, head < 0, after dV: (n_q, q_rank) */ \
	X(DC_KV, "dc_kv")             /* (n_kv, kv_rank) the gradient of c_kv */ \
	X(DK_PE, "dk_pe")             /* (n_kv, d_rope)  of k_pe (summed over the heads, turned back) */

#define MHA_GRAD_ENUM_(id, name) MHA_GRAD_##id,
typedef enum mha_grad_stage {
	MHA_GRAD_LIST(MHA_GRAD_ENUM_)
	MHA_GRAD_COUNT
} mha_grad_stage;

/* A lowercase name for a gradient stage ("dS", "dscores", …), never NULL. */
MHA_API const char *mha_grad_stage_name(mha_grad_stage stage);

/*
 * The observer of mha_backward, as mha_observer is mha_forward's: fn is
 * called once per wanted stage (MHA_STAGE_BIT(stage) in wanted), in the
 * order of the enum above (but dq_norm and dk_norm come before dQ), per
 * head in turn for the head stages; with a
 * batch each sequence's stages follow sequence(ctx, b).  m is the
 * library's, valid only during the call.  Nonzero stops the run with
 * MHA_ERR_OBSERVER.
 */
typedef int (*mha_grad_fn)(void *ctx, mha_grad_stage stage, int head,
			   const double *m, size_t rows, size_t cols);

/*
 * What if a stage were otherwise: an editor is handed the plain path's own
 * values of a head's stage, writable, before the backward goes on with
 * them, and may change them (mha compare recomputes the classic backward
 * mistakes so: D left out, the scale, P without the mask, ...).  Per query
 * row (rows 1) as the row is made: HEAD_P (after the head's output row
 * and D_i are made from the true P: the P that dV and dS then use; a key
 * given weight here gets a gradient though masked), HEAD_D (D_i, 1 x 1,
 * before dS), HEAD_DP (before dS), HEAD_DSCORES (before dQ_h and dK_h
 * gather it); then each head's whole HEAD_DV, HEAD_DQ, HEAD_DK (row 0)
 * before they are summed into dV, dQ, dK.  The observer's fn sees the
 * values as edited.  An editor makes the run take the plain path.
 * Nonzero stops the run with MHA_ERR_OBSERVER.
 */
typedef int (*mha_grad_edit_fn)(void *ctx, mha_grad_stage stage, int head, size_t row,
				double *m, size_t rows, size_t cols);

typedef struct mha_grad_observer {
	size_t size;      /* sizeof(mha_grad_observer): see "Versions" above */
	mha_grad_fn fn;
	void *ctx;
	unsigned wanted;          /* MHA_STAGE_BIT()s of mha_grad_stage values */
	mha_sequence_fn sequence; /* NULL: not told */
	mha_grad_edit_fn edit;    /* NULL: none (0.6.0) */
	void *edit_ctx;
	mha_progress_fn progress; /* NULL: not told (0.7.0), as mha_observer's */
	void *progress_ctx;
	mha_stages stages;        /* (0.8.0) MHA_STAGE_SET()s of mha_grad_stage values;
				     0: wanted's */
	mha_stop_fn stop;         /* (0.9.0) NULL: never stopped, as mha_observer's */
	void *stop_ctx;
} mha_grad_observer;

/*
 * Where mha_backward writes: caller-owned arrays, each NULL when not
 * wanted, all distinct from one another and from the inputs.  Every array
 * given is overwritten.  dW_Q … dW_V are ignored when that weight is NULL
 * (an identity has no gradient), dW_O and db_O without W_O, dsinks
 * without sinks.  A bias's gradient is given whether the bias is or not
 * (the gradient at zero).  Weights are (d_in, d_out) as mha applies them.
 */
typedef struct mha_grads {
	size_t size;      /* sizeof(mha_grads): see "Versions" above */
	double *dxq;    /* (B, n_q,  d_q_in) */
	double *dxk;    /* (B, n_kv, d_k_in); self-attention's dX is dxq + dxk + dxv */
	double *dxv;    /* (B, n_kv, d_v_in) */
	double *dW_Q;   /* (d_q_in, H·d_k) */
	double *dW_K;   /* (d_k_in, G·d_k) */
	double *dW_V;   /* (d_v_in, G·d_v) */
	double *dW_O;   /* (H·d_v, d_out) */
	double *db_Q;   /* (H·d_k) */
	double *db_K;   /* (G·d_k) */
	double *db_V;   /* (G·d_v) */
	double *db_O;   /* (d_out) */
	double *dsinks; /* (H) */
	double *dq_norm; /* norm.q_weight's shape: its gradient (ignored without it) */
	double *dk_norm; /* norm.k_weight's */
	double *dW_QA;   /* latent attention's weights (mha_mla; ignored without them) */
	double *dW_KVA;
	double *dW_KVB;
	double *dq_a_norm;  /* (q_rank) */
	double *dkv_a_norm; /* (kv_rank) */
} mha_grads;

/*
 * The backward pass of mha_forward(dims, in, w, cfg): every gradient g
 * asks for, given dout (B, n_q, mha_output_cols()), the upstream gradient,
 * or NULL for all ones (the gradient of the output's sum).  w, cfg, obs and
 * rep may be NULL as for mha_forward; rep says what the forward noticed
 * (blocked rows, the scale) and fast_path.  Every forward option is
 * differentiated.
 *
 * The plain path recomputes the forward row by row and every gradient as
 * written above, each sum in ascending order.  When obs wants no per-head
 * stage and cfg->exact is 0, the fast path computes the same gradients
 * (FlashAttention-2's backward: each row's log-sum-exp kept, P recomputed
 * block by block, no (n_q, n_kv) matrix, O(n·d) memory; cfg->threads
 * threads, the same bits for any number) and rep->fast_path is 1; it
 * agrees with the plain path to rounding (1e-12 relative in the tests).
 * The whole-model stages can still be watched there.  MHA_ERR_RANGE when a value
 * the gradients need (Q, K, V, a seen score, a head output) or a gradient
 * is not finite; the other errors as mha_forward's.
 */
MHA_API mha_status mha_backward(const mha_grads *g, const double *dout, const mha_dims *dims,
				const mha_inputs *in, const mha_weights *w,
				const mha_config *cfg, const mha_grad_observer *obs,
				mha_report *rep);

/*
 * The most mha_backward() allocates at any one time for these dims and
 * options when obs wants the stages in wanted: an upper bound, taking every
 * weight as given, 64 bytes of allocator overhead each; without dout add
 * (n_q, output columns) doubles for the ones it makes.  SIZE_MAX when that
 * does not fit, or mha_check() refuses dims and cfg.  Not counted: the caller's arrays, the observer's.
 */
MHA_API size_t mha_backward_memory(const mha_dims *dims, const mha_config *cfg, unsigned wanted);
/* The same for a set of any of the gradient stages (0.8.0). */
MHA_API size_t mha_backward_memory_stages(const mha_dims *dims, const mha_config *cfg,
					  mha_stages stages);

/* Where mha_backward_f32 writes: as mha_grads, in floats. */
typedef struct mha_grads_f32 {
	size_t size;      /* sizeof(mha_grads_f32): see "Versions" above */
	float *dxq, *dxk, *dxv, *dW_Q, *dW_K, *dW_V, *dW_O, *db_Q, *db_K, *db_V, *db_O,
	      *dsinks, *dq_norm, *dk_norm, *dW_QA, *dW_KVA, *dW_KVB, *dq_a_norm,
	      *dkv_a_norm; /* as in mha_grads */
} mha_grads_f32;

/*
 * mha_backward() for float32 data: float inputs, weights and dout (NULL:
 * all ones), float gradients out, the same options; the fast path only,
 * no intermediates (cfg->exact is not looked at), as mha_forward_f32.
 * The fast path in float32 arithmetic: the float kernels, every value and
 * sum a float, in the same fixed order (the same bits for any thread
 * count), so it agrees with mha_backward() on the same values to float32's
 * rounding (5e-5 of the largest gradient in the tests).  It allocates no
 * more than mha_backward_memory() says for the same dims.  MHA_ERR_RANGE
 * as mha_backward's, and when a value or gradient does not fit a float.
 */
MHA_API mha_status mha_backward_f32(const mha_grads_f32 *g, const float *dout,
				    const mha_dims *dims, const mha_inputs_f32 *in,
				    const mha_weights_f32 *w, const mha_config *cfg,
				    mha_report *rep);


#ifdef __cplusplus
}
#endif

#endif /* MHA_H */

/*
 * ==== Experimental ====================================================
 *
 * Everything above is stable: a program built against it runs against every
 * later libmha.so.6 (structs grow only at their end, no signature changes;
 * docs/library.md).  What follows may change or go in any release without
 * a soname change: for programs that follow the library closely (the mha
 * program and its engine).  Define MHA_EXPERIMENTAL before including mha.h
 * to see it (zstd's ZSTD_STATIC_LINKING_ONLY); that works after an earlier
 * include without it too.
 */
#if defined(MHA_EXPERIMENTAL) && !defined(MHA_H_EXPERIMENTAL)
#define MHA_H_EXPERIMENTAL

#ifdef __cplusplus
extern "C" {
#endif

/*
 * mha_forward_f32() told how far it has come: of obs (NULL: none) only
 * progress and progress_ctx are looked at, as mha_forward() tells them (the
 * float path hands over no stages: fn and wanted are not looked at).
 */
MHA_API mha_status mha_forward_f32_observed(float *out, const mha_dims *dims,
					    const mha_inputs_f32 *in, const mha_weights_f32 *w,
					    const mha_config *cfg, const mha_observer *obs,
					    mha_report *rep);

/* mha_backward_f32() told how far it has come: of obs (NULL: none) only
 * progress and progress_ctx, as mha_backward() tells them. */
MHA_API mha_status mha_backward_f32_observed(const mha_grads_f32 *g, const float *dout,
					     const mha_dims *dims, const mha_inputs_f32 *in,
					     const mha_weights_f32 *w, const mha_config *cfg,
					     const mha_grad_observer *obs, mha_report *rep);

#ifdef __cplusplus
}
#endif

#endif /* MHA_EXPERIMENTAL */
