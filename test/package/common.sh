# Helpers for the package tests, test/package/[0-9]*: TAP output, a clean
# clone of the working tree, and the release version.  Source it, as root.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# they start clusters of their own: no server of the caller's
unset PGHOST PGPORT PGUSER PGDATABASE

tap_count=0
tap_failed=0

# work_dir NAME: sets $work to a fresh folder under /var/tmp for one test
# file, which also holds the output of each check while it runs.
work_dir() {
	work=$(mktemp -d "/var/tmp/ratelimit-$1.XXXXXX")
	chmod 755 "$work"
	tap_log=$work/check.log
}

# check DESC CMD...: one test, passed when CMD succeeds; its output is shown
# as diagnostics when it fails.
check() {
	local desc=$1
	shift
	tap_count=$((tap_count + 1))
	if "$@" >"$tap_log" 2>&1; then
		echo "ok $tap_count - $desc"
		return 0
	fi
	echo "not ok $tap_count - $desc"
	tap_failed=$((tap_failed + 1))
	tail -n 60 "$tap_log" | sed 's/^/# /'
	return 1
}

# is GOT WANT DESC: one test, passed when the two strings are equal.
is() {
	check "$3" test "$1" = "$2" || printf '#   got: %s\n# wanted: %s\n' "$1" "$2"
}

# done_testing: the plan line, and the exit status.
done_testing() {
	echo "1..$tap_count"
	[ "$tap_failed" -eq 0 ]
}

# give_up REASON: end the file here, when the tests that follow cannot run;
# the harness counts the non-zero exit as a failure.
give_up() {
	echo "# giving up: $*"
	done_testing
	exit 1
}

# clean_clone DEST: a git repository holding the working tree as it would be
# committed (tracked and new files, none that .gitignore names, no build
# output), owned by postgres: what a fresh clone has.  In CI, where the
# checkout is a fresh clone, that is the checkout.
clean_clone() {
	local dest=$1
	mkdir -p "$dest"
	git -C "$RL_SRC" ls-files -z --cached --others --exclude-standard |
		tar -C "$RL_SRC" --null --ignore-failed-read -T - -cf - 2>/dev/null |
		tar -C "$dest" -xf - &&
	git -C "$dest" init -q &&
	git -C "$dest" add -A &&
	# no automatic maintenance: newer git runs it detached after a commit, and
	# its lock file can vanish under the chown below
	git -C "$dest" -c user.name=ratelimit -c user.email=ratelimit@localhost \
		-c maintenance.auto=false -c gc.auto=0 commit -q -m 'the working tree' &&
	chown -R "$RL_PG_USER:" "$dest"
}

# meta_version [DIR]: the release version, as META.json says (001_meta checks
# that it agrees with the control file).
meta_version() {
	perl -MJSON::PP -0777 -ne 'print decode_json($_)->{version}' "${1:-$RL_SRC}/META.json"
}
