/*
 * lost_cancel.c
 *		A network that holds packets and loses the cancel request: the
 *		client reaches the server through a TCP proxy on 127.0.0.1 (a thread
 *		of this program) that forwards nothing while "down" and, once up,
 *		swallows every cancel request (keeps its connection open, never
 *		answers), so PQcancel waits forever.  Decisions still return within
 *		the deadline; once the network is back, they return to the database
 *		within a backoff interval and a deadline; rl_client_free returns.
 *
 * Usage: lost_cancel SOCKET_DIR PORT
 *	the server's Unix socket, which the proxy forwards to.
 */
#define RATELIMIT_CLIENT_IMPLEMENTATION
#include "ratelimit_client.h"

#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "client_test.h"

#define DEADLINE_MS 300
#define BACKOFF_MS 300
#define MARGIN_MS 200
#define FREE_BOUND_MS 10000
#define MAX_PIPES 64
#define NO_SERVER -1			/* the first packet is not read yet */
#define SWALLOWED -2			/* a cancel request, never answered */
#define CANCEL_REQUEST_CODE 80877102

/* One proxied connection: the client's socket and the server's. */
typedef struct Pipe
{
	int			client;
	int			server;
} Pipe;

static struct
{
	int			listener;
	struct sockaddr_un upstream;
	atomic_bool down;			/* hold every packet */
	atomic_bool parked;			/* the proxy has seen down */
	atomic_bool stop;
	atomic_int	swallowed;
	Pipe		pipes[MAX_PIPES];
} proxy;

static RlClient *client;

static void
pipe_close(Pipe *p)
{
	close(p->client);
	if (p->server >= 0)
		close(p->server);
	p->client = -1;
}

static bool
write_all(int fd, const char *buf, ssize_t n)
{
	while (n > 0)
	{
		ssize_t		w = write(fd, buf, n);

		if (w <= 0)
			return false;
		buf += w;
		n -= w;
	}
	return true;
}

/* The first packet decides: a cancel request is swallowed, else forwarded. */
static void
pipe_start(Pipe *p)
{
	unsigned char head[8];
	ssize_t		n = recv(p->client, head, sizeof(head), MSG_PEEK);

	if (n <= 0)
		pipe_close(p);
	if (n < (ssize_t) sizeof(head))
		return;
	if (((uint32_t) head[4] << 24 | head[5] << 16 | head[6] << 8 | head[7]) ==
		CANCEL_REQUEST_CODE)
	{
		p->server = SWALLOWED;
		proxy.swallowed++;
		return;
	}
	p->server = socket(AF_UNIX, SOCK_STREAM, 0);
	if (p->server < 0 || connect(p->server, (struct sockaddr *) &proxy.upstream,
								 sizeof(proxy.upstream)) != 0)
		pipe_close(p);
}

static void *
proxy_main(void *arg)
{
	char		buf[8192];

	(void) arg;
	while (!proxy.stop)
	{
		struct pollfd pfd[1 + 2 * MAX_PIPES];
		Pipe	   *owner[1 + 2 * MAX_PIPES];
		int			n = 0;
		int			i;

		if (proxy.down)
		{
			proxy.parked = true;
			sleep_ms(5);
			continue;
		}
		proxy.parked = false;
		pfd[n++] = (struct pollfd) {.fd = proxy.listener, .events = POLLIN};
		for (i = 0; i < MAX_PIPES; i++)
		{
			Pipe	   *p = &proxy.pipes[i];

			if (p->client < 0 || p->server == SWALLOWED)
				continue;
			owner[n] = p;
			pfd[n++] = (struct pollfd) {.fd = p->client, .events = POLLIN};
			if (p->server >= 0)
			{
				owner[n] = p;
				pfd[n++] = (struct pollfd) {.fd = p->server, .events = POLLIN};
			}
		}
		if (poll(pfd, n, 20) <= 0 || proxy.down)
			continue;
		for (i = 1; i < n; i++)
		{
			Pipe	   *p = owner[i];
			ssize_t		got;

			if (pfd[i].revents == 0 || p->client < 0 || p->server == SWALLOWED)
				continue;
			if (p->server == NO_SERVER)
			{
				pipe_start(p);
				continue;
			}
			got = read(pfd[i].fd, buf, sizeof(buf));
			if (got <= 0 ||
				!write_all(pfd[i].fd == p->client ? p->server : p->client, buf, got))
				pipe_close(p);
		}
		if (pfd[0].revents != 0)
		{
			int			fd = accept(proxy.listener, NULL, NULL);

			for (i = 0; fd >= 0 && i < MAX_PIPES; i++)
				if (proxy.pipes[i].client < 0)
				{
					proxy.pipes[i] = (Pipe) {fd, NO_SERVER};
					fd = -1;
				}
			if (fd >= 0)
				close(fd);
		}
	}
	return NULL;
}

/* Listen on a free port of 127.0.0.1; returns the port. */
static int
proxy_start(const char *socket_dir, const char *port, pthread_t *thread)
{
	struct sockaddr_in addr = {.sin_family = AF_INET};
	socklen_t	len = sizeof(addr);
	int			i;

	for (i = 0; i < MAX_PIPES; i++)
		proxy.pipes[i].client = -1;
	proxy.upstream.sun_family = AF_UNIX;
	snprintf(proxy.upstream.sun_path, sizeof(proxy.upstream.sun_path),
			 "%s/.s.PGSQL.%s", socket_dir, port);
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	proxy.listener = socket(AF_INET, SOCK_STREAM, 0);
	if (proxy.listener < 0 ||
		bind(proxy.listener, (struct sockaddr *) &addr, sizeof(addr)) != 0 ||
		listen(proxy.listener, 64) != 0 ||
		getsockname(proxy.listener, (struct sockaddr *) &addr, &len) != 0 ||
		pthread_create(thread, NULL, proxy_main, NULL) != 0)
	{
		perror("proxy");
		exit(2);
	}
	return ntohs(addr.sin_port);
}

static void
network_down(void)
{
	proxy.down = true;
	while (!proxy.parked)
		sleep_ms(1);
}

static pthread_mutex_t freed_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t freed_cond = PTHREAD_COND_INITIALIZER;
static bool freed = false;

static void *
free_main(void *arg)
{
	(void) arg;
	rl_client_free(client);
	pthread_mutex_lock(&freed_lock);
	freed = true;
	pthread_cond_signal(&freed_cond);
	pthread_mutex_unlock(&freed_lock);
	return NULL;
}

/* rl_client_free on a thread; whether it returned within FREE_BOUND_MS. */
static bool
free_within_bound(double *took)
{
	struct timespec until;
	pthread_t	thread;
	double		start = now_ms();
	bool		done;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += FREE_BOUND_MS / 1000;
	pthread_create(&thread, NULL, free_main, NULL);
	pthread_mutex_lock(&freed_lock);
	while (!freed &&
		   pthread_cond_timedwait(&freed_cond, &freed_lock, &until) == 0)
		;
	done = freed;
	pthread_mutex_unlock(&freed_lock);
	*took = now_ms() - start;
	if (done)
		pthread_join(thread, NULL);
	return done;
}

int
main(int argc, char **argv)
{
	RlClientOptions options;
	RlClientStats stats;
	RlDecision	d;
	pthread_t	proxy_thread;
	char		conninfo[256];
	double		latency;
	double		worst;
	double		start;
	int			calls;
	int			not_fallback;
	bool		returned;
	int			probes;
	int			i;

	tap_start(argc, argv, 2, "SOCKET_DIR PORT");
	snprintf(conninfo, sizeof(conninfo),
			 "host=127.0.0.1 port=%d dbname=postgres sslmode=disable gssencmode=disable",
			 proxy_start(argv[1], argv[2], &proxy_thread));
	rl_client_options_init(&options);
	options.conninfo = conninfo;
	options.deadline_ms = DEADLINE_MS;
	options.backoff_ms = BACKOFF_MS;
	options.pool_size = 2;
	is_int(rl_client_new(&options, &client), RL_OK, "a client is made");

	/* a loaded machine may take more than a deadline for the first connection */
	start = now_ms();
	do
		d = timed_take(client, "lost", "k", 1.0 / 3600, 100000, &latency);
	while (d.source != RL_SOURCE_DATABASE && now_ms() - start < 10000);
	ok(d.allowed && d.source == RL_SOURCE_DATABASE,
	   "through the proxy, decisions are made by the database");

	/* 3 s without a network: about six probes, the first one cancelled */
	network_down();
	calls = not_fallback = 0;
	worst = 0;
	start = now_ms();
	while (now_ms() - start < 3000)
	{
		d = timed_take(client, "lost", "k", 1.0 / 3600, 100000, &latency);
		calls++;
		not_fallback += d.source != RL_SOURCE_FALLBACK;
		worst = fmax(worst, latency);
		sleep_ms(10);
	}
	is_int(not_fallback, 0, "without the network, all %d calls are decided in memory", calls);
	ok(worst < DEADLINE_MS + MARGIN_MS, "each within the deadline (worst %.1f ms)", worst);

	/*
	 * A probe is the call that moves the end of the backoff.  A loaded
	 * machine may take longer than a deadline to connect through the
	 * proxy: such a probe times out, and the next comes a backoff interval
	 * later.  The decisions return at the first probe that connects in time,
	 * within a backoff interval and a deadline of each probe before it.
	 */
	proxy.down = false;
	probes = 0;
	start = now_ms();
	do
	{
		int64_t		backoff_end = client->health[0].retry_db_at_us;

		d = timed_take(client, "lost", "k", 1.0 / 3600, 100000, &latency);
		probes += client->health[0].retry_db_at_us != backoff_end;
		sleep_ms(10);
	} while (d.source != RL_SOURCE_DATABASE && now_ms() - start < 10000);
	latency = now_ms() - start;
	ok(d.source == RL_SOURCE_DATABASE && d.allowed,
	   "once the network is back, decisions return to the database (after %.0f ms, %d probes)",
	   latency, probes);
	ok(latency < probes * (BACKOFF_MS + DEADLINE_MS + MARGIN_MS) + 1000,
	   "within a backoff interval of %d ms and a deadline of %d ms per probe (and a margin of 1 s)",
	   BACKOFF_MS, DEADLINE_MS);
	ok(proxy.swallowed >= 1, "while a cancel request is lost: the proxy swallowed %d",
	   (int) proxy.swallowed);
	not_fallback = 0;
	for (i = 0; i < 10; i++)
	{
		d = timed_take(client, "lost", "k", 1.0 / 3600, 100000, &latency);
		not_fallback += d.source == RL_SOURCE_DATABASE;
	}
	is_int(not_fallback, 10, "and stay there");
	rl_client_stats(client, &stats);
	diag("%llu decisions by the database, %llu in memory",
		 (unsigned long long) stats.database, (unsigned long long) stats.fallback);

	returned = free_within_bound(&latency);
	if (!ok(returned, "rl_client_free returns within %d ms while the cancel is lost (%.0f ms)",
			FREE_BOUND_MS, latency))
	{
		/* the client cannot be freed: leave it, and the sanitizers, behind */
		done_testing();
		_exit(1);
	}

	/* the lost cancels stay swallowed until the end: exit with them pending */
	proxy.stop = true;
	pthread_join(proxy_thread, NULL);
	return done_testing();
}
