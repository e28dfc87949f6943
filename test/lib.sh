# Shell functions shared by test/run, demo/run and bench/run: install what is
# missing, build and install the extension, and run private clusters as the
# unprivileged user "postgres" (PostgreSQL refuses to run as root).
#
# Source it; it sets RL_SRC (this checkout), RL_PG_MAJOR and RL_PGBIN.

RL_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The PostgreSQL major version to build and test against: RL_PG_MAJOR from
# the environment, or Debian 12's 15.  .ci/run sets 17 and 18 in chroots.
export RL_PG_MAJOR=${RL_PG_MAJOR:-15}
# PG_CONFIG may name another installation of the same major version.
export PG_CONFIG=${PG_CONFIG:-/usr/lib/postgresql/$RL_PG_MAJOR/bin/pg_config}
RL_PGBIN=$("$PG_CONFIG" --bindir 2>/dev/null || echo /usr/lib/postgresql/$RL_PG_MAJOR/bin)
RL_PG_USER=postgres

rl_log() { printf '==> %s\n' "$*" >&2; }

# rl_require_root: installing packages and the extension needs root.
rl_require_root() {
	if [ "$(id -u)" -ne 0 ]; then
		echo "run this as root: it installs Debian packages and the extension" >&2
		exit 2
	fi
}

# rl_install_packages PKG...: apt-get install the ones that are missing.
rl_install_packages() {
	local missing=() pkg log
	for pkg in "$@"; do
		dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' ||
			missing+=("$pkg")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	rl_log "installing ${missing[*]}"
	log=$(mktemp /var/tmp/ratelimit-apt.XXXXXX.log)
	if rl_apt_install "$log" "${missing[@]}"; then
		rm -f "$log"
		return 0
	fi
	rl_log "apt-get's whole output is kept in $log"
	return 1
}

# rl_apt_install LOG PKG...: apt-get update, then install PKG... without
# their recommendations, every line of output appended to LOG.  A failed
# update is tried once more (then the lists already there serve); a failed
# install once more after dpkg --configure -a has finished what the first
# left unconfigured (a maintainer script that failed once).  Each failed step
# shows why (rl_apt).
rl_apt_install() {
	local log=$1 out status
	shift
	export DEBIAN_FRONTEND=noninteractive
	: >>"$log"
	rl_apt "$log" update || rl_apt "$log" update ||
		rl_log "going on with the package lists there are"
	rl_apt "$log" install -y --no-install-recommends "$@" && return 0
	rl_log "dpkg --configure -a, then apt-get install once more"
	out=$(rl_dpkg --configure -a)
	status=$?
	printf '==> dpkg --configure -a\n%s\n' "$out" >>"$log"
	if [ "$status" -ne 0 ]; then
		rl_log "dpkg --configure -a failed too"
		rl_dpkg_failures <<<"$out" >&2
	fi
	rl_apt "$log" install -y --no-install-recommends "$@"
}

# rl_apt LOG ARG...: apt-get ARG..., waiting up to 10 minutes for another's
# lock, its output appended to LOG.  When it fails, it shows the output of
# each maintainer script that failed and the last lines apt-get printed.
rl_apt() {
	local log=$1 start status
	shift
	start=$(($(wc -l <"$log") + 1))
	echo "==> apt-get $*" >>"$log"
	apt-get -q -o DPkg::Lock::Timeout=600 "$@" </dev/null >>"$log" 2>&1
	status=$?
	[ "$status" -eq 0 ] && return 0
	rl_log "apt-get $* failed (exit $status)"
	tail -n +"$start" "$log" | rl_dpkg_failures >&2
	rl_log "its last lines:"
	tail -n +"$start" "$log" | tail -n 25 >&2
	return "$status"
}

# rl_dpkg_failures: of dpkg's output on standard input, every step that
# failed (an unpack, a maintainer script, a trigger), from the line that
# began it to dpkg's error and the lines that explain it.
rl_dpkg_failures() {
	awk '
	/^(Preparing to unpack|Unpacking|Setting up|Processing triggers for) / { step = $0; explain = 0; next }
	/^dpkg: error processing / {
		print "--- dpkg failed:"
		if (step != "") print step
		print
		step = ""
		explain = 1
		next
	}
	explain && /^ / { print; next }
	{ explain = 0; if (step != "") step = step "\n" $0 }
	'
}

# rl_dpkg ARG...: dpkg, waiting up to 10 minutes for a lock that another
# apt-get or dpkg holds.
rl_dpkg() {
	local out try
	for try in $(seq 120); do
		out=$(dpkg "$@" 2>&1) && { echo "$out"; return 0; }
		grep -Eq 'frontend lock|locked by another process|database is locked' <<<"$out" || break
		sleep 5
	done
	echo "$out"
	return 1
}

# The packages every entry point needs: the server (with its contrib
# modules, pgcrypto among them), its headers for PGXS, and a C compiler.
RL_BASE_PACKAGES=(postgresql-$RL_PG_MAJOR postgresql-server-dev-$RL_PG_MAJOR
	build-essential libssl-dev)

# rl_workdir NAME: a fresh copy of the source tree that the postgres user owns
# (a checkout under /root is not readable by it).  Prints its path.
rl_workdir() {
	local dir
	dir=$(mktemp -d "/var/tmp/ratelimit-$1.XXXXXX")
	tar -C "$RL_SRC" --exclude=.git --exclude=tmp_check --exclude=results \
		--exclude=.demo --exclude=node_modules --exclude='*.o' --exclude='*.so' -cf - . | tar -C "$dir" -xf -
	chown -R "$RL_PG_USER:" "$dir"
	chmod 755 "$dir"
	echo "$dir"
}

# rl_build_install DIR [MAKE ARGS...]: build in DIR and install into a
# private copy of the server's installation, DIR/tmp_install, the way
# PostgreSQL's own "make check" does: the system's extension is left as it
# was.  The server finds its share and lib folders relative to its binary, so
# RL_PGBIN, which rl_as_pg puts first in PATH, then points into the copy.
# Call it after installing any package whose files the tests need.
rl_build_install() {
	local dir=$1 pgbin=/usr/lib/postgresql/$RL_PG_MAJOR
	shift
	rl_log "building ratelimit $*"
	make -s -C "$dir" clean >/dev/null
	make -s -C "$dir" "$@" >/dev/null
	rm -rf "$dir/tmp_install"
	mkdir -p "$dir/tmp_install/usr/lib/postgresql" "$dir/tmp_install/usr/share/postgresql"
	cp -a "$pgbin" "$dir/tmp_install/usr/lib/postgresql/"
	cp -a "/usr/share/postgresql/$RL_PG_MAJOR" "$dir/tmp_install/usr/share/postgresql/"
	make -s -C "$dir" install DESTDIR="$dir/tmp_install" "$@" >/dev/null
	chown -R "$RL_PG_USER:" "$dir"
	RL_PGBIN=$dir/tmp_install$pgbin/bin
}

# rl_as_pg CMD...: run as the postgres user with the server's binaries first
# in PATH.
rl_as_pg() {
	runuser -u "$RL_PG_USER" -- env PATH="$RL_PGBIN:$PATH" "$@"
}

# rl_cluster_start DATADIR [CONF LINE...]: initdb and start a private cluster
# that listens only on a Unix socket inside DATADIR.  Exports PGHOST/PGPORT;
# fails, showing the server's log, when it does not start.
rl_cluster_start() {
	local data=$1
	shift
	rl_as_pg initdb -D "$data" -U postgres --auth=trust --no-sync >/dev/null
	{
		echo "listen_addresses = ''"
		echo "unix_socket_directories = '$data'"
		echo "port = 5432"
		echo "fsync = off"
		printf '%s\n' "$@"
	} >>"$data/postgresql.conf"
	# a loaded machine may take more than pg_ctl's default minute to start one
	if ! rl_as_pg pg_ctl -D "$data" -l "$data/server.log" -w -t 600 start >/dev/null; then
		echo "the cluster in $data did not start; its log ends:" >&2
		tail -n 20 "$data/server.log" >&2
		return 1
	fi
	export PGHOST=$data PGPORT=5432 PGUSER=postgres
}

# rl_cluster_stop DATADIR: stop it if it runs.
rl_cluster_stop() {
	[ -f "$1/postmaster.pid" ] && rl_as_pg pg_ctl -D "$1" -m fast -w stop >/dev/null 2>&1
	return 0
}
