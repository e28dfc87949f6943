/*
 * client_test.h
 *		TAP output, driver steps, clocks and a timed decision for the C
 *		client's test programs.
 *
 * A program prints TAP lines; test/client/ClientTest.pm relays them to the
 * Perl harness.  step("stop") prints "@@ stop" and waits until the Perl side
 * has done it (stopped the server, ...) and answers with a line.
 */
#ifndef CLIENT_TEST_H
#define CLIENT_TEST_H

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ratelimit_client.h"

static int	tap_run = 0;
static int	tap_failed = 0;

/* Start TAP output; a program takes nargs arguments, named by usage. */
static inline void
tap_start(int argc, char **argv, int nargs, const char *usage)
{
	if (argc != nargs + 1)
	{
		fprintf(stderr, "usage: %s %s\n", argv[0], usage);
		exit(2);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
}

static inline bool
ok(bool pass, const char *fmt,...)
{
	va_list		ap;

	printf("%s %d - ", pass ? "ok" : "not ok", ++tap_run);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	if (!pass)
		tap_failed++;
	return pass;
}

static inline void
diag(const char *fmt,...)
{
	va_list		ap;

	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

#define is_int(got, want, ...) \
	do { \
		long long got_ = (long long) (got), want_ = (long long) (want); \
		if (!ok(got_ == want_, __VA_ARGS__)) \
			diag("got %lld, want %lld", got_, want_); \
	} while (0)

/* got within tolerance of want (seconds, counts) */
#define is_near(got, want, tolerance, ...) \
	do { \
		double got_ = (double) (got), want_ = (double) (want); \
		if (!ok(fabs(got_ - want_) <= (tolerance), __VA_ARGS__)) \
			diag("got %.6f, want %.6f +- %g", got_, want_, (double) (tolerance)); \
	} while (0)

static inline int
done_testing(void)
{
	printf("1..%d\n", tap_run);
	return tap_failed == 0 ? 0 : 1;
}

/* Ask the Perl side to do something and wait until it is done. */
static inline void
step(const char *name)
{
	char		line[64];

	printf("@@ %s\n", name);
	fflush(stdout);
	if (fgets(line, sizeof(line), stdin) == NULL)
	{
		fprintf(stderr, "no answer to step %s\n", name);
		exit(2);
	}
}

static inline double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static inline void
sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* Warnings, counted per limiter, from any thread. */
typedef struct Warnings
{
	pthread_mutex_t lock;
	int			count;
	char		limiters[64][64];
	int			per_limiter[64];
	char		last[1024];
} Warnings;

static inline void
warnings_record(void *arg, const char *limiter, const char *message)
{
	Warnings   *w = (Warnings *) arg;
	int			i;

	pthread_mutex_lock(&w->lock);
	for (i = 0; i < 64 && w->limiters[i][0] != '\0'; i++)
		if (strcmp(w->limiters[i], limiter) == 0)
			break;
	if (i < 64)
	{
		snprintf(w->limiters[i], sizeof(w->limiters[i]), "%s", limiter);
		w->per_limiter[i]++;
	}
	w->count++;
	snprintf(w->last, sizeof(w->last), "%s", message);
	pthread_mutex_unlock(&w->lock);
}

static inline int
warnings_for(Warnings *w, const char *limiter)
{
	int			n = 0;
	int			i;

	pthread_mutex_lock(&w->lock);
	for (i = 0; i < 64 && w->limiters[i][0] != '\0'; i++)
		if (strcmp(w->limiters[i], limiter) == 0)
			n = w->per_limiter[i];
	pthread_mutex_unlock(&w->lock);
	return n;
}

/* One decision, timed in ms; its source is -1 when the call was refused. */
static inline RlDecision
timed_take(RlClient *client, const char *limiter, const char *key, double rate,
		   int32_t burst, double *latency)
{
	RlDecision	d;
	double		start = now_ms();

	if (rl_client_take(client, limiter, key, rate, burst, 1, &d) != RL_OK)
		d.source = (RlSource) -1;
	*latency = now_ms() - start;
	return d;
}

#endif							/* CLIENT_TEST_H */
