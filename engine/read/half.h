/*
 * half.h: the 16-bit floats a file may hold, as doubles, exactly: IEEE
 * float16 (.npy's '<f2', safetensors' F16) and bfloat16 (safetensors'
 * BF16).  Each is decoded here once for every reader; the byte order is
 * the reader's, these take the 16 bits.
 */
#ifndef MHA_ENGINE_HALF_H
#define MHA_ENGINE_HALF_H

#include <stdint.h>

/* float16: 1 sign, 5 exponent, 10 fraction bits; subnormals, ±0, ±inf
 * and nan (its sign kept) as such */
double half_to_double(uint16_t h);

/* bfloat16: float32's top 16 bits */
double bfloat16_to_double(uint16_t h);

/* The 8-bit floats of FP8 checkpoints (safetensors' F8_E4M3 and F8_E5M2,
 * PyTorch's float8_e4m3fn and float8_e5m2): E4M3 has 4 exponent bits (bias
 * 7), 3 fraction bits, no infinities, and nan at S.1111.111 (largest
 * 448); E5M2 is IEEE-like, 5 exponent bits (bias 15), 2 fraction bits,
 * with infinities and nans.  Subnormals and ±0 as such. */
double f8_e4m3_to_double(uint8_t b);
double f8_e5m2_to_double(uint8_t b);

#endif
