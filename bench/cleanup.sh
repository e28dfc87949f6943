#!/usr/bin/env bash
# Measures cleanup: the time to delete 1 million expired buckets out of 2
# million, and the latency of rl_take on live keys meanwhile (median and 99th
# percentile), beside the same latency without cleanup:
#
#   bench/cleanup.sh [SECONDS] [BATCH SIZE...]   (default 20 s; 1000 10000 100000)
#
# Run as root from any checkout.  It builds and installs the extension
# (optimised, no assertions) and starts a private cluster with the library
# preloaded.  For each batch size the background worker makes one run; then
# rl_cleanup() deletes the same rows in one statement.  pgbench takes live
# keys during every run, for SECONDS, and only the decisions that completed
# while the deletion ran count.
set -euo pipefail
. "$(dirname "$0")/../test/lib.sh"
rl_require_root
rl_install_packages "${RL_BASE_PACKAGES[@]}"

seconds=${1:-20}
[ $# -gt 0 ] && shift
batches=("$@")
[ ${#batches[@]} -eq 0 ] && batches=(1000 10000 100000)

work=$(rl_workdir bench-cleanup)
cd "$work"  # the postgres user cannot enter a checkout under /root
rl_build_install "$work"
data=$work/data
trap 'rl_cluster_stop "$data"; rm -rf "$work"' EXIT

# Settings, each justified:
settings=(
	"shared_preload_libraries = 'ratelimit'" # the background worker
	"ratelimit.cleanup_interval = 0"         # runs are started one at a time below
	"shared_buffers = '1GB'"                 # the 2-million-row table stays in memory
	"max_connections = 20"                   # 2 clients and maintenance
	"log_line_prefix = '%n '"                # epoch times: when the worker's run ended
)
printf 'server settings changed from the defaults:\n' >&2
printf '  %s\n' "${settings[@]}" >&2
rl_cluster_start "$data" "${settings[@]}"
log=$data/server.log

sql() { rl_as_pg psql -qXAt -v ON_ERROR_STOP=1 -d postgres "$@"; }
sql -c 'CREATE EXTENSION ratelimit'

# Live keys are the odd ones, and rl_take decides on them with a tolerance
# (burst / rate, 10 000 s) larger than their debt (1 hour): every decision is
# allowed and updates its row, like a busy limiter.
cat >"$work/take.sql" <<'EOF'
\set k 2 * random(0, 999999) + 1
SELECT * FROM rl_take('bench', 'k' || :k, 1000, 10000000);
EOF
chown "$RL_PG_USER:" "$work/take.sql"

# 2 million buckets, every other one expired an hour ago, so the expired rows
# are spread over the whole table.  Keys as rl_take computes them (no
# ratelimit.key_secret).
load() {
	sql <<'EOF'
TRUNCATE rl_buckets;
INSERT INTO rl_buckets
SELECT sha256(convert_to('bench', 'UTF8') || '\x00'::bytea || convert_to('k' || i, 'UTF8')),
	   now() + CASE WHEN i % 2 = 1 THEN interval '1 hour' ELSE interval '-1 hour' END,
	   1000
FROM generate_series(1, 2000000) AS i;
VACUUM ANALYZE rl_buckets;
EOF
}

# start_takes NAME: pgbench in the background, one log line per decision.
start_takes() {
	mkdir -p "$work/log" && chown "$RL_PG_USER:" "$work/log"
	(cd "$work" && rl_as_pg pgbench -n -M prepared -c 2 -j 2 -T "$seconds" \
		-f take.sql --log --log-prefix="log/$1" postgres >"$work/log/$1.out" 2>&1) &
	pgbench_pid=$!
	sleep 1
}

# latency NAME FROM TO: "median p99 count" in ms of the decisions that
# completed between the epoch times FROM and TO.
latency() {
	cat "$work/log/$1".[0-9]* |
		awk -v from="$2" -v to="$3" '{ t = $5 + $6 / 1e6 } t >= from && t <= to { print $3 / 1000 }' |
		sort -n |
		awk '{ v[NR] = $1 } END {
			if (NR == 0) { print "- - 0"; exit }
			m = int(NR * 0.5); if (m < NR * 0.5) m++
			p = int(NR * 0.99); if (p < NR * 0.99) p++
			printf "%.3f %.3f %d\n", v[m], v[p], NR }'
}

row() { printf '%-26s %16s %14s %14s %10s\n' "$@"; }

results=$work/results.txt
row "cleanup" "delete 1M of 2M" "take median" "take p99" "decisions" >"$results"

echo "without cleanup" >&2
load
start_takes none
from=$(date +%s.%N)
wait "$pgbench_pid"
read -r med p99 n < <(latency none "$from" "$(date +%s.%N)")
row "none" "-" "$med ms" "$p99 ms" "$n" >>"$results"

for batch in "${batches[@]}"; do
	echo "worker, batches of $batch" >&2
	load
	lines=$(wc -l <"$log")
	start_takes "batch$batch"
	sql -c "ALTER SYSTEM SET ratelimit.cleanup_batch_size = $batch" \
		-c "ALTER SYSTEM SET ratelimit.cleanup_interval = '1s'" -c 'SELECT pg_reload_conf()' >/dev/null
	until tail -n "+$lines" "$log" | grep -q 'ratelimit cleanup deleted .* "postgres"'; do
		sleep 0.2
	done
	sql -c "ALTER SYSTEM SET ratelimit.cleanup_interval = 0" -c 'SELECT pg_reload_conf()' >/dev/null
	wait "$pgbench_pid"
	# "<epoch> LOG:  ratelimit cleanup deleted N expired buckets in database "postgres" in S s"
	read -r end deleted took < <(tail -n "+$lines" "$log" |
		sed -n 's/^\([0-9.]*\) LOG: .*deleted \([0-9]*\) expired buckets.* in \([0-9.]*\) s$/\1 \2 \3/p' | head -1)
	[ "$deleted" = 1000000 ] || { echo "the worker deleted $deleted buckets, not 1000000" >&2; exit 1; }
	read -r med p99 n < <(latency "batch$batch" "$(awk -v e="$end" -v t="$took" 'BEGIN { printf "%.3f", e - t }')" "$end")
	row "worker, batches of $batch" "$took s" "$med ms" "$p99 ms" "$n" >>"$results"
done

echo "rl_cleanup()" >&2
load
start_takes statement
from=$(date +%s.%N)
deleted=$(sql -c 'SELECT rl_cleanup()')
to=$(date +%s.%N)
wait "$pgbench_pid"
[ "$deleted" = 1000000 ] || { echo "rl_cleanup() deleted $deleted buckets, not 1000000" >&2; exit 1; }
read -r med p99 n < <(latency statement "$from" "$to")
row "rl_cleanup(), 1 statement" "$(awk -v f="$from" -v t="$to" 'BEGIN { printf "%.3f s", t - f }')" "$med ms" "$p99 ms" "$n" >>"$results"

cat "$results"
