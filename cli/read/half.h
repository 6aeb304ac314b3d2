/*
 * half.h: the 16-bit floats a file may hold, as doubles, exactly: IEEE
 * float16 (.npy's '<f2', safetensors' F16) and bfloat16 (safetensors'
 * BF16).  Each is decoded here once for every reader; the byte order is
 * the reader's, these take the 16 bits.
 */
#ifndef MHA_CLI_HALF_H
#define MHA_CLI_HALF_H

#include <stdint.h>

/* float16: 1 sign, 5 exponent, 10 fraction bits; subnormals, ±0, ±inf
 * and nan (its sign kept) as such */
double half_to_double(uint16_t h);

/* bfloat16: float32's top 16 bits */
double bfloat16_to_double(uint16_t h);

#endif
