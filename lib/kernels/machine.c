/*
 * machine.c: what the fast path runs on: the kernels this processor runs
 * (kernel.c, kernel_attend.c, compiled per vector width: the widest, or
 * no wider than MHA_KERNEL says) and the threads a call uses (cfg->threads,
 * else OMP_NUM_THREADS, else the processors the process may use).
 */
/* sched_getaffinity: the CPUs this process may use */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "mha.h"
#include "kernels/kernel.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(MHA_X86_KERNELS)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sched.h>
#endif
#if defined(__linux__) && defined(MHA_ARM_KERNELS)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif
#include <unistd.h>

#define KERNELS(name, sfx) \
	{ name, mha_gemm_##sfx, mha_attend_##sfx, mha_gemm_bytes_##sfx, mha_attend_bytes_##sfx, \
	  mha_exps_##sfx }

static const struct mha_kernels kernels_f64[] = {
	KERNELS("base", f64_base),
#if defined(MHA_X86_KERNELS)
	KERNELS("avx2", f64_avx2),
	KERNELS("avx512", f64_avx512),
#endif
#if defined(MHA_ARM_KERNELS)
	KERNELS("neon", f64_neon),
#endif
};

static const struct mha_kernels kernels_f32[] = {
	KERNELS("base", f32_base),
#if defined(MHA_X86_KERNELS)
	KERNELS("avx2", f32_avx2),
	KERNELS("avx512", f32_avx512),
#endif
#if defined(MHA_ARM_KERNELS)
	KERNELS("neon", f32_neon),
#endif
};

/*
 * The index in the tables above: 0 base; x86-64: 1 AVX2+FMA, 2
 * AVX-512F+FMA; arm64: 1 NEON (Advanced SIMD, which every arm64 processor
 * Linux runs on has, asked of the kernel all the same).  What the CPU
 * runs, or no wider than MHA_KERNEL says.
 */
#if defined(MHA_X86_KERNELS)
/*
 * 2 with AVX-512F, 1 with AVX2 and FMA, else 0: as the processor has them
 * and the system saves their registers (XCR0's ymm bits, and the opmask
 * and zmm ones for AVX-512).  Three cpuid leaves and one xgetbv, asked on
 * the first pick and kept.  Not __builtin_cpu_supports: linking it runs
 * libgcc's __cpu_indicator_init at every start-up, a dozen cpuid leaves,
 * each a trap to the hypervisor on a virtual machine (5 to 8 µs here),
 * in every process, `mha --version` too.
 */
static int x86_level(void)
{
	static atomic_int known = -1;
	int level = atomic_load_explicit(&known, memory_order_relaxed);
	unsigned a, b, c, d, xcr0, xcr0_hi;

	if (level >= 0)
		return level;
	level = 0;
	/* leaf 1: FMA (ecx 12), OSXSAVE (27: xgetbv may run), AVX (28) */
	if (__get_cpuid(1, &a, &b, &c, &d) && (c >> 12 & 1) && (c >> 27 & 1) && (c >> 28 & 1) &&
	    __get_cpuid_max(0, NULL) >= 7) {
		__asm__ volatile("xgetbv" : "=a"(xcr0), "=d"(xcr0_hi) : "c"(0));
		__cpuid_count(7, 0, a, b, c, d);
		/* leaf 7: AVX2 (ebx 5), AVX-512F (ebx 16) */
		if ((xcr0 & 0x6) == 0x6 && (b >> 5 & 1))
			level = (b >> 16 & 1) && (xcr0 & 0xe0) == 0xe0 ? 2 : 1;
	}
	atomic_store_explicit(&known, level, memory_order_relaxed);
	return level;
}
#endif

static int kernel_level(void)
{
	int level = 0;
	const char *want = getenv("MHA_KERNEL");

#if defined(MHA_X86_KERNELS)
	level = x86_level();
#elif defined(MHA_ARM_KERNELS)
#if defined(__linux__) && defined(AT_HWCAP) && defined(HWCAP_ASIMD)
	level = (getauxval(AT_HWCAP) & HWCAP_ASIMD) ? 1 : 0;
#else
	level = 1;
#endif
#endif
	if (want && !strcmp(want, "base"))
		level = 0;
	else if (want && !strcmp(want, "avx2") && level >= 1)
		level = 1;
	return level;
}

const struct mha_kernels *mha_pick_kernels(int is_f32)
{
	const int level = kernel_level();

	return is_f32 ? &kernels_f32[level] : &kernels_f64[level];
}

const char *mha_kernel(void)
{
	return kernels_f64[kernel_level()].name;
}

/* the CPUs this process may run on (its affinity mask), at least 1 */
static long cpus_allowed(void)
{
#if defined(__linux__) && defined(CPU_COUNT)
	cpu_set_t set;

	if (!sched_getaffinity(0, sizeof set, &set) && CPU_COUNT(&set) > 0)
		return CPU_COUNT(&set);
#endif
	{
		const long n = sysconf(_SC_NPROCESSORS_ONLN);

		return n > 0 ? n : 1;
	}
}

/*
 * OMP_NUM_THREADS as OpenMP reads it: a positive number, perhaps between
 * blanks, perhaps the first of a list ("4,2"); 0 when unset or not that
 */
static long omp_num_threads(void)
{
	const char *s = getenv("OMP_NUM_THREADS");
	long n = 0;

	if (!s)
		return 0;
	while (*s == ' ' || *s == '\t')
		s++;
	if (*s < '0' || *s > '9')
		return 0;
	for (; *s >= '0' && *s <= '9'; s++)
		if (n <= MHA_MAX_THREADS) /* OMP_NUM_THREADS=100000 is taken at its word only up to the cap */
			n = n * 10 + (*s - '0');
	while (*s == ' ' || *s == '\t')
		s++;
	return *s && *s != ',' ? 0 : n;
}

int mha_threads(const mha_config *cfg)
{
	long n = cfg->threads;

	if (n <= 0)
		n = omp_num_threads();
	if (n <= 0)
		n = cpus_allowed();
	return n < 1 ? 1 : n > MHA_MAX_THREADS ? MHA_MAX_THREADS : (int)n;
}
