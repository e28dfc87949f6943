#!/usr/bin/env bash
# The Debian package: debian/control is in step with debian/control.in, and
# its Build-Depends name what the build uses; dpkg-buildpackage, with nothing
# run before it in a clean clone, builds postgresql-NN-ratelimit for the
# major under test (RL_PG_MAJOR), lintian finds no error in it, it ships
# every extension of the tree, the client headers and the README; installed
# with dpkg -i, CREATE EXTENSION and a decision work and its autopkgtest
# passes; removed, its files are gone.  It installs into the system's PostgreSQL directories, so
# it refuses to run where the package is already installed, and removes it
# at the end.
set -uo pipefail
. "$(dirname "$0")/common.sh"
rl_require_root

pkg=postgresql-$RL_PG_MAJOR-ratelimit
installed() { dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed'; }
installed && give_up "$pkg is installed on this machine; remove it first (dpkg -r $pkg)"

work_dir deb
tree=$work/ratelimit
cleanup() {
	dpkg-query -W "$pkg" >/dev/null 2>&1 && rl_dpkg -P "$pkg" >/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

check 'a clean clone of the tree' clean_clone "$tree" || give_up 'no clone'
chown "$RL_PG_USER:" "$work"

# the build dependencies that debian/control names
build_deps() {
	(cd "$tree" && dpkg-checkbuilddeps) 2>/dev/null && return 0
	DEBIAN_FRONTEND=noninteractive apt-get build-dep -o DPkg::Lock::Timeout=600 \
		-y -qq --no-install-recommends "$tree"
}
check 'the build dependencies of debian/control are installed' build_deps

# debian/control is what pg_buildext updatecontrol makes of control.in for
# the majors it names (Debian 12's): pg_buildext checkcontrol, which the
# build runs at clean, finds nothing to update
control_majors() { sed -n 's/^Package: postgresql-\([0-9.]*\)-ratelimit$/\1/p' "$tree/debian/control"; }
control_in_step() {
	local majors
	majors=$(control_majors)
	[ -n "$majors" ] || { echo 'debian/control names no postgresql-NN-ratelimit'; return 1; }
	runuser -u "$RL_PG_USER" -- env -u PG_UPDATECONTROL PG_SUPPORTED_VERSIONS="$majors" \
		sh -c "cd '$tree' && pg_buildext checkcontrol"
}
check "debian/control is what pg_buildext updatecontrol makes of debian/control.in for $(control_majors | xargs)" \
	control_in_step

# as a packager builds it: nothing run in the clean clone before; on a
# release of other majors, the clean target remakes debian/control for them
build() {
	[ -z "$(runuser -u "$RL_PG_USER" -- git -C "$tree" status --porcelain)" ] ||
		{ echo 'the clone is not clean'; return 1; }
	runuser -u "$RL_PG_USER" -- sh -c "cd '$tree' && dpkg-buildpackage -us -uc -b"
}
check 'dpkg-buildpackage -us -uc -b builds it in the clean clone, as an unprivileged user' build

# Build-Depends (of the committed debian/control, and of control.in) names
# what the build itself uses: the packages of the headers its sources
# include (the flags PGXS compiles them with), of the libraries it links
# (PGXS's link flags), and of debhelper's dh and pgxs sequence and pg_buildext
# build_vars TEXT: TEXT, with the variables of the Makefile and PGXS
build_vars() {
	printf 'rl-build-vars:\n\t@echo %s\n' "$1" |
		runuser -u "$RL_PG_USER" -- make -s --no-print-directory -C "$tree" -f Makefile -f - rl-build-vars
}
used_files() {
	local cppflags ldflags
	cppflags=$(build_vars '$(CPPFLAGS)') &&
		ldflags=$(build_vars '$(LDFLAGS) $(LDFLAGS_SL) $(SHLIB_LINK)') || return 1
	(cd "$tree" && cc -M $cppflags src/*.c) | tr -s ' \\' '\n' | grep '^/'
	# the linker names the file of each -l library it links
	cc -shared -nostdlib -o "$work/libs.so" -Wl,-t $ldflags | grep '^/'
	command -v dh pg_buildext
	echo /usr/share/perl5/Debian/Debhelper/Sequence/pgxs.pm
}
build_depends_cover() {
	local files
	files=$(used_files) || return 1
	runuser -u "$RL_PG_USER" -- git -C "$tree" show HEAD:debian/control >"$work/control.committed"
	sort -u <<<"$files" | xargs realpath -s | xargs dpkg -S | sed 's/: .*//' |
		perl "$(dirname "$0")/build_depends.pl" "$work/control.committed" "$tree/debian/control.in"
}
check 'Build-Depends names the packages of the headers, libraries and programs the build uses' \
	build_depends_cover

version=$(cd "$tree" && dpkg-parsechangelog -S Version)
deb=$work/${pkg}_${version}_$(dpkg --print-architecture).deb
check "it is $(basename "$deb")" test -f "$deb" || give_up 'no package'
check 'lintian reports no errors' \
	runuser -u "$RL_PG_USER" -- lintian --fail-on error "$work"/ratelimit_*.changes

# What it ships: every extension of the tree (ratelimit.control here, others
# here or in proxy/), with each install or upgrade script of the tree and the
# generated one, the module, the client headers and the README.
files=$(dpkg-deb -c "$deb" | awk '{ print substr($6, 2) }')
ships() {
	grep -qxF "$1" <<<"$files" || { echo "not in the package: $1"; return 1; }
}
ships_all() {
	local f
	for f in "$@"; do ships "$f" || return 1; done
}
share=/usr/share/postgresql/$RL_PG_MAJOR/extension
tree_files() { runuser -u "$RL_PG_USER" -- git -C "$tree" ls-files "$@"; }
for control in $(tree_files '*.control'); do
	name=$(basename "$control" .control)
	expected=("$share/$name.control")
	for script in $(tree_files "$name--*.sql" "*/$name--*.sql"); do
		expected+=("$share/$(basename "$script")")
	done
	check "it ships the extension $name: its control file and $((${#expected[@]} - 1)) scripts" \
		ships_all "${expected[@]}"
done
check 'it ships the generated install script of the default version' \
	ships "$share/ratelimit--$(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$tree/ratelimit.control").sql"
check 'it ships the module' ships "/usr/lib/postgresql/$RL_PG_MAJOR/lib/ratelimit.so"
check 'it ships the C client headers in /usr/include/postgresql/ratelimit/' \
	ships_all /usr/include/postgresql/ratelimit/{ratelimit_client.h,gcra.h}
check 'it ships the README' ships "/usr/share/doc/$pkg/README.md.gz"

check 'dpkg -i installs it' rl_dpkg -i "$deb"

# a throw-away cluster of the system's PostgreSQL, which finds the installed
# extension where the package put it
pg_virtualenv -t -v "$RL_PG_MAJOR" psql -XAtq -v ON_ERROR_STOP=1 -o "$work/decision" \
	-c 'CREATE EXTENSION ratelimit' \
	-c "SELECT allowed, remaining FROM rl_take('package', 'ada', 1, 2)" >"$work/virtualenv.log" 2>&1
is "$(cat "$work/decision" 2>/dev/null)" 't|1' 'CREATE EXTENSION ratelimit, then a decision: allowed, 1 left' ||
	sed 's/^/# /' "$work/virtualenv.log"

header_use() {
	printf '#define RATELIMIT_CLIENT_IMPLEMENTATION\n#include <ratelimit/ratelimit_client.h>\nint main(void) { return 0; }\n' |
		cc -std=c11 -Wall -Wextra -Werror -x c -o "$work/client" - \
			-I"$(pg_config --includedir)" -lpq -pthread -lm
}
check 'an application builds with #include <ratelimit/ratelimit_client.h> and -I$(pg_config --includedir)' header_use

# its autopkgtest, as autopkgtest runs it: from the source tree, against the
# installed package
check 'its autopkgtest (debian/tests/installcheck) passes' \
	sh -c "cd '$tree' && AUTOPKGTEST_TMP='$work' debian/tests/installcheck"

check 'dpkg -r removes it' rl_dpkg -r "$pkg"
left() {
	local f found=0
	while read -r f; do
		[ -n "$f" ] && [ ! -d "$f" ] && [ -e "$f" ] && { echo "still there: $f"; found=1; }
	done <<<"$files"
	[ "$found" -eq 0 ]
}
check 'and every file it had installed is gone' left
check 'dpkg -P purges it' rl_dpkg -P "$pkg"

done_testing
