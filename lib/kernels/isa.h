/*
 * isa.h: what names one compiled copy of kernel.c, kernel_attend.c or
 * kernel_bwd.c.  The
 * Makefile builds each file once per element type and vector width
 * (-DMHA_F32, -DVB=64|32|16, -DSFX=f64_avx512 …); NAME(f) gives a function
 * that copy's own name, f##SFX (mha_gemm_ → mha_gemm_f64_avx512).  Without
 * the flags: 16-byte vectors of doubles, f64_base.
 */
#ifndef MHA_ISA_H
#define MHA_ISA_H

#ifndef VB
#define VB 16
#endif
#ifndef SFX
#define SFX f64_base
#endif

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define NAME(f) CAT(f, SFX)

#endif
