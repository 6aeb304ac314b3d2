/*
 * checks.h: the options' own matrices held against the problem's shapes,
 * each setting the part of p->cfg it feeds: --mask (as ONNX broadcasts it),
 * --sinks and --alibi-slopes (one per query head), --rope's tables and
 * positions.  Each 0, or -1 said naming the option and file.
 */
#ifndef MHA_CLI_CHECKS_H
#define MHA_CLI_CHECKS_H

#include "load/problem.h"

int checks_mask(const struct problem_spec *s, struct problem *p, const mha_dims *d,
		mha_config *cfg);
int checks_sinks(const struct problem_spec *s, struct problem *p, const mha_dims *d,
		 mha_config *cfg);
int checks_alibi(const struct problem_spec *s, struct problem *p, const mha_dims *d,
		 mha_config *cfg);
int checks_rope(const struct problem_spec *s, struct problem *p, const mha_dims *d,
		mha_config *cfg);

#endif
