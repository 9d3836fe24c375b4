#!/usr/bin/env bash
# Local MariaDB topologies for the multi-node tests and benchmarks of issue 21, all on
# one machine, each instance a separate `mariadbd --user=mysql` started directly (no
# systemd, no mysqld_safe, no galera_new_cluster) with its own datadir, socket, pid
# file, error log and ports under ${FL_CLUSTER_DIR:-/tmp/factledger-cluster}/<instance>/.
# Needs root, mariadb-server and galera-4 (plus rsync, for the state transfers).
#
#   tools/cluster.sh start             a fresh 3-node Galera cluster (galera1..3) and an
#                                      async GTID replica of galera1; "already running
#                                      and healthy" when it is, else stops what half-runs
#                                      and starts from empty datadirs
#   tools/cluster.sh stop              stop every instance started here (Galera nodes,
#                                      replica, standalone nodes) and wipe their datadirs
#   tools/cluster.sh kill N            SIGKILL Galera node N (1..3), wait until it is gone
#   tools/cluster.sh stop-node N       SIGTERM Galera node N (a clean leave), wait until gone
#   tools/cluster.sh start-node N      restart Galera node N so it rejoins the running
#                                      cluster (IST when the donor's gcache allows, else
#                                      SST); waits until it is Synced and the cluster has
#                                      every running node again (3 when all run)
#   tools/cluster.sh status            one line per instance
#   tools/cluster.sh env               `export` lines for the tests (eval "$(... env)")
#   tools/cluster.sh start-standalone  three plain single instances (no wsrep, no binlog)
#   tools/cluster.sh stop-standalone   stop them and wipe their datadirs
#   tools/cluster.sh help              this text
#
# Instances and ports (all on 127.0.0.1; none collides with 3306 or Galera's defaults
# 4444/4567/4568):
#   galera1..3      SQL 3311..3313, gcomm 4561..4563, IST 4571..4573, SST (rsync)
#                   4581..4583. galera1 is bootstrapped, 2 and 3 join by SST.
#   replica         SQL 3314: plain async replica of galera1 (MASTER_USE_GTID=slave_pos),
#                   read_only, no wsrep.
#   standalone1..3  SQL 3321..3323: the "3 partitions on 3 single nodes" benchmark.
# Every instance: root over TCP from 127.0.0.1 with an EMPTY password and ALL PRIVILEGES
# WITH GRANT OPTION (mariadb -h127.0.0.1 -P3311 -uroot). Logs: <dir>/<instance>/error.log.
#
# GTIDs (per MariaDB's "Using MariaDB GTIDs with MariaDB Galera Cluster" and MDEV-26223):
# every Galera node writes a binlog with log_slave_updates, wsrep_gtid_mode=ON, the same
# wsrep_gtid_domain_id and the same server_id, so a write set has the same GTID on every
# node; gtid_domain_id differs per node (used only by non-replicated local writes). So the
# replica finds its position in galera1's binlog again after galera1 rejoined by IST or SST.
#
# Environment (all optional):
#   FL_CLUSTER_DIR   default /tmp/factledger-cluster: the base dir; only its instance
#                    subdirectories (galera1..3, replica, standalone1..3) are ever wiped
set -euo pipefail

SCRIPT_PATH="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
readonly SCRIPT_PATH
readonly BASE_DIR="${FL_CLUSTER_DIR:-/tmp/factledger-cluster}"
readonly HOST=127.0.0.1
readonly MARIADBD=/usr/sbin/mariadbd
readonly GALERA_PROVIDER=/usr/lib/galera/libgalera_smm.so
readonly GALERA_NODES=(1 2 3)
readonly STANDALONE_NODES=(1 2 3)
# Node N uses <base>+N; the bases keep clear of MariaDB's and Galera's default ports.
readonly GALERA_SQL_PORT_BASE=3310
readonly GALERA_GCOMM_PORT_BASE=4560
readonly GALERA_IST_PORT_BASE=4570
readonly GALERA_SST_PORT_BASE=4580
readonly REPLICA_SQL_PORT=3314
readonly STANDALONE_SQL_PORT_BASE=3320
readonly CLUSTER_NAME=factledger-test
# MariaDB's Galera GTID rules: one server_id and one wsrep_gtid_domain_id for the whole
# cluster (the bootstrap node hands them to joiners; MDEV-26223), and per-node
# gtid_domain_id values different from the cluster's (node N uses N).
readonly GALERA_SERVER_ID=1
readonly GALERA_WSREP_GTID_DOMAIN_ID=100
# Must differ from the Galera server_id: a replica skips events carrying its own id.
readonly REPLICA_SERVER_ID=4
readonly REPLICA_GTID_DOMAIN_ID=4
readonly STANDALONE_SERVER_ID_BASE=20
# The replica's login on galera1. Loopback-only throw-away test credentials.
readonly REPL_USER=fl_repl
readonly REPL_PASSWORD=fl_repl_test_only
# Small instances: up to seven of them share 2 cores and a few GiB with the shared
# MariaDB on 3306 and the tests.
readonly INNODB_BUFFER_POOL=64M
readonly INNODB_REDO_LOG=32M
readonly GCACHE_SIZE=64M
readonly MAX_CONNECTIONS=200
# Bounded waits. Measured on 2 cores: a server answers in 1-2 s, a joiner's SST of a
# test-sized datadir takes ~5 s, a rejoin by IST 4-6 s; the rest is headroom for a
# loaded machine and bigger datadirs.
readonly INSTALL_DB_TIMEOUT_S=120
readonly SERVER_START_TIMEOUT_S=60
readonly JOIN_TIMEOUT_S=180
readonly RECOVER_TIMEOUT_S=120
readonly REPLICA_TIMEOUT_S=60
# SIGTERM waits this long for InnoDB to shut down before SIGKILL.
readonly STOP_TIMEOUT_S=60
readonly KILL_TIMEOUT_S=15
# Two invocations at once (parallel tests) would race on pid files and datadirs.
readonly LOCK_TIMEOUT_S=600
readonly LOG_TAIL_LINES=40
# A unix socket path must fit sun_path (108 bytes, with the NUL).
readonly SOCKET_PATH_MAX=100

die() {
  echo "tools/cluster.sh: $*" >&2
  exit 1
}
say() {
  echo "cluster: $*"
}

usage() {
  awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "$SCRIPT_PATH"
}

check_base_dir() {
  case "$BASE_DIR" in
    /*) ;;
    *) die "FL_CLUSTER_DIR must be an absolute path (got '$BASE_DIR')" ;;
  esac
  case "$BASE_DIR" in
    / | */.. | */../* | */. | */./*) die "FL_CLUSTER_DIR must be a plain path, not '$BASE_DIR'" ;;
    /var/lib/mysql | /var/lib/mysql/* | /etc/mysql | /etc/mysql/*)
      die "FL_CLUSTER_DIR must not be inside the shared MariaDB's files ($BASE_DIR)" ;;
  esac
  local longest="$BASE_DIR/standalone1/mariadbd.sock"
  [ "${#longest}" -le "$SOCKET_PATH_MAX" ] || die "FL_CLUSTER_DIR is too long for unix socket paths"
}

require_root() {
  [ "$(id -u)" -eq 0 ] || die "needs root (mariadbd is started with --user=mysql)"
}

# The instances, SQL helpers, option files and one instance's lifecycle.
# shellcheck source=tools/cluster-lib.sh
. "$(dirname "$SCRIPT_PATH")/cluster-lib.sh"

# ---- the Galera cluster and its replica ---------------------------------------------

cluster_healthy() {
  local name
  for name in $(galera_instances); do
    inst_running "$name" && galera_synced "$(inst_port "$name")" "${#GALERA_NODES[@]}" || return 1
  done
  inst_running replica &&
    [ "$(slave_field "$REPLICA_SQL_PORT" Slave_IO_Running)" = Yes ] &&
    [ "$(slave_field "$REPLICA_SQL_PORT" Slave_SQL_Running)" = Yes ]
}

# The replication login, made on galera1 and so replicated by Galera (TOI) to the other
# nodes and by the binlog to the replica: IF NOT EXISTS keeps the replica's SQL thread
# from stopping on it.
create_repl_user() {
  sql "$(inst_port galera1)" <<SQL
CREATE USER IF NOT EXISTS '$REPL_USER'@'$HOST' IDENTIFIED BY '$REPL_PASSWORD';
GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '$REPL_USER'@'$HOST';
SQL
}

# GTID replication of galera1 from the start of its binlog (empty gtid_slave_pos), so
# the replica has everything; MASTER_CONNECT_RETRY=1 reconnects within a second after
# galera1 restarts.
start_replication() {
  sql "$REPLICA_SQL_PORT" <<SQL
CHANGE MASTER TO MASTER_HOST='$HOST', MASTER_PORT=$(inst_port galera1),
  MASTER_USER='$REPL_USER', MASTER_PASSWORD='$REPL_PASSWORD',
  MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1;
START SLAVE;
SQL
}

wait_replica_running() {
  local waited_s=0 io sql_thread
  while :; do
    io="$(slave_field "$REPLICA_SQL_PORT" Slave_IO_Running)"
    sql_thread="$(slave_field "$REPLICA_SQL_PORT" Slave_SQL_Running)"
    [ "$io" = Yes ] && [ "$sql_thread" = Yes ] && return 0
    if [ "$waited_s" -ge "$REPLICA_TIMEOUT_S" ]; then
      echo "Last_IO_Error: $(slave_field "$REPLICA_SQL_PORT" Last_IO_Error)" >&2
      echo "Last_SQL_Error: $(slave_field "$REPLICA_SQL_PORT" Last_SQL_Error)" >&2
      die_with_log replica "replication not running within ${REPLICA_TIMEOUT_S} s (IO: $io, SQL: $sql_thread)"
    fi
    sleep 1
    waited_s=$((waited_s + 1))
  done
}

cmd_start() {
  local started_s=$SECONDS name
  if cluster_healthy; then
    say "already running and healthy"
    cmd_status
    return 0
  fi
  for name in $(cluster_instances); do
    if inst_running "$name"; then
      say "the cluster half-runs: stopping it to start fresh"
      # shellcheck disable=SC2046 # one instance per word
      stop_instances $(cluster_instances)
      break
    fi
  done
  # shellcheck disable=SC2046 # one port per word
  check_ports_free $(galera_ports) "$REPLICA_SQL_PORT"
  install -d -m 0755 "$BASE_DIR"
  for name in $(cluster_instances); do reset_inst_dir "$name"; done
  local n
  for n in "${GALERA_NODES[@]}"; do write_galera_cnf "$n"; done
  write_replica_cnf
  say "initialising datadirs under $BASE_DIR"
  # shellcheck disable=SC2046 # one instance per word
  init_datadirs $(cluster_instances)

  say "bootstrapping galera1 (--wsrep-new-cluster)"
  launch galera1 --wsrep-new-cluster
  say "starting the replica"
  launch replica
  wait_synced galera1 1 "$SERVER_START_TIMEOUT_S"
  create_repl_user
  # One joiner at a time: each takes a full SST, and a donor serves one at a time.
  for n in "${GALERA_NODES[@]:1}"; do
    say "starting galera$n (joins by SST)"
    launch "galera$n"
    wait_synced "galera$n" "$n" "$JOIN_TIMEOUT_S"
  done
  for name in $(galera_instances); do
    wait_synced "$name" "${#GALERA_NODES[@]}" "$JOIN_TIMEOUT_S"
  done
  wait_answers replica
  start_replication
  wait_replica_running
  say "started in $((SECONDS - started_s)) s"
  cmd_status
}

cmd_stop() {
  local started_s=$SECONDS
  # shellcheck disable=SC2046 # one instance per word
  stop_instances $(all_instances)
  # shellcheck disable=SC2046
  wipe_datadirs $(all_instances)
  say "stopped in $((SECONDS - started_s)) s; datadirs wiped (logs kept under $BASE_DIR)"
}

parse_node() {
  [[ "${1:-}" =~ ^[1-3]$ ]] || die "expected a Galera node number 1..3, got '${1:-}'"
  echo "$1"
}

cmd_kill() {
  local n name pid
  n="$(parse_node "${1:-}")"
  name="galera$n"
  if ! pid="$(inst_pid "$name")"; then
    say "$name is not running"
    return 0
  fi
  kill -KILL "$pid"
  wait_gone "$pid" "$KILL_TIMEOUT_S" || die_with_log "$name" "pid $pid still runs ${KILL_TIMEOUT_S} s after SIGKILL"
  stop_orphan_rsync "$name"
  say "$name (pid $pid) killed"
}

cmd_stop_node() {
  local n
  n="$(parse_node "${1:-}")"
  if ! inst_running "galera$n"; then
    say "galera$n is not running"
    return 0
  fi
  stop_instances "galera$n"
  say "galera$n stopped"
}

# After a SIGKILL grastate.dat says seqno -1: without a position the node would ask for
# a full SST. `mariadbd --wsrep-recover` reads the last committed write set from InnoDB;
# --wsrep-start-position then lets the donor send only the missing ones (IST).
recover_position() {
  local name="$1" dir grastate log position
  dir="$(inst_dir "$name")"
  grastate="$(inst_data "$name")/grastate.dat"
  if [ -f "$grastate" ] && ! grep -qE '^seqno:[[:space:]]+-1$' "$grastate"; then
    return 0 # a clean shutdown recorded the position itself
  fi
  log="$dir/wsrep-recover.log"
  rm -f "$log"
  # No network: the replica retries galera1 every second and must not reach this run.
  timeout "$RECOVER_TIMEOUT_S" "$MARIADBD" --defaults-file="$(inst_cnf "$name")" --user=mysql \
    --wsrep-recover --skip-networking --log-error="$log" --pid-file="$dir/wsrep-recover.pid" \
    </dev/null >/dev/null 2>&1 9>&- || {
    tail -n "$LOG_TAIL_LINES" "$log" >&2 2>/dev/null || true
    die "$name: mariadbd --wsrep-recover failed or took over ${RECOVER_TIMEOUT_S} s (log: $log)"
  }
  position="$(sed -nE 's/.*WSREP: Recovered position: ([0-9a-f-]+:-?[0-9]+).*/\1/p' "$log" | tail -n 1)"
  [ -n "$position" ] || {
    tail -n "$LOG_TAIL_LINES" "$log" >&2 2>/dev/null || true
    die "$name: no position in the --wsrep-recover output (log: $log)"
  }
  echo "$position"
}

# A restart of galera1 breaks the replica's connection; with MASTER_CONNECT_RETRY=1 it
# reconnects on its own. Report it when replication was meant to run (SQL thread up).
check_replica_resumes() {
  inst_running replica || return 0
  [ "$(slave_field "$REPLICA_SQL_PORT" Slave_SQL_Running)" = Yes ] || return 0
  local waited_s=0 io
  while :; do
    io="$(slave_field "$REPLICA_SQL_PORT" Slave_IO_Running)"
    if [ "$io" = Yes ]; then
      say "replica reconnected to galera1"
      return 0
    fi
    if [ "$io" = No ] || [ "$waited_s" -ge "$REPLICA_TIMEOUT_S" ]; then
      die_with_log replica "did not resume replication (IO: $io):" \
        "$(slave_field "$REPLICA_SQL_PORT" Last_IO_Error)"
    fi
    sleep 1
    waited_s=$((waited_s + 1))
  done
}

# Before a node rejoins, the running nodes must have dropped its killed predecessor from
# their view (the evs suspect/inactive timeouts, 5-15 s): a new process that joins
# earlier waits for that eviction anyway, and then ~10 s more. They must also still be
# the Primary component: with 2 of 3 nodes gone the survivor has no quorum, and a
# restarted node (a new member) cannot restore it; only a new bootstrap can.
wait_for_peers() {
  local name="$1" peer port="" expected waited_s=0 size status
  expected="$(running_galera_count)"
  for peer in $(galera_instances); do
    if [ "$peer" != "$name" ] && inst_running "$peer"; then
      port="$(inst_port "$peer")"
      break
    fi
  done
  [ -n "$port" ] || die "no Galera node runs, so $name has no cluster to rejoin: run 'tools/cluster.sh start'"
  while :; do
    size="$(status_var "$port" wsrep_cluster_size)"
    [ "$size" = "$expected" ] && break
    if [ "$waited_s" -ge "$JOIN_TIMEOUT_S" ]; then
      die_with_log "$peer" "still sees cluster size '$size', not $expected, after ${JOIN_TIMEOUT_S} s"
    fi
    sleep 1
    waited_s=$((waited_s + 1))
  done
  status="$(status_var "$port" wsrep_cluster_status)"
  [ "$status" = Primary ] ||
    die "$peer is '$status', not Primary (no quorum): $name cannot rejoin; run 'tools/cluster.sh stop' and 'start'"
}

# How the node came back, from the log lines written since it was launched.
describe_state_transfer() {
  local name="$1" from_line="$2" new_lines ist
  new_lines="$(tail -n +"$from_line" "$(inst_log "$name")" 2>/dev/null || true)"
  ist="$(grep -oE 'Receiving IST: [0-9]+ writesets, seqnos [0-9-]+' <<<"$new_lines" | tail -n 1 || true)"
  if grep -q 'rsync SST completed on joiner' <<<"$new_lines"; then
    echo "full SST (rsync)${ist:+, then $ist}"
  elif [ -n "$ist" ]; then
    echo "IST ($ist)"
  else
    echo "no state transfer logged"
  fi
}

cmd_start_node() {
  local n name started_s=$SECONDS position size log_from
  n="$(parse_node "${1:-}")"
  name="galera$n"
  log_from=$(($(wc -l 2>/dev/null <"$(inst_log "$name")" || echo 0) + 1))
  if inst_running "$name"; then
    say "$name is already running"
  else
    [ -d "$(inst_data "$name")/mysql" ] || die "$name has no datadir: run 'tools/cluster.sh start'"
    wait_for_peers "$name"
    position="$(recover_position "$name")"
    if [ -n "$position" ]; then
      say "starting $name at recovered position $position"
      launch "$name" --wsrep-start-position="$position"
    else
      say "starting $name"
      launch "$name"
    fi
  fi
  size="$(running_galera_count)"
  wait_synced "$name" "$size" "$JOIN_TIMEOUT_S"
  say "$name Synced, cluster size $size, in $((SECONDS - started_s)) s;" \
    "state transfer: $(describe_state_transfer "$name" "$log_from")"
  if [ "$n" = 1 ]; then check_replica_resumes; fi
}

# ---- standalone instances -----------------------------------------------------------

standalone_healthy() {
  local name
  for name in $(standalone_instances); do
    inst_running "$name" && answers "$(inst_port "$name")" || return 1
  done
}

cmd_start_standalone() {
  local started_s=$SECONDS name n
  if standalone_healthy; then
    say "standalone instances already running"
    return 0
  fi
  # shellcheck disable=SC2046 # one instance per word
  stop_instances $(standalone_instances)
  for n in "${STANDALONE_NODES[@]}"; do check_ports_free $((STANDALONE_SQL_PORT_BASE + n)); done
  install -d -m 0755 "$BASE_DIR"
  for n in "${STANDALONE_NODES[@]}"; do
    reset_inst_dir "standalone$n"
    write_standalone_cnf "$n"
  done
  # shellcheck disable=SC2046
  init_datadirs $(standalone_instances)
  for name in $(standalone_instances); do launch "$name"; done
  for name in $(standalone_instances); do wait_answers "$name"; done
  say "standalone instances started in $((SECONDS - started_s)) s"
}

cmd_stop_standalone() {
  # shellcheck disable=SC2046 # one instance per word
  stop_instances $(standalone_instances)
  # shellcheck disable=SC2046
  wipe_datadirs $(standalone_instances)
  say "standalone instances stopped; datadirs wiped"
}

# ---- status and env ---------------------------------------------------------------

status_line() {
  local name="$1" port pid
  port="$(inst_port "$name")"
  if ! pid="$(inst_pid "$name")"; then
    printf '%-12s %s:%s  not running\n' "$name" "$HOST" "$port"
    return 0
  fi
  case "$name" in
    galera*)
      if ! answers "$port"; then
        printf '%-12s %s:%s  running (pid %s)  not answering SQL (starting or in a state transfer)\n' \
          "$name" "$HOST" "$port" "$pid"
        return 0
      fi
      printf '%-12s %s:%s  running (pid %s)  state=%s ready=%s cluster=%s size=%s\n' \
        "$name" "$HOST" "$port" "$pid" \
        "$(status_var "$port" wsrep_local_state_comment)" "$(status_var "$port" wsrep_ready)" \
        "$(status_var "$port" wsrep_cluster_status)" "$(status_var "$port" wsrep_cluster_size)"
      ;;
    replica)
      printf '%-12s %s:%s  running (pid %s)  io=%s sql=%s seconds_behind_master=%s gtid_slave_pos=%s\n' \
        "$name" "$HOST" "$port" "$pid" \
        "$(slave_field "$port" Slave_IO_Running)" "$(slave_field "$port" Slave_SQL_Running)" \
        "$(slave_field "$port" Seconds_Behind_Master)" "$(sql_value "$port" 'SELECT @@gtid_slave_pos' || true)"
      ;;
    *)
      if answers "$port"; then
        printf '%-12s %s:%s  running (pid %s)  answers\n' "$name" "$HOST" "$port" "$pid"
      else
        printf '%-12s %s:%s  running (pid %s)  not answering\n' "$name" "$HOST" "$port" "$pid"
      fi
      ;;
  esac
}

cmd_status() {
  local name
  for name in $(all_instances); do status_line "$name"; done
}

urls() {
  local list="" name
  for name in "$@"; do list="${list:+$list,}mysql://root@$HOST:$(inst_port "$name")"; done
  echo "$list"
}

cmd_env() {
  # shellcheck disable=SC2046 # one instance per word
  echo "export FACTLEDGER_TEST_GALERA_URLS=$(urls $(galera_instances))"
  echo "export FACTLEDGER_TEST_REPLICA_PRIMARY_URL=$(urls galera1)"
  echo "export FACTLEDGER_TEST_REPLICA_URL=$(urls replica)"
  # shellcheck disable=SC2046
  echo "export FACTLEDGER_TEST_STANDALONE_URLS=$(urls $(standalone_instances))"
  echo "export FACTLEDGER_CLUSTER_SCRIPT=$SCRIPT_PATH"
}

# ---- main ---------------------------------------------------------------------------

take_lock() {
  install -d -m 0755 "$BASE_DIR"
  exec 9>"$BASE_DIR/.lock"
  flock -w "$LOCK_TIMEOUT_S" 9 || die "another tools/cluster.sh still runs after ${LOCK_TIMEOUT_S} s"
}

main() {
  local cmd="${1:-help}"
  shift || true
  check_base_dir
  case "$cmd" in
    help | -h | --help) usage ;;
    env) cmd_env ;;
    status) cmd_status ;;
    start | stop | kill | stop-node | start-node | start-standalone | stop-standalone)
      require_root
      [ -x "$MARIADBD" ] || die "$MARIADBD is missing (apt-get install mariadb-server)"
      take_lock
      case "$cmd" in
        start)
          [ -f "$GALERA_PROVIDER" ] || die "$GALERA_PROVIDER is missing (apt-get install galera-4)"
          command -v rsync >/dev/null 2>&1 || die "rsync is missing (needed for SST)"
          cmd_start
          ;;
        stop) cmd_stop ;;
        kill) cmd_kill "$@" ;;
        stop-node) cmd_stop_node "$@" ;;
        start-node) cmd_start_node "$@" ;;
        start-standalone) cmd_start_standalone ;;
        stop-standalone) cmd_stop_standalone ;;
      esac
      ;;
    *)
      usage >&2
      die "unknown command '$cmd'"
      ;;
  esac
}

main "$@"
