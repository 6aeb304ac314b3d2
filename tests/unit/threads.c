/*
 * threads.c: the thread team: default count, several callers at once,
 * fork, refusal; tests/unit/main.c runs them.
 */
#include "unit.h"
#include "../../lib/kernels/team.h" /* the team itself (libmha.a has it) */

#include <sys/syscall.h>

/* the CPUs this process may run on, as sched_getaffinity counts them */
static int cpus_allowed(void)
{
	cpu_set_t set;

	ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
	return CPU_COUNT(&set) < 4096 ? CPU_COUNT(&set) : 4096;
}

/*
 * The default thread count: cfg->threads, else OMP_NUM_THREADS read as
 * OpenMP reads it, else the CPUs of the affinity mask; capped at 4096.
 */
START_TEST(test_threads_default)
{
	static const struct {
		const char *env; /* NULL: unset */
		int want;        /* 0: the CPUs allowed */
	} cases[] = {
		{ NULL, 0 }, { "2", 2 }, { " 3 ", 3 }, { "4,2", 4 }, { "5, 1", 5 }, { "100000", 4096 },
		{ "99999999999999999999999", 4096 }, { "0", 0 }, { "", 0 }, { "abc", 0 },
		{ "2x", 0 }, { "-3", 0 }, { ",2", 0 },
	};
	char *saved = env_save("OMP_NUM_THREADS");

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const int want = cases[i].want ? cases[i].want : cpus_allowed();

		if (cases[i].env)
			setenv("OMP_NUM_THREADS", cases[i].env, 1);
		else
			unsetenv("OMP_NUM_THREADS");
		ck_assert_msg(mha_threads(&(mha_config){ .size = sizeof(mha_config) }) == want, "OMP_NUM_THREADS='%s': %d threads, not %d",
			      cases[i].env ? cases[i].env : "(unset)", mha_threads(&(mha_config){ .size = sizeof(mha_config) }), want);
		/* cfg->threads first, whatever the environment */
		ck_assert_int_eq(mha_threads(&(mha_config){ .size = sizeof(mha_config),
							    .threads = 3 }), 3);
		ck_assert_int_eq(mha_threads(&(mha_config){ .size = sizeof(mha_config),
							    .threads = 100000 }), 4096);
	}
	env_restore("OMP_NUM_THREADS", saved);
	free(saved);
}
END_TEST

/* ---- the thread team: several callers at once, and fork ---------------- */

/* the threads of this process (Linux: /proc/self/task), 0 when unknown */
static int threads_now(void)
{
	DIR *dir = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	if (!dir)
		return 0;
	while ((e = readdir(dir)))
		n += e->d_name[0] != '.';
	closedir(dir);
	return n;
}

/*
 * Every pthread_create of this program and libmha.a goes through this
 * (-Wl,--wrap=pthread_create): threads_allowed >= 0 lets only that many
 * more start, the rest failing as when a system is out of threads.
 */
int __real_pthread_create(pthread_t *id, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);
int __wrap_pthread_create(pthread_t *id, const pthread_attr_t *attr, void *(*fn)(void *), void *arg);

static int threads_allowed = -1;

/* with born_seen set, each thread's processors at birth (its attributes'), in order */
#define BORN_MAX 8
static cpu_set_t born[BORN_MAX];
static int born_seen = -1;

int __wrap_pthread_create(pthread_t *id, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	if (born_seen >= 0 && born_seen < BORN_MAX) {
		CPU_ZERO(&born[born_seen]);
		if (!attr || pthread_attr_getaffinity_np(attr, sizeof(cpu_set_t), &born[born_seen]))
			sched_getaffinity(0, sizeof(cpu_set_t), &born[born_seen]); /* the caller's */
		born_seen++;
	}
	if (threads_allowed == 0)
		return EAGAIN;
	if (threads_allowed > 0)
		threads_allowed--;
	return __real_pthread_create(id, attr, fn, arg);
}

/* the problem the team's tests share: 300 tokens, d_model 64, 4 heads, random */
struct team_case {
	double *x, *W[4];
	mha_dims d;
	mha_inputs in;
	mha_weights w;
	size_t n_out; /* the output's elements */
};

static void team_case_make(struct team_case *c)
{
	const size_t n = 300, dm = 64, H = 4;

	c->x = rnd_matrix(n * dm);
	for (int i = 0; i < 4; i++)
		c->W[i] = rnd_matrix(dm * dm);
	c->d = (mha_dims){ .size = sizeof(mha_dims),
			   .n_q = n, .n_kv = n, .d_q_in = dm, .d_k_in = dm, .d_v_in = dm,
			   .heads = H, .d_k = dm / H, .d_v = dm / H, .d_out = dm };
	c->in = (mha_inputs){ .size = sizeof(mha_inputs), c->x, c->x, c->x };
	c->w = (mha_weights){ .size = sizeof(mha_weights),
			      .W_Q = c->W[0], .W_K = c->W[1], .W_V = c->W[2], .W_O = c->W[3] };
	c->n_out = n * dm;
}

static void team_case_free(struct team_case *c)
{
	for (int i = 0; i < 4; i++)
		free(c->W[i]);
	free(c->x);
}

/* one problem several threads compute at once, each its own output */
struct concurrent {
	const mha_dims *d;
	const mha_inputs *in;
	const mha_weights *w;
	const double *want; /* the one-thread bits */
	size_t n;           /* elements of the output */
	int threads, rounds, differ;
};

static void *concurrent_calls(void *p)
{
	struct concurrent *c = p;
	double *out = malloc(c->n * sizeof(double));
	const mha_config cfg = { .size = sizeof(mha_config),
				 .causal = MHA_CAUSAL_TOP_LEFT, .threads = c->threads };

	for (int r = 0; r < c->rounds && out; r++) {
		memset(out, 0, c->n * sizeof(double));
		if (mha_forward(out, c->d, c->in, c->w, &cfg, NULL, NULL) != MHA_OK ||
		    memcmp(out, c->want, c->n * sizeof(double)))
			c->differ++;
	}
	if (!out)
		c->differ++;
	free(out);
	return NULL;
}

/*
 * mha_forward from three threads at once, each asking for 2 threads: one
 * gets the team, the others run alone (mha.h), all the same bits as one
 * thread and close to the reference.  Then a child of fork, with the
 * parent's workers gone, computes them again on threads of its own.
 */
START_TEST(test_concurrent_calls)
{
	const mha_config cfg = { .size = sizeof(mha_config),
				 .causal = MHA_CAUSAL_TOP_LEFT, .threads = 1 };
	struct team_case k;
	double *want;
	struct concurrent c[3];
	pthread_t id[2];
	ref_result r;
	pid_t child;
	int status;

	team_case_make(&k);
	want = malloc(k.n_out * sizeof(double));
	ck_assert_int_eq(mha_forward(want, &k.d, &k.in, &k.w, &cfg, NULL, NULL), MHA_OK);
	ref_forward(&r, &k.d, &k.in, &k.w, &cfg);
	check_close("one thread", want, r.output, k.n_out);
	for (int t = 0; t < 3; t++)
		c[t] = (struct concurrent){ &k.d, &k.in, &k.w, want, k.n_out, 2, 20, 0 };
	for (int t = 0; t < 2; t++)
		ck_assert_int_eq(pthread_create(&id[t], NULL, concurrent_calls, &c[t]), 0);
	concurrent_calls(&c[2]);
	for (int t = 0; t < 2; t++)
		ck_assert_int_eq(pthread_join(id[t], NULL), 0);
	for (int t = 0; t < 3; t++)
		ck_assert_msg(!c[t].differ, "caller %d: %d of 20 calls not the one-thread bits", t,
			      c[t].differ);
	/* the team's worker stays, parked, for the next call (here, or none at all) */
	ck_assert(threads_now() == 0 || threads_now() >= 2);

	/* the team has been used: a child of fork starts its own */
	fflush(NULL); /* the child's exit() flushes nothing of ours twice */
	child = fork();
	ck_assert_int_ge(child, 0);
	if (!child) {
		/* counted from the child's start: under qemu-user /proc/self/task
		 * also lists the emulator's own threads */
		const int n0 = threads_now();

		c[0].differ = 0;
		concurrent_calls(&c[0]);
		/* _exit: Check's own files are the parent's (the worker is left unjoined) */
		_exit(c[0].differ ? 1 : n0 == 0 || threads_now() - n0 == 1 ? 0 : 2);
	}
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "the child of fork: status %d", status);
	ref_free(&r);
	team_case_free(&k);
	free(want);
}
END_TEST

/*
 * Threads that cannot be started: the team runs with those it has (none,
 * or one of three), and the numbers are the same bits.  In a child of
 * fork, whose team starts empty whatever the tests before did.
 */
START_TEST(test_threads_refused)
{
	struct team_case k;
	double *want;
	pid_t child;
	int status;

	team_case_make(&k);
	want = malloc(k.n_out * sizeof(double));
	ck_assert_int_eq(mha_forward(want, &k.d, &k.in, &k.w, &(mha_config){ .size = sizeof(mha_config),
								       .causal = MHA_CAUSAL_TOP_LEFT,
								     .threads = 1 }, NULL, NULL),
			 MHA_OK);
	fflush(NULL);
	child = fork();
	ck_assert_int_ge(child, 0);
	if (!child) {
		struct concurrent c = { &k.d, &k.in, &k.w, want, k.n_out, 2, 3, 0 };
		/* the child's own threads, from its start (qemu-user's are listed too) */
		const int n0 = threads_now();
		int bad = 0;

		threads_allowed = 0; /* none: the caller alone */
		concurrent_calls(&c);
		bad |= c.differ || threads_now() > n0;
		threads_allowed = 1; /* one of the three 4 threads want */
		c.threads = 4;
		concurrent_calls(&c);
		bad |= c.differ || (n0 && threads_now() - n0 != 1);
		_exit(bad);
	}
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "threads refused: not the one-thread bits, or threads started (status %d)", status);
	team_case_free(&k);
	free(want);
}
END_TEST

/*
 * The workers are born each on one processor the caller may use (others
 * than its own first: team.c's team_grow), and then widen to all of them:
 * none stays pinned.  In a child of fork (a team of its own), with 3
 * threads wanted; with a single processor allowed, none is pinned at all.
 */
START_TEST(test_threads_born_apart)
{
	struct team_case k;
	double *out;
	pid_t child;
	int status;

	team_case_make(&k);
	out = malloc(k.n_out * sizeof(double));
	fflush(NULL);
	child = fork();
	ck_assert_int_ge(child, 0);
	if (!child) {
		const mha_config cfg = { .size = sizeof(mha_config), .threads = 3 };
		cpu_set_t mine, now;
		DIR *dir;
		struct dirent *e;
		int bad = 0, threads = 0;

		sched_getaffinity(0, sizeof(mine), &mine);
		born_seen = 0;
		if (mha_forward(out, &k.d, &k.in, &k.w, &cfg, NULL, NULL) != MHA_OK || born_seen < 1)
			_exit(10);
		/* born: one processor of the caller's each, or all of them with one */
		for (int t = 0; t < born_seen && t < BORN_MAX; t++) {
			cpu_set_t within;

			CPU_AND(&within, &born[t], &mine);
			if (CPU_COUNT(&mine) > 1 ? CPU_COUNT(&born[t]) != 1 || !CPU_EQUAL(&within, &born[t])
						 : !CPU_EQUAL(&within, &mine))
				bad |= 2;
		}
		/* now: every thread of the process free to run on all of them, or
		 * a worker already asleep, held to one of them (test_threads_held_asleep) */
		dir = opendir("/proc/self/task");
		while (dir && (e = readdir(dir))) {
			cpu_set_t within;

			if (e->d_name[0] == '.')
				continue;
			threads++;
			if (sched_getaffinity((pid_t)atoi(e->d_name), sizeof(now), &now)) {
				bad |= 4;
				continue;
			}
			CPU_AND(&within, &now, &mine);
			if (!CPU_EQUAL(&now, &mine) &&
			    (atoi(e->d_name) == getpid() || CPU_COUNT(&now) != 1 ||
			     !CPU_EQUAL(&within, &now)))
				bad |= 4;
		}
		if (dir)
			closedir(dir);
		_exit(bad | (threads < 2 ? 8 : 0));
	}
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "workers at birth and after (exit %d: 2 born not on one processor of the "
		      "caller's, 4 one still pinned, 8 no worker, 10 no run)",
		      WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	team_case_free(&k);
	free(out);
}
END_TEST

/* each participant's processors as it runs a region (after a barrier, with wait) */
struct held_region {
	cpu_set_t mask[3];
	int seen[3];
	pid_t tid[3]; /* each participant's thread */
	int wait;     /* participant 0 sleeps this many ms before the barrier */
};

static void held_record(void *arg, int t, int n)
{
	struct held_region *r = arg;

	if (r->wait) {
		if (t == 0)
			usleep((useconds_t)r->wait * 1000);
		mha_team_barrier(n);
	}
	if (t < 3) {
		r->seen[t] = !sched_getaffinity(0, sizeof(r->mask[t]), &r->mask[t]);
		r->tid[t] = (pid_t)syscall(SYS_gettid);
	}
}

/* 0 when each of the 3 participants ran on all of mine, else bad */
static int held_check(const struct held_region *r, const cpu_set_t *mine, int bad)
{
	for (int t = 0; t < 3; t++)
		if (!r->seen[t] || !CPU_EQUAL(&r->mask[t], mine))
			return bad;
	return 0;
}

/* 1 once both workers (tid[1], tid[2]) are held to one processor of mine
 * each (2 s at most); by their thread ids, since under qemu-user the
 * process has threads of qemu's own too */
static int workers_held(const pid_t *tid, const cpu_set_t *mine)
{
	for (int tries = 0; tries < 2000; tries++) {
		int all = 1;

		for (int t = 1; t < 3; t++) {
			cpu_set_t now, within;

			if (sched_getaffinity(tid[t], sizeof(now), &now)) {
				all = 0;
				continue;
			}
			CPU_AND(&within, &now, mine);
			all &= CPU_COUNT(&now) == 1 && CPU_EQUAL(&within, &now);
		}
		if (all)
			return 1;
		usleep(1000);
	}
	return 0;
}

/*
 * A worker that sleeps is held to the processor it sleeps on, and runs a
 * region on all the caller's processors again (team.c, hold_here): the
 * wake-up then finds it where it was, not on the caller's processor.
 * Three participants: inside the first region each runs on all of the
 * process's processors; a little later both workers, asleep, are each
 * held to one of them; woken for a second region, and again from a
 * barrier they slept at, all of them again.  A mask set from outside
 * while a worker sleeps stands.  With one processor allowed there is
 * nothing to hold: skipped.
 */
START_TEST(test_threads_held_asleep)
{
	pid_t child;
	int status;

	fflush(NULL);
	child = fork();
	ck_assert_int_ge(child, 0);
	if (!child) {
		struct held_region r;
		cpu_set_t mine;
		pid_t tid[3];
		int bad = 0;

		sched_getaffinity(0, sizeof(mine), &mine);
		if (CPU_COUNT(&mine) < 2)
			_exit(0);
		memset(&r, 0, sizeof(r));
		mha_team_run(3, held_record, &r);
		bad |= held_check(&r, &mine, 2);
		memcpy(tid, r.tid, sizeof(tid));
		if (!workers_held(tid, &mine))
			bad |= 4;
		memset(&r, 0, sizeof(r));
		mha_team_run(3, held_record, &r);
		bad |= held_check(&r, &mine, 8);
		if (!workers_held(tid, &mine))
			bad |= 4;
		memset(&r, 0, sizeof(r));
		r.wait = 20;
		mha_team_run(3, held_record, &r);
		bad |= held_check(&r, &mine, 16);
		if (!workers_held(tid, &mine))
			bad |= 4;
		/* set from outside while asleep (taskset): another one of mine than
		 * the one each is held to; it stands, not widened when they wake */
		for (int t = 1; t < 3; t++) {
			cpu_set_t held, other;

			if (sched_getaffinity(tid[t], sizeof(held), &held)) {
				bad |= 32;
				continue;
			}
			CPU_ZERO(&other);
			for (int c = 0; c < CPU_SETSIZE; c++)
				if (CPU_ISSET(c, &mine) && !CPU_ISSET(c, &held)) {
					CPU_SET(c, &other);
					break;
				}
			if (sched_setaffinity(tid[t], sizeof(other), &other))
				bad |= 32;
		}
		memset(&r, 0, sizeof(r));
		mha_team_run(3, held_record, &r);
		for (int t = 1; t < 3; t++)
			if (!r.seen[t] || CPU_COUNT(&r.mask[t]) != 1)
				bad |= 32;
		_exit(bad);
	}
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "workers held asleep (exit %d: 2 a region not on all processors, 4 a worker "
		      "asleep not held to one, 8 not freed when woken, 16 not freed after a barrier, "
		      "32 a mask set from outside undone)",
		      WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}
END_TEST

void unit_add_threads(const struct unit_suite *u)
{
	tcase_add_test(u->ref, test_threads_born_apart);
	tcase_add_test(u->ref, test_threads_held_asleep);
	tcase_add_test(u->ref, test_concurrent_calls);
	tcase_add_test(u->ref, test_threads_refused);
	tcase_add_test(u->err, test_threads_default);
}
