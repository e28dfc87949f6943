#!/usr/bin/env bash
# The PGXN archive: make dist in a clean clone writes ratelimit-X.Y.Z.zip,
# everything under ratelimit-X.Y.Z/ with META.json at its top; unpacked
# alone, it builds, installs (into a private copy of the server's
# installation), creates the extension, decides, and passes its regression
# tests.
set -uo pipefail
. "$(dirname "$0")/common.sh"
rl_require_root

work_dir dist
tree=$work/ratelimit
cleanup() {
	rl_cluster_stop "$work/data"
	rm -rf "$work"
}
trap cleanup EXIT

check 'a clean clone of the tree' clean_clone "$tree" || give_up 'no clone'
chown "$RL_PG_USER:" "$work"
version=$(meta_version "$tree")
name=ratelimit-$version
archive=$tree/$name.zip

check 'make dist' rl_as_pg make -C "$tree" dist
check "it writes $name.zip, the version of META.json" test -f "$archive" || give_up 'no archive'

listing() { unzip -Z1 "$archive" | grep -v '/$' | sort; }
tree_listing() { rl_as_pg git -C "$tree" ls-files | sed "s|^|$name/|" | sort; }
is "$(listing | grep -vc "^$name/")" 0 "every file is under $name/"
is "$(listing)" "$(tree_listing)" 'it holds the files of the tree, and nothing else'
check 'with META.json at its top' grep -qxF "$name/META.json" <(listing)

dir=$work/unpacked/$name
check 'it unpacks alone' rl_as_pg unzip -q "$archive" -d "$work/unpacked" || give_up 'no unpacked tree'
# rl_build_install in a shell of its own, which stops at its first error
check 'it builds and installs from its own contents' \
	bash -ec '. "$1"; rl_build_install "$2"' _ "$RL_SRC/test/lib.sh" "$dir"
RL_PGBIN=$dir/tmp_install/usr/lib/postgresql/$RL_PG_MAJOR/bin
check 'a cluster of that installation starts' rl_cluster_start "$work/data"
decision=$(rl_as_pg psql -XAtq -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION ratelimit' \
	-c "SELECT allowed, remaining FROM rl_take('dist', 'ada', 1, 2)" 2>&1)
is "$decision" 't|1' 'CREATE EXTENSION ratelimit, then a decision: allowed, 1 left'
check 'its regression tests pass (make installcheck)' \
	rl_as_pg make -C "$dir" installcheck PGHOST="$PGHOST" PGPORT="$PGPORT"

done_testing
