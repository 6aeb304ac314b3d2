/*
 * team.c: the library's thread team (team.h), on POSIX threads.
 *
 * Workers 1 .. started-1 are created when a region first asks for them
 * and then kept.  Each waits for its own go word to change: it spins for
 * TEAM_SPIN_NS (the gap between two regions of one call is a few
 * microseconds), then sleeps on a futex (Linux; elsewhere it naps).  The
 * caller waits for the region's end, and every participant at a barrier,
 * the same way.  A busy flag lets one region run at a time; a caller that
 * finds it taken runs alone.  Workers are joined when the program ends
 * (a destructor, when no region is running) and forgotten in the child of
 * a fork (pthread_atfork), which starts its own when it needs them.
 * On Linux each worker is born on a processor other than the caller's
 * (team_grow) and then free to run on any the caller may, except while it
 * sleeps: then it is held to the processor it fell asleep on (hold_here).
 *
 * Not here: how a region shares its work (its own code, through
 * team_share and team_next), and nothing is ever printed.
 */
/* pthread_attr_setsigmask_np and pthread_attr_setaffinity_np (glibc) */
#define _GNU_SOURCE
#include "kernels/team.h"

#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* glibc 2.32 and later: a thread's first signal mask set by its attributes */
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
#define TEAM_ATTR_SIGMASK 1
#else
#define TEAM_ATTR_SIGMASK 0
#endif

/* Linux with glibc: a new thread's processor set by its attributes (team_grow) */
#if defined(__linux__) && defined(__GLIBC__)
#define TEAM_SPREAD 1
#else
#define TEAM_SPREAD 0
#endif

/* how long a waiter spins before it sleeps: a few regions' gaps, not a file's read */
#ifndef TEAM_SPIN_NS
#define TEAM_SPIN_NS 50000
#endif

struct worker {
	atomic_int go;        /* changed by the caller: run the region (or stop); wraps */
	atomic_int sleeping;  /* 1 while asleep on go: the caller must wake it */
	int spread;           /* born on one processor: takes cpus first thing */
	pthread_t id;
#if TEAM_SPREAD
	cpu_set_t cpus;       /* the caller's processors when it started this worker */
#endif
} __attribute__((aligned(64))); /* one cache line each: no false sharing */

#if TEAM_SPREAD
/* 1 in a worker's thread; a caller's thread, whose mask is never touched, 0 */
static _Thread_local int in_worker;
#endif

/* static, not malloc'ed: never counted as a run's allocations, nothing to free after fork */
static struct worker workers[MHA_MAX_THREADS];

static struct {
	atomic_int busy;      /* 1 while a region runs (or the team is being stopped) */
	int started;          /* workers[1 .. started - 1] exist */
	int stopping;         /* read by the workers after go changes: leave */
	team_fn fn;           /* the region, for participants 1 .. n - 1 */
	void *arg;
	int n;
	atomic_int pending;   /* workers still in the region */
	atomic_int caller_sleeping;
	atomic_int bar_count; /* arrived at the barrier */
	atomic_int bar_gen;   /* changes when all have arrived */
	atomic_int bar_sleepers;
} team;

static pthread_once_t team_once = PTHREAD_ONCE_INIT;

/* ---- waiting ------------------------------------------------------------ */

static void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* 1 once *w differs from v within the spin time, else 0 (the caller then sleeps) */
static int spin_while(const atomic_int *w, int v)
{
	long long end = 0;

	for (unsigned i = 1;; i++) {
		if (atomic_load_explicit(w, memory_order_acquire) != v)
			return 1;
		relax();
		if (i % 64 == 0) {
			const long long t = now_ns();

			if (!end)
				end = t + TEAM_SPIN_NS;
			else if (t > end)
				return 0;
		}
	}
}

/* sleep while *w is v (or a little: spurious wake-ups are the caller's loop) */
static void sleep_on(atomic_int *w, int v)
{
#if defined(__linux__)
	syscall(SYS_futex, (int *)w, FUTEX_WAIT_PRIVATE, v, NULL, NULL, 0);
#else
	const struct timespec ts = { 0, 50000 };

	if (atomic_load(w) == v)
		nanosleep(&ts, NULL);
#endif
}

/*
 * A worker falling asleep is held to the processor it is on, and given
 * back the processors it had when it wakes (Linux with glibc).  The
 * wake-up is where Linux chooses a sleeper's processor again, and on a
 * virtual machine of 2 it chose the waker's, the caller's, in 10 to 18 of
 * 40 processes whose first call was a small one (sched_migrate_task),
 * though the worker's own stood idle; both then took turns on one
 * processor (each slept while the other ran, so the load balancer saw
 * nothing to move) for the whole of the next call: 12 to 14 ms rather
 * than 7 at 512 tokens.  Held, the worker wakes where it slept, its caches
 * still warm, and moves as Linux likes while it runs.  Measured: 2 to 6
 * of 40 such processes slow, the first big call's mean 12.2 and 13.3 ms
 * down to 8.6 and 7.8; with another process holding one of the two
 * processors, no slower (means 18.1 to 18.7 ms against 18.5 to 20.0).
 * Four system calls a sleep, and a worker only sleeps after TEAM_SPIN_NS
 * without work.  A mask changed by someone else while the worker slept
 * (taskset) is left as they set it.
 */
struct hold {
	int held;
#if TEAM_SPREAD
	int cpu;
	cpu_set_t was;
#endif
};

static void hold_here(struct hold *h)
{
	h->held = 0;
#if TEAM_SPREAD
	{
		cpu_set_t one;

		if (!in_worker)
			return;
		h->cpu = sched_getcpu();
		if (h->cpu < 0 || h->cpu >= CPU_SETSIZE ||
		    sched_getaffinity(0, sizeof(h->was), &h->was) || CPU_COUNT(&h->was) < 2 ||
		    !CPU_ISSET(h->cpu, &h->was))
			return;
		CPU_ZERO(&one);
		CPU_SET(h->cpu, &one);
		h->held = !sched_setaffinity(0, sizeof(one), &one);
	}
#endif
}

static void let_go(const struct hold *h)
{
#if TEAM_SPREAD
	cpu_set_t now;

	/* still the one processor held: else another's setting stands */
	if (h->held && !sched_getaffinity(0, sizeof(now), &now) && CPU_COUNT(&now) == 1 &&
	    CPU_ISSET(h->cpu, &now))
		(void)sched_setaffinity(0, sizeof(h->was), &h->was);
#else
	(void)h;
#endif
}

/* asleep until *w is no longer v; a worker held where it sleeps (hold_here) */
static void sleep_while(atomic_int *w, int v)
{
	struct hold h;

	hold_here(&h);
	while (atomic_load(w) == v)
		sleep_on(w, v);
	let_go(&h);
}

static void wake(atomic_int *w, int how_many)
{
#if defined(__linux__)
	syscall(SYS_futex, (int *)w, FUTEX_WAKE_PRIVATE, how_many, NULL, NULL, 0);
#else
	(void)w;
	(void)how_many;
#endif
}

/* ---- the workers -------------------------------------------------------- */

static void *worker_main(void *p)
{
	struct worker *w = p;
	const int t = (int)(w - workers);
	int seen = 0;
	sigset_t all;

	/* born so where pthread_attr_setsigmask_np is (team_grow); else now */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, NULL);
#if TEAM_SPREAD
	/* born on a processor of its own (team_grow): now free to move, as the caller */
	in_worker = 1;
	if (w->spread)
		(void)sched_setaffinity(0, sizeof(w->cpus), &w->cpus);
#endif

	for (;;) {
		if (!spin_while(&w->go, seen)) {
			/* seq_cst, paired with the caller's: either it sees sleeping or we see go */
			atomic_store(&w->sleeping, 1);
			sleep_while(&w->go, seen);
			atomic_store(&w->sleeping, 0);
		}
		seen = atomic_load_explicit(&w->go, memory_order_acquire);
		if (team.stopping)
			return NULL;
		team.fn(team.arg, t, team.n);
		if (atomic_fetch_sub_explicit(&team.pending, 1, memory_order_acq_rel) == 1 &&
		    atomic_load(&team.caller_sleeping))
			wake(&team.pending, 1);
	}
}

/* the workers forgotten: after fork the child has none of the parent's threads */
static void team_child(void)
{
	team.started = 0;
	team.stopping = 0;
	atomic_store(&team.bar_count, 0);
	atomic_store(&team.bar_sleepers, 0);
	atomic_store(&team.busy, 0);
}

static void team_init(void)
{
	pthread_atfork(NULL, NULL, team_child);
}

#if TEAM_SPREAD
/* the i-th processor of set after cpu, going round (i >= 1; set not empty) */
static int cpu_after(const cpu_set_t *set, int cpu, int i)
{
	for (int c = cpu;;) {
		c = (c + 1) % CPU_SETSIZE;
		if (CPU_ISSET(c, set) && --i == 0)
			return c;
	}
}
#endif

/*
 * Workers up to want participants, as many as can be started; the
 * participants there are.
 *
 * Where the caller may run on more than one processor, worker t is born
 * on the t-th of them after the caller's (all of them other than the
 * caller's while there are enough), and widens to all of them first
 * thing (worker_main).  Left to itself, Linux starts a new thread on the
 * caller's processor as often as not on a virtual machine of 2 (measured:
 * 18 of 40 processes), and it runs there beside the caller until the load
 * balancer moves it, milliseconds later: a 512-token forward pass's one
 * call then took 8.6 ms rather than 4.6, on one processor's time.  Born
 * elsewhere, 37 of 40 took 4.5 to 4.7 ms.  Past its birth a worker is
 * held to one processor only while it sleeps (hold_here).
 *
 * The workers take no signals: the program's
 * handlers run on its own threads.  Each is born with every signal
 * blocked (glibc's pthread_attr_setsigmask_np), so that the caller never
 * blocks any: a caller that blocked them all around pthread_create, as
 * this once did, could not be stopped while pthread_create did not
 * return (issue 37: two different glibc builds mixed under qemu-aarch64
 * deadlock there, and SIGTERM then waited forever).  Elsewhere each
 * worker blocks them first thing (worker_main); a signal sent to the
 * process goes to a thread that does not block it, the caller's.
 */
__attribute__((noinline)) static int team_grow(int want)
{
	pthread_attr_t attr;
	int have_attr, spread = 0, here = -1;
#if TEAM_SPREAD
	cpu_set_t cpus; /* the caller's processors */
#endif

	if (team.started >= want)
		return want;
	if (!team.started)
		team.started = 1;
	have_attr = !pthread_attr_init(&attr);
#if TEAM_ATTR_SIGMASK
	if (have_attr) {
		sigset_t all;

		/* else each blocks them first thing, as elsewhere (worker_main) */
		sigfillset(&all);
		(void)pthread_attr_setsigmask_np(&attr, &all);
	}
#endif
#if TEAM_SPREAD
	here = sched_getcpu();
	spread = have_attr && here >= 0 && here < CPU_SETSIZE &&
		 !sched_getaffinity(0, sizeof(cpus), &cpus) && CPU_COUNT(&cpus) > 1 &&
		 CPU_ISSET(here, &cpus);
#endif
	(void)here;
	(void)spread;
	while (team.started < want) {
		struct worker *w = &workers[team.started];

		atomic_store(&w->go, 0);
		atomic_store(&w->sleeping, 0);
		w->spread = 0;
#if TEAM_SPREAD
		if (spread) {
			cpu_set_t one;

			w->cpus = cpus; /* read by the worker only, from its birth on */
			CPU_ZERO(&one);
			CPU_SET(cpu_after(&cpus, here, team.started), &one);
			/* refused or not, it widens: no worker stays where it was born */
			(void)pthread_attr_setaffinity_np(&attr, sizeof(one), &one);
			w->spread = 1;
		}
#endif
		if (pthread_create(&w->id, have_attr ? &attr : NULL, worker_main, w))
			break;
		team.started++;
	}
	if (have_attr)
		pthread_attr_destroy(&attr);
	return team.started;
}

/* ---- regions ------------------------------------------------------------ */

void mha_team_run(int threads, team_fn fn, void *arg)
{
	int expect = 0, n;

	if (threads > MHA_MAX_THREADS)
		threads = MHA_MAX_THREADS;
	if (threads <= 1 || !atomic_compare_exchange_strong(&team.busy, &expect, 1)) {
		fn(arg, 0, 1);
		return;
	}
	pthread_once(&team_once, team_init);
	n = team_grow(threads);
	if (n <= 1) {
		atomic_store(&team.busy, 0);
		fn(arg, 0, 1);
		return;
	}
	team.fn = fn;
	team.arg = arg;
	team.n = n;
	atomic_store_explicit(&team.bar_count, 0, memory_order_relaxed);
	atomic_store_explicit(&team.caller_sleeping, 0, memory_order_relaxed);
	atomic_store(&team.pending, n - 1);
	for (int t = 1; t < n; t++) {
		struct worker *w = &workers[t];

		atomic_fetch_add(&w->go, 1); /* seq_cst: before the read of sleeping */
		if (atomic_load(&w->sleeping))
			wake(&w->go, 1);
	}
	fn(arg, 0, n);
	for (;;) {
		const int left = atomic_load_explicit(&team.pending, memory_order_acquire);

		if (!left)
			break;
		if (spin_while(&team.pending, left))
			continue;
		atomic_store(&team.caller_sleeping, 1);
		if (atomic_load(&team.pending) == left)
			sleep_on(&team.pending, left);
		atomic_store(&team.caller_sleeping, 0);
	}
	atomic_store_explicit(&team.busy, 0, memory_order_release);
}

void mha_team_barrier(int nthreads)
{
	int gen;

	if (nthreads <= 1)
		return;
	gen = atomic_load_explicit(&team.bar_gen, memory_order_acquire);
	if (atomic_fetch_add_explicit(&team.bar_count, 1, memory_order_acq_rel) == nthreads - 1) {
		/* the last to arrive: reset, then let all go (none arrives again before) */
		atomic_store_explicit(&team.bar_count, 0, memory_order_relaxed);
		atomic_store(&team.bar_gen, gen + 1);
		if (atomic_load(&team.bar_sleepers))
			wake(&team.bar_gen, INT_MAX);
		return;
	}
	if (spin_while(&team.bar_gen, gen))
		return;
	atomic_fetch_add(&team.bar_sleepers, 1);
	sleep_while(&team.bar_gen, gen);
	atomic_fetch_sub(&team.bar_sleepers, 1);
}

/* at exit: the workers stopped and joined, unless a region is still running */
__attribute__((destructor)) static void team_stop(void)
{
	int expect = 0;

	if (!atomic_compare_exchange_strong(&team.busy, &expect, 1))
		return;
	team.stopping = 1;
	for (int t = 1; t < team.started; t++) {
		atomic_fetch_add(&workers[t].go, 1);
		if (atomic_load(&workers[t].sleeping))
			wake(&workers[t].go, 1);
	}
	for (int t = 1; t < team.started; t++)
		pthread_join(workers[t].id, NULL);
	team.started = 0;
	team.stopping = 0;
	atomic_store(&team.busy, 0);
}
