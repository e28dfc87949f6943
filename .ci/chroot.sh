# Shell functions of .ci/run: a Debian chroot per PostgreSQL major, made with
# debootstrap from the mirror this machine's apt sources name, filled with
# Debian's own server packages, and torn down again.  Source it.

# ci_mirror: the archive URI of this machine's own Debian suite, read from
# its apt sources (one-line .list files and deb822 .sources files).
ci_mirror() {
	local codename f
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
	{
		for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
			[ -f "$f" ] || continue
			awk -v c="$codename" '$1 == "deb" {
				sub(/^deb[ \t]+(\[[^]]*\][ \t]+)?/, "")
				split($0, w, /[ \t]+/)
				if (w[2] == c) print w[1]
			}' "$f"
		done
		for f in /etc/apt/sources.list.d/*.sources; do
			[ -f "$f" ] || continue
			awk -v c="$codename" 'BEGIN { RS = ""; FS = "\n" }
			{
				delete v
				for (i = 1; i <= NF; i++) {
					if ($i ~ /^#/ || $i !~ /^[A-Za-z-]+:/) continue
					k = tolower(substr($i, 1, index($i, ":") - 1))
					v[k] = substr($i, index($i, ":") + 1)
				}
				if (tolower(v["enabled"]) ~ /no/ || v["types"] !~ /(^|[ \t])deb([ \t]|$)/) next
				if ((" " v["suites"] " ") !~ ("[ \t]" c "[ \t]")) next
				split(v["uris"], u, /[ \t]+/)
				for (j in u) if (u[j] != "") { print u[j]; break }
			}' "$f"
		done
	} | head -1
}

# ci_chroot_mount ROOT: the kernel file systems a server needs, each a new
# instance (nothing of the host is bound in).
ci_chroot_mount() {
	local root=$1
	mount -t proc proc "$root/proc"
	mount -t sysfs sysfs "$root/sys"
	mount -t tmpfs -o mode=1777 shm "$root/dev/shm"
	mount -t devpts -o newinstance,ptmxmode=0666 devpts "$root/dev/pts"
}

# ci_chroot_umount ROOT: undo every mount below ROOT, innermost first.
ci_chroot_umount() {
	local root mnt
	root=$(realpath -m "$1")
	for mnt in $(awk -v r="$root/" 'index($2, r) == 1 { print $2 }' /proc/self/mounts | sort -r); do
		umount "$mnt" || umount -l "$mnt"
	done
}

# ci_chroot_make ROOT SUITE MAJOR: debootstrap SUITE into ROOT and install
# Debian's PostgreSQL MAJOR with its -dev, pgTAP, PL/Proxy and pg_cron
# packages and the tools test/run needs.  The archive is a frozen snapshot:
# its Release files may be past their Valid-Until date.
ci_chroot_make() {
	local root=$1 suite=$2 major=$3 mirror
	mirror=$(ci_mirror)
	if [ -z "$mirror" ]; then
		echo "no Debian mirror found in this machine's apt sources" >&2
		return 1
	fi
	debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$root.debootstrap.log" 2>&1 || {
		tail -n 20 "$root.debootstrap.log" >&2
		# what the packages it installed printed
		[ -f "$root/debootstrap/debootstrap.log" ] && tail -n 40 "$root/debootstrap/debootstrap.log" >&2
		return 1
	}
	rm -f "$root.debootstrap.log"
	ci_chroot_fill "$root" "$major"
}

# ci_chroot_fill ROOT MAJOR: the packages of ci_chroot_make, into a
# bootstrapped ROOT, with test/lib.sh's rl_apt_install (a failed step shows
# why and is tried once more); leaves ROOT mounted.  apt-get's whole output
# is kept beside ROOT, in ROOT.install.log.
ci_chroot_fill() {
	local root=$1 major=$2 status
	echo 'Acquire::Check-Valid-Until "false";' >"$root/etc/apt/apt.conf.d/90snapshot"
	cp /etc/resolv.conf "$root/etc/resolv.conf"
	# the certificate authorities this machine adds to Debian's (a TLS proxy's)
	mkdir -p "$root/usr/local/share/ca-certificates"
	cp -r /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
	# a throw-away system: dpkg need not sync every file it unpacks
	echo force-unsafe-io >"$root/etc/dpkg/dpkg.cfg.d/ci-unsafe-io"
	# no service starts inside the chroot: the tests start their own clusters
	printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
	chmod 755 "$root/usr/sbin/policy-rc.d"
	ci_chroot_mount "$root"
	cp "$RL_SRC/test/lib.sh" "$root/tmp/ratelimit-lib.sh"
	ci_chroot_exec "$root" "$major" bash -c '. /tmp/ratelimit-lib.sh &&
		rl_apt_install /var/log/ci-install.log "$@" && update-ca-certificates >/dev/null' \
		ci_chroot_fill postgresql-$major postgresql-server-dev-$major postgresql-$major-pgtap \
		postgresql-$major-plproxy postgresql-$major-cron \
		ca-certificates build-essential libssl-dev make perl git
	status=$?
	cp "$root/var/log/ci-install.log" "$root.install.log" 2>/dev/null
	rm -f "$root/tmp/ratelimit-lib.sh"
	return "$status"
}

# ci_chroot_copy_tree ROOT: the checkout as it would be committed (tracked
# and new files, none that .gitignore names) into ROOT/ratelimit, as a git
# repository: the package suite clones it.
ci_chroot_copy_tree() {
	local root=$1
	mkdir -p "$root/ratelimit"
	git ls-files -z --cached --others --exclude-standard |
		tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -C "$root/ratelimit" -xf - &&
	chroot "$root" sh -ec 'cd /ratelimit && git init -q && git add -A &&
		git -c user.name=ratelimit -c user.email=ratelimit@localhost commit -qm "the tree"'
}

# ci_chroot_run ROOT MAJOR SUITE...: test/run's SUITEs inside ROOT against
# PostgreSQL MAJOR, in a clean environment; its output as test/run prints it.
ci_chroot_run() {
	local root=$1 major=$2
	shift 2
	ci_chroot_exec "$root" "$major" /ratelimit/test/run "$@"
}

# ci_chroot_exec ROOT MAJOR PROGRAM ARG...: PROGRAM of the copied tree inside
# ROOT, with RL_PG_MAJOR=MAJOR, in a clean environment.
ci_chroot_exec() {
	local root=$1 major=$2
	shift 2
	chroot "$root" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		HOME=/root LANG=C.UTF-8 TERM=dumb RL_PG_MAJOR="$major" \
		${RL_ONLY:+RL_ONLY="$RL_ONLY"} ${RL_STORES:+RL_STORES="$RL_STORES"} \
		"$@"
}

# ci_debian_suite MAJOR: the Debian suite whose own packages are PostgreSQL
# MAJOR's (17: Debian 13, 18: unstable)
ci_debian_suite() {
	case $1 in
	17) echo trixie ;;
	18) echo sid ;;
	*) echo "no Debian suite is known for PostgreSQL $1" >&2; return 1 ;;
	esac
}

# ci_chroot_remove ROOT: end what still runs inside ROOT (only processes
# whose root directory it is), undo its mounts, and delete it.
ci_chroot_remove() {
	local root pid pids
	[ -d "$1" ] || return 0
	root=$(realpath "$1")
	for _ in 1 2 3; do
		pids=()
		for pid in /proc/[0-9]*; do
			[ "$(readlink "$pid/root" 2>/dev/null)" = "$root" ] && pids+=("${pid#/proc/}")
		done
		[ ${#pids[@]} -eq 0 ] && break
		kill -KILL "${pids[@]}" 2>/dev/null
		sleep 1
	done
	ci_chroot_umount "$root"
	if awk -v r="$root/" 'index($2, r) == 1 { found = 1 } END { exit !found }' /proc/self/mounts; then
		echo "==> $root still has mounts: not removed" >&2
		return 1
	fi
	rm -rf --one-file-system "$root"
}
