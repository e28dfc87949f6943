"""Fixtures on the real clusters test/clients/python.pl starts, and a TAP line per test.

Environment (set by test/clients/python.pl): RL_TABLE_DSN and RL_MEMORY_DSN
(a cluster per store), RL_OUTAGE_DSN and RL_OUTAGE_PGDATA (a cluster the
tests stop, restart and SIGSTOP), RL_BOUNCER_DSN (PgBouncer in transaction
mode in front of the table store's cluster), RL_PGBIN, RL_TAP (the file of
TAP lines).  With RL_SQL_EDITION=1, RL_TABLE_DSN's server has the SQL
edition (managed/) instead of the C extension, and is the only cluster.
"""
import os
import signal
import subprocess
import time

import psycopg
import pytest

from ratelimit_client import Limiter

SQL_EDITION = os.environ.get("RL_SQL_EDITION") == "1"
STORES = ["table"] if SQL_EDITION else ["table", "memory"]


def needs_c_extension(what):
    """A test that reads a part of the C extension the SQL edition lacks."""
    return pytest.mark.skipif(SQL_EDITION, reason=f"the SQL edition has no {what}")


def environ(name):
    """A setting of test/clients/python.pl; without it (pytest run by hand) the test is skipped."""
    value = os.environ.get(name)
    if value is None:
        pytest.skip(f"{name} is not set: no database (test/clients/python.pl starts the clusters)")
    return value


def dsn(name, **extra):
    base = environ(f"RL_{name.upper()}_DSN")
    return " ".join([base] + [f"{k}={v}" for k, v in extra.items()])


def sql(name, query, params=None, **extra):
    with psycopg.connect(dsn(name, **extra), autocommit=True) as conn:
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else None


@pytest.fixture(params=STORES)
def store(request):
    """Each decision test runs against both stores."""
    return request.param


class Server:
    """The outage cluster: stop, start, restart, and stall it with SIGSTOP."""

    def __init__(self):
        self.pgdata = environ("RL_OUTAGE_PGDATA")
        self.pg_ctl = os.path.join(environ("RL_PGBIN"), "pg_ctl")
        self.stopped_pids = []

    def ctl(self, *args):
        subprocess.run([self.pg_ctl, "-D", self.pgdata, "-l", os.path.join(self.pgdata, "..", "pytest.log"),
                        "-w", *args], check=True, stdout=subprocess.DEVNULL)

    def stop(self):
        self.ctl("-m", "fast", "stop")

    def start(self):
        self.ctl("start")

    def restart(self):
        self.ctl("-m", "fast", "restart")

    def running(self):
        return os.path.exists(os.path.join(self.pgdata, "postmaster.pid"))

    def pids(self):
        """The postmaster and its children: this cluster's processes only."""
        with open(os.path.join(self.pgdata, "postmaster.pid")) as f:
            postmaster = int(f.readline())
        children = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        stat = f.read()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                    children.append(int(entry))
        return [postmaster] + children

    def sigstop(self):
        for pid in self.pids():
            os.kill(pid, signal.SIGSTOP)
            self.stopped_pids.append(pid)

    def sigcont(self):
        while self.stopped_pids:
            try:
                os.kill(self.stopped_pids.pop(), signal.SIGCONT)
            except ProcessLookupError:
                pass


@pytest.fixture
def server():
    s = Server()
    try:
        yield s
    finally:
        # every exit path: the server runs again, as the next test expects
        s.sigcont()
        if not s.running():
            s.start()


@pytest.fixture
def make_limiter():
    made = []

    def make(name="table", cls=Limiter, **options):
        lim = cls(dsn(name), **options)
        made.append(lim)
        return lim
    yield make
    for lim in made:
        if isinstance(lim, Limiter):
            lim.close()


def wait_for(check, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.02)
    return check()


_tap = {"n": 0}


def pytest_runtest_logreport(report):
    """One TAP line per test: ok when its setup, call and teardown passed."""
    path = os.environ.get("RL_TAP")
    if not path:
        return
    failed = report.failed
    if report.when == "call" or (report.when == "setup" and (report.failed or report.skipped)) \
            or (report.when == "teardown" and report.failed):
        _tap["n"] += 1
        status = "not ok" if failed else "ok"
        skip = " # SKIP" if report.skipped else ""
        with open(path, "a") as f:
            f.write(f"{status} {_tap['n']} - {report.nodeid} ({report.when}){skip}\n")
