/*
 * checks.h: the options' own matrices held against the problem's shapes,
 * each setting the part of p->cfg it feeds: --mask (as ONNX broadcasts it),
 * --sinks and --alibi-slopes (one per query head), --rope's tables and
 * positions, the q/k norm's weights (--q-norm, --k-norm); the shapes are the CLI's to check, what the values may be is
 * the library's.  Each 0, or -1 said naming the option and file.
 */
#ifndef MHA_ENGINE_CHECKS_H
#define MHA_ENGINE_CHECKS_H

#include "load/problem.h"

int checks_mask(const struct problem_spec *s, struct problem *p, const mha_dims *d,
		mha_config *cfg);
int checks_norm(const struct problem_spec *s, struct problem *p, const mha_dims *d,
		mha_config *cfg);
int checks_sinks(const struct problem_spec *s, struct problem *p, const mha_dims *d,
		 mha_config *cfg);
int checks_alibi(const struct problem_spec *s, struct problem *p, const mha_dims *d,
		 mha_config *cfg);
int checks_rope(const struct problem_spec *s, struct problem *p, const mha_dims *d,
		mha_config *cfg);

/* The library's own rules on what the options set (mha_check_fault), each
 * refusal worded for the command line: the option, the file, the element.
 * Once the rest is checked and p->cfg complete: 0, or -1 said. */
int checks_config(const struct problem_spec *s, struct problem *p);

#endif
