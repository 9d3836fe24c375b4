# Sourced by tools/cluster.sh (not run on its own): the instances' files and ports,
# SQL helpers, option files, and the lifecycle of one mariadbd (init, launch, wait,
# stop). It uses the constants and die/say that cluster.sh defines before sourcing it.
# shellcheck shell=bash
# ---- instances --------------------------------------------------------------------

inst_dir() { echo "$BASE_DIR/$1"; }
inst_cnf() { echo "$BASE_DIR/$1/my.cnf"; }
inst_data() { echo "$BASE_DIR/$1/data"; }
inst_log() { echo "$BASE_DIR/$1/error.log"; }
# Written by this script right after the launch, so even a server that dies before
# writing its own pid file is known; mariadbd's own pid file is mariadbd.pid.
inst_pid_file() { echo "$BASE_DIR/$1/launch.pid"; }

inst_port() {
  case "$1" in
    galera[1-3]) echo $((GALERA_SQL_PORT_BASE + ${1#galera})) ;;
    replica) echo "$REPLICA_SQL_PORT" ;;
    standalone[1-3]) echo $((STANDALONE_SQL_PORT_BASE + ${1#standalone})) ;;
    *) die "unknown instance $1" ;;
  esac
}

galera_instances() {
  local n
  for n in "${GALERA_NODES[@]}"; do echo "galera$n"; done
}
standalone_instances() {
  local n
  for n in "${STANDALONE_NODES[@]}"; do echo "standalone$n"; done
}
cluster_instances() {
  galera_instances
  echo replica
}
all_instances() {
  cluster_instances
  standalone_instances
}

pid_alive() {
  local pid="$1" state
  [ -r "/proc/$pid/stat" ] || return 1
  # The state follows the parenthesised command name. A SIGKILLed server stays a
  # zombie until PID 1 reaps it: it is gone for us (its ports are closed).
  state="$(sed -E 's/^.*\) (.).*$/\1/' "/proc/$pid/stat" 2>/dev/null)" || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

# Prints the pid of the instance's mariadbd when it runs. The pid comes from our pid
# file and must still be a mariadbd started with this instance's option file, so a
# recycled pid is never signalled.
inst_pid() {
  local name="$1" pid_file pid
  pid_file="$(inst_pid_file "$name")"
  [ -f "$pid_file" ] || return 1
  pid="$(cat "$pid_file" 2>/dev/null)" || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  pid_alive "$pid" || return 1
  tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null |
    grep -qxF -- "--defaults-file=$(inst_cnf "$name")" || return 1
  echo "$pid"
}
inst_running() {
  inst_pid "$1" >/dev/null
}

print_log_tail() {
  local log
  log="$(inst_log "$1")"
  if [ -f "$log" ]; then
    echo "---- last $LOG_TAIL_LINES lines of $log ----" >&2
    tail -n "$LOG_TAIL_LINES" "$log" >&2 || true
    echo "----" >&2
  fi
}
die_with_log() {
  local name="$1"
  shift
  print_log_tail "$name"
  die "$name: $*"
}

# ---- SQL ----------------------------------------------------------------------------

# --no-defaults: the machine's /etc/mysql option files belong to the shared server on
# 3306 (socket, maybe TLS) and must not steer these connections.
sql() {
  local port="$1"
  shift
  mariadb --no-defaults --protocol=TCP -h"$HOST" -P"$port" -uroot --connect-timeout=2 "$@"
}
sql_value() {
  sql "$1" -N -B -e "$2" 2>/dev/null
}
# A SHOW GLOBAL STATUS value, empty when the server does not answer.
status_var() {
  sql_value "$1" "SHOW GLOBAL STATUS LIKE '$2'" | awk -F'\t' '{ print $2 }' || true
}
# One field of SHOW SLAVE STATUS, empty when not answered or not configured.
slave_field() {
  sql "$1" -e 'SHOW SLAVE STATUS\G' 2>/dev/null |
    awk -v field="$2" '{ sub(/^ +/, "") } index($0, field ": ") == 1 { sub(/^[^:]*: ?/, ""); print; exit }' || true
}
answers() {
  sql_value "$1" 'SELECT 1' >/dev/null
}

# ---- option files -------------------------------------------------------------------

# What every instance shares: its own files, loopback only, the small memory settings,
# and the character set of the shared server on 3306 so tests see the same defaults.
write_common_cnf() {
  local name="$1" dir
  dir="$(inst_dir "$name")"
  cat <<EOF
# Written by tools/cluster.sh; rewritten on every fresh start.
[mysqld]
datadir = $(inst_data "$name")
socket = $dir/mariadbd.sock
pid-file = $dir/mariadbd.pid
log-error = $(inst_log "$name")
# Private: parallel bootstraps sharing /tmp lost each other's temporary tables.
tmpdir = $dir/tmp
port = $(inst_port "$name")
bind-address = $HOST
# 127.0.0.1 then matches root@127.0.0.1 exactly, never root@localhost.
skip-name-resolve
character-set-server = utf8mb4
collation-server = utf8mb4_general_ci
default_storage_engine = InnoDB
max_connections = $MAX_CONNECTIONS
performance_schema = OFF
innodb_buffer_pool_size = $INNODB_BUFFER_POOL
innodb_log_file_size = $INNODB_REDO_LOG
key_buffer_size = 8M
aria_pagecache_buffer_size = 16M
EOF
}

write_galera_cnf() {
  local n="$1" name="galera$1" peers="" p
  for p in "${GALERA_NODES[@]}"; do
    peers="${peers:+$peers,}$HOST:$((GALERA_GCOMM_PORT_BASE + p))"
  done
  {
    write_common_cnf "$name"
    cat <<EOF
# Galera requirements
binlog_format = ROW
innodb_autoinc_lock_mode = 2
# Binlog on every node (not only galera1): MariaDB's wsrep GTID mode needs log_bin and
# log_slave_updates everywhere so write sets get the same GTID on all nodes, and an SST
# then hands galera1 a donor binlog the replica can continue from.
log_bin = binlog
log_slave_updates = ON
server_id = $GALERA_SERVER_ID
gtid_domain_id = $n
wsrep_gtid_mode = ON
wsrep_gtid_domain_id = $GALERA_WSREP_GTID_DOMAIN_ID
wsrep_on = ON
wsrep_provider = $GALERA_PROVIDER
wsrep_cluster_name = $CLUSTER_NAME
wsrep_cluster_address = gcomm://$peers
wsrep_node_name = $name
wsrep_node_address = $HOST:$((GALERA_GCOMM_PORT_BASE + n))
wsrep_node_incoming_address = $HOST:$(inst_port "$name")
wsrep_sst_method = rsync
wsrep_sst_receive_address = $HOST:$((GALERA_SST_PORT_BASE + n))
wsrep_provider_options = "gmcast.listen_addr=tcp://$HOST:$((GALERA_GCOMM_PORT_BASE + n));ist.recv_addr=$HOST:$((GALERA_IST_PORT_BASE + n));gcache.size=$GCACHE_SIZE"

[sst]
# Send every donor binlog with an SST, not only the newest (the default is 1): the
# replica may still need older ones of galera1 after galera1 rejoined by SST.
sst-max-binlogs = -1
EOF
  } >"$(inst_cnf "$name")"
}

write_replica_cnf() {
  {
    write_common_cnf replica
    cat <<EOF
# Plain async replica of galera1: no wsrep, no binlog of its own.
server_id = $REPLICA_SERVER_ID
gtid_domain_id = $REPLICA_GTID_DOMAIN_ID
relay_log = relay-bin
read_only = ON
EOF
  } >"$(inst_cnf replica)"
}

write_standalone_cnf() {
  local n="$1"
  {
    write_common_cnf "standalone$n"
    echo "server_id = $((STANDALONE_SERVER_ID_BASE + n))"
    echo "skip-log-bin"
  } >"$(inst_cnf "standalone$n")"
}

# ---- lifecycle ----------------------------------------------------------------------

# Fresh instance dir: only this instance's own subdirectory is removed.
reset_inst_dir() {
  local dir
  dir="$(inst_dir "$1")"
  rm -rf -- "$dir"
  install -d -o mysql -g mysql -m 0750 "$dir" "$dir/tmp"
}

# mariadb-install-db without the machine's option files, with the same InnoDB sizes
# as the server (no redo log resize at first start); root gets an empty password on
# localhost, 127.0.0.1 and ::1 with ALL PRIVILEGES WITH GRANT OPTION ("normal").
init_datadir() {
  local name="$1" dir
  dir="$(inst_dir "$name")"
  timeout "$INSTALL_DB_TIMEOUT_S" mariadb-install-db --no-defaults --user=mysql \
    --datadir="$(inst_data "$name")" --auth-root-authentication-method=normal \
    --skip-test-db --skip-name-resolve --tmpdir="$dir/tmp" \
    --innodb-buffer-pool-size="$INNODB_BUFFER_POOL" --innodb-log-file-size="$INNODB_REDO_LOG" \
    >"$dir/install-db.log" 2>&1
}

# Several datadirs at once: mariadb-install-db is mostly single-threaded waiting.
init_datadirs() {
  local name pids=() names=() i failed=""
  for name in "$@"; do
    init_datadir "$name" 9>&- &
    pids+=("$!")
    names+=("$name")
  done
  for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
      failed="$failed ${names[$i]}"
      tail -n "$LOG_TAIL_LINES" "$(inst_dir "${names[$i]}")/install-db.log" >&2 || true
    fi
  done
  [ -z "$failed" ] || die "mariadb-install-db failed (or took over ${INSTALL_DB_TIMEOUT_S} s) for:$failed"
}

# Starts mariadbd in the background in its own session (so a signal to this script's
# process group never reaches it), without our lock descriptor, and records its pid.
launch() {
  local name="$1"
  shift
  local dir
  dir="$(inst_dir "$name")"
  setsid "$MARIADBD" --defaults-file="$(inst_cnf "$name")" --user=mysql "$@" \
    </dev/null >>"$dir/stdout.log" 2>&1 9>&- &
  echo "$!" >"$(inst_pid_file "$name")"
}

# Bounded wait until the server answers SQL as root over TCP.
wait_answers() {
  local name="$1" port waited_s=0
  port="$(inst_port "$name")"
  until answers "$port"; do
    inst_running "$name" || die_with_log "$name" "mariadbd exited during start-up"
    [ "$waited_s" -lt "$SERVER_START_TIMEOUT_S" ] ||
      die_with_log "$name" "did not answer on $HOST:$port within ${SERVER_START_TIMEOUT_S} s"
    sleep 1
    waited_s=$((waited_s + 1))
  done
}

running_galera_count() {
  local name count=0
  for name in $(galera_instances); do
    if inst_running "$name"; then count=$((count + 1)); fi
  done
  echo "$count"
}

# Synced, ready, in the Primary component, and seeing `size` members.
galera_synced() {
  local port="$1" size="$2"
  [ "$(status_var "$port" wsrep_local_state_comment)" = Synced ] &&
    [ "$(status_var "$port" wsrep_ready)" = ON ] &&
    [ "$(status_var "$port" wsrep_cluster_status)" = Primary ] &&
    [ "$(status_var "$port" wsrep_cluster_size)" = "$size" ]
}

wait_synced() {
  local name="$1" size="$2" timeout_s="$3" port waited_s=0
  port="$(inst_port "$name")"
  until galera_synced "$port" "$size"; do
    inst_running "$name" || die_with_log "$name" "mariadbd exited while joining the cluster"
    if [ "$waited_s" -ge "$timeout_s" ]; then
      die_with_log "$name" "not Synced with cluster size $size within ${timeout_s} s" \
        "(state: $(status_var "$port" wsrep_local_state_comment)," \
        "size: $(status_var "$port" wsrep_cluster_size))"
    fi
    sleep 1
    waited_s=$((waited_s + 1))
  done
}

wait_gone() {
  local pid="$1" timeout_s="$2" waited_ds=0
  while pid_alive "$pid"; do
    [ "$waited_ds" -lt $((timeout_s * 10)) ] || return 1
    sleep 0.1
    waited_ds=$((waited_ds + 1))
  done
}

# An rsync daemon a joiner started for an SST outlives a SIGKILLed server and keeps its
# port; the SST script records its pid in the datadir.
stop_orphan_rsync() {
  local pid_file pid
  pid_file="$(inst_data "$1")/rsync_sst.pid"
  [ -f "$pid_file" ] || return 0
  pid="$(cat "$pid_file" 2>/dev/null)" || return 0
  [[ "$pid" =~ ^[0-9]+$ ]] || return 0
  if pid_alive "$pid" && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = rsync ]; then
    say "$1: stopping the orphaned SST rsync daemon (pid $pid)"
    kill -KILL "$pid" 2>/dev/null || true
  fi
}

# SIGTERM to every named instance that runs, then a bounded wait for each; SIGKILL for
# whichever outlives it.
stop_instances() {
  local name pid names=() pids=()
  for name in "$@"; do
    if pid="$(inst_pid "$name")"; then
      say "stopping $name (pid $pid)"
      kill -TERM "$pid" 2>/dev/null || true
      names+=("$name")
      pids+=("$pid")
    fi
  done
  local i
  for i in "${!pids[@]}"; do
    if ! wait_gone "${pids[$i]}" "$STOP_TIMEOUT_S"; then
      say "${names[$i]} still runs ${STOP_TIMEOUT_S} s after SIGTERM: SIGKILL"
      kill -KILL "${pids[$i]}" 2>/dev/null || true
      wait_gone "${pids[$i]}" "$KILL_TIMEOUT_S" ||
        die_with_log "${names[$i]}" "pid ${pids[$i]} still runs ${KILL_TIMEOUT_S} s after SIGKILL"
    fi
  done
  for name in "$@"; do stop_orphan_rsync "$name"; done
}

wipe_datadirs() {
  local name
  for name in "$@"; do rm -rf -- "$(inst_data "$name")"; done
}

# Ports a fresh start needs; another process on one of them would make a node fail
# half-way, so say which one now.
check_ports_free() {
  local port busy
  for port in "$@"; do
    busy="$(ss -Htlnp "sport = :$port" 2>/dev/null || true)"
    [ -z "$busy" ] || die "port $port is in use: $busy"
  done
}

galera_ports() {
  local n
  for n in "${GALERA_NODES[@]}"; do
    echo $((GALERA_SQL_PORT_BASE + n)) $((GALERA_GCOMM_PORT_BASE + n)) \
      $((GALERA_IST_PORT_BASE + n)) $((GALERA_SST_PORT_BASE + n))
  done
}
