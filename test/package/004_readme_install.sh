#!/usr/bin/env bash
# The README's install, as a Debian 12 reader runs it, as root: its shell
# blocks from "## Install" to the quick start, as printed, in a clean clone,
# against a cluster made by Debian's pg_createcluster (Debian's default
# authentication: peer on the socket, a password over TCP).  The blocks name
# the cluster 15/main; this test makes a cluster of its own and runs them
# with that name in its place, so the machine's own cluster is left alone.
# Then the quick start's first decision, as web, over TCP with the password.
# It installs into the system's PostgreSQL directories and uninstalls at the
# end.
set -uo pipefail
. "$(dirname "$0")/common.sh"
rl_require_root

work_dir readme-install
tree=$work/ratelimit
cluster=readme_$$
cleanup() {
	pg_dropcluster --stop "$RL_PG_MAJOR" "$cluster" >/dev/null 2>&1
	[ -d "$tree" ] && make -s -C "$tree" uninstall >/dev/null 2>&1
	rm -rf "$work"
}
trap cleanup EXIT

# the README's sh blocks of the section "## Install", in order
install_blocks() {
	perl -0777 -ne 'my ($s) = /^## Install\n(.*?)^## /ms or exit 1;
		print "$1\0" while $s =~ /^```sh\n(.*?)^```$/msg' "$RL_SRC/README.md"
}
mapfile -d '' blocks < <(install_blocks)
# the README's install is Debian 12's, for its PostgreSQL: on another major
# (a chroot of Debian 13 or unstable) its packages do not exist
readme_major=$(grep -om1 'postgresql-[0-9]* ' <<<"${blocks[0]:-}" | tr -dc 0-9)
if [ "$readme_major" != "$RL_PG_MAJOR" ]; then
	echo "1..0 # SKIP the README installs PostgreSQL ${readme_major:-?} (Debian 12); this is $RL_PG_MAJOR"
	exit 0
fi
is "${#blocks[@]}" 3 'the Install section has three shell blocks: build, preload, role and database'

check 'a clean clone of the tree' clean_clone "$tree" || give_up 'no clone'
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
check "pg_createcluster $RL_PG_MAJOR $cluster (Debian's defaults)" \
	pg_createcluster "$RL_PG_MAJOR" "$cluster" -p "$port" || give_up 'no cluster'

# psql and createdb through Debian's wrapper reach this cluster
export PGCLUSTER=$RL_PG_MAJOR/$cluster
for block in "${blocks[@]}"; do
	block=${block//"$RL_PG_MAJOR main"/"$RL_PG_MAJOR $cluster"}
	block=${block//"/$RL_PG_MAJOR/main/"/"/$RL_PG_MAJOR/$cluster/"}
	check "as printed: $(head -1 <<<"$block")" bash -euo pipefail -c "cd '$tree' && $block"
done

check 'the cluster runs with the library preloaded' \
	sh -c "runuser -u postgres -- psql -Atc 'SHOW shared_preload_libraries' | grep -qx ratelimit"
decision=$(PGPORT=$port psql -X -At 'postgres://web:change-me@localhost/app' \
	-c "SELECT allowed, remaining FROM rl_take('quick', 'ada', 1.0/60, 2)" 2>&1)
is "$decision" 't|1' 'web decides over TCP with its password, as the quick start shows'
wrong=$(PGPORT=$port psql -X -At 'postgres://web@localhost/app' -c 'SELECT 1' </dev/null 2>&1)
check 'without the password, the connection is refused (the default pg_hba.conf)' \
	grep -q 'password' <<<"$wrong"

done_testing
