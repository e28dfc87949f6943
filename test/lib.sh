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
	local missing=() pkg
	for pkg in "$@"; do
		dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' ||
			missing+=("$pkg")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	rl_log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
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
