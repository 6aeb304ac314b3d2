/*
 * team.h: the library's own thread team, inside the library only.
 *
 * Replaces OpenMP: persistent POSIX threads, started on first use, that
 * run a region's function beside the caller and then wait, spinning for a
 * few tens of microseconds and then asleep in the kernel (a sleeping
 * worker costs nothing while the process reads and writes files; on Linux
 * it sleeps held to its processor, team.c's hold_here).  Not a
 * general pool: one region at a time in the whole process; a call that
 * finds the team busy (another thread of the program, or a region inside
 * a region) runs its region alone, as participant 0 of 1, with the same
 * results.  How the work is shared is each region's own business (static
 * shares, team_next's counter), so that the bits never depend on it.
 */
#ifndef MHA_TEAM_H
#define MHA_TEAM_H

#include <stdatomic.h>
#include <stddef.h>

/* the most threads a run uses, whatever cfg->threads or OMP_NUM_THREADS ask */
#define MHA_MAX_THREADS 4096

/* a region: run once by each participant t of nthreads (0 is the caller) */
typedef void (*team_fn)(void *arg, int t, int nthreads);

/*
 * fn(arg, t, n) on n participants, the caller being 0, and back when all
 * have returned (their writes then visible to the caller).  n is at most
 * threads; fewer when the team is busy or a thread cannot be started
 * (then 1): a region must give the same results for any n.
 */
void mha_team_run(int threads, team_fn fn, void *arg);

/* every participant of a region of nthreads waits here for all the others */
void mha_team_barrier(int nthreads);

/* the first of n items that participant t of nthreads takes, in equal shares */
static inline size_t team_share(size_t n, int t, int nthreads)
{
	/* n·t / nthreads without overflow: n < 2^64, t < nthreads <= 4096 */
	return n / (size_t)nthreads * (size_t)t + n % (size_t)nthreads * (size_t)t / (size_t)nthreads;
}

/* items taken one at a time, first come first served: set to 0 before any takes */
struct team_counter {
	atomic_size_t next;
};

/* the next item of a counter (each exactly once among the participants) */
static inline size_t team_next(struct team_counter *c)
{
	return atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
}

/* *m = min(*m, v) and *m = max(*m, v), among the participants (a region's findings) */
static inline void team_min_size(atomic_size_t *m, size_t v)
{
	size_t old = atomic_load_explicit(m, memory_order_relaxed);

	while (v < old && !atomic_compare_exchange_weak(m, &old, v))
		;
}

static inline void team_max_int(atomic_int *m, int v)
{
	int old = atomic_load_explicit(m, memory_order_relaxed);

	while (v > old && !atomic_compare_exchange_weak(m, &old, v))
		;
}

#endif
