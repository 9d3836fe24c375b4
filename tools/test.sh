#!/usr/bin/env bash
# factledger's full check, the same on a developer machine and on CI:
#   0. make sure a Rust toolchain with rustfmt and clippy is there (rustup when not),
#   1. make sure MariaDB answers on 127.0.0.1:3306 with root and an empty password
#      (installs and starts it WITHOUT systemd on a fresh Debian 12, as root),
#   1b. make sure a NATS server with JetStream answers on 127.0.0.1:4222 (installs the
#      Debian package nats-server when missing and starts `nats-server -js` in the
#      background, store under /tmp; the outbox relay tests publish to it),
#   1c. give that MariaDB a self-signed TLS certificate (tools/mariadb-tls.sh: CA and
#      server cert under /etc/mysql/factledger-tls, restarting the server once if it
#      ran without TLS) and export FACTLEDGER_TEST_MYSQL_TLS_CA for tests/tls.rs,
#   1d. make sure chromium and chromedriver are there for the console's browser tests
#      (installs the Debian packages chromium and chromium-driver when `chromedriver`
#      is missing) and export FACTLEDGER_CHROMEDRIVER and FACTLEDGER_CONSOLE_SHOTS
#      (screenshots of every console page visited, under
#      ${CARGO_TARGET_DIR:-target}/console-shots/<backend>/, not committed),
#   1e. start the multi-node topologies of tests/scale.rs with tools/cluster.sh (a
#      3-node MariaDB Galera cluster on 3311-3313 and an async replica on 3314;
#      installs the Debian packages galera-4 and rsync when missing), export their
#      URLs (`tools/cluster.sh env`), and stop them again when this script exits,
#   2. drop stale `fl_test_*` databases left by earlier, interrupted runs,
#   3. the layer rule of src/ (tools/check-layers.sh, with its self-test),
#      cargo fmt --check, cargo clippy -D warnings, cargo deny (supply chain: bans,
#      licenses, sources always; advisories when the RustSec database can be
#      fetched, else skipped with a message; cargo-deny is installed when missing),
#      cargo test (dev profile, so dependencies are built once for it; no release
#      build),
#   4. API fuzzing: tools/fuzz-api.sh runs schemathesis over /openapi.json against the
#      debug binary cargo test built (a Python venv under ~/.cache/factledger, created
#      once; when PyPI cannot be reached the step is SKIPPED with a message, but a fuzz
#      failure fails the check).
# Tests run against SQLite and MariaDB inside the same test binaries.
#
# Environment (all optional):
#   CARGO_TARGET_DIR          honoured as is (never overridden here)
#   RUST_TEST_THREADS         default 4: keeps MariaDB load sane on 2 cores
#   FL_TEST_DB_STALE_MIN      default 10: `fl_test_*` databases with no table created
#                             in this many minutes are leftovers and get dropped
#                             (younger ones may belong to a concurrent run)
#   FUZZ_MAX_EXAMPLES, FUZZ_SEED, FUZZ_TIME_S, FUZZ_WORKERS
#                             the fuzzing bounds (see tools/fuzz-api.sh)
#   FL_TLS_QUIET_WAIT_S       default 120: how long tools/mariadb-tls.sh waits for other
#                             clients to finish before it restarts a MariaDB that
#                             runs without TLS (once; later runs only check)
set -euo pipefail

cd "$(dirname "$0")/.."

readonly MYSQL_HOST=127.0.0.1
readonly MYSQL_PORT=3306
readonly MYSQL_SOCK=/run/mysqld/mysqld.sock
readonly MYSQL_LOG=/var/log/mysql/error.log
readonly MARIADB_START_TIMEOUT_S=60
readonly FL_TEST_DB_STALE_MIN="${FL_TEST_DB_STALE_MIN:-10}"
readonly MYSQL_TLS_DIR=/etc/mysql/factledger-tls
readonly NATS_HOST=127.0.0.1
readonly NATS_PORT=4222
readonly NATS_STORE_DIR=/tmp/factledger-nats
readonly NATS_LOG=/tmp/factledger-nats.log
readonly NATS_START_TIMEOUT_S=30
# Builds with rustc >= 1.88; pinned so every machine checks with the same rules.
readonly CARGO_DENY_VERSION=0.20.2
# The advisory database is a git repository on GitHub; where it cannot be reached
# (offline CI, a sandbox) the advisories check is skipped rather than left hanging.
readonly ADVISORY_DB_FETCH_TIMEOUT_S=60
# tools/fuzz-api.sh's exit code when schemathesis could not be installed (EX_TEMPFAIL).
readonly FUZZ_SKIPPED_RC=75

export FACTLEDGER_TEST_MYSQL_URL="mysql://root@${MYSQL_HOST}:${MYSQL_PORT}"
export FACTLEDGER_TEST_NATS_URL="nats://${NATS_HOST}:${NATS_PORT}"
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-4}"

current_section="setup"
section() {
  current_section="$1"
  printf '\n==== %s ====\n' "$1"
}
die() {
  echo "tools/test.sh: $*" >&2
  exit 1
}
cluster_started=0
on_exit() {
  local rc=$?
  if [ "$cluster_started" -eq 1 ]; then
    tools/cluster.sh stop >/dev/null 2>&1 || echo "tools/cluster.sh stop failed" >&2
  fi
  if [ "$rc" -eq 0 ]; then
    printf '\n==== ALL CHECKS PASSED ====\n'
  else
    printf '\n==== FAILED in: %s (exit %s) ====\n' "$current_section" "$rc" >&2
  fi
}
trap on_exit EXIT

# `mariadb-admin ping` succeeds whenever the server is up, even if access is denied,
# so it only tells us whether to start the server; sql_tcp checks that we may log in.
server_answers() {
  mariadb-admin -h"$MYSQL_HOST" -P"$MYSQL_PORT" -uroot ping >/dev/null 2>&1
}
sql_tcp() {
  mariadb -h"$MYSQL_HOST" -P"$MYSQL_PORT" -uroot "$@"
}
root_over_tcp_works() {
  sql_tcp -e 'SELECT 1' >/dev/null 2>&1
}
require_root() {
  [ "$(id -u)" -eq 0 ] || die "$1 needs root (run as root, or fix MariaDB by hand)"
}

apt_updated=0
apt_install() {
  require_root "installing $*"
  if [ "$apt_updated" -eq 0 ]; then
    apt-get update
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"
}
is_installed() {
  [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]
}

# A fresh machine has no Rust: install a C compiler (bundled SQLite is built from C)
# and rustup's stable toolchain with rustfmt and clippy.
ensure_rust() {
  if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
    # shellcheck source=/dev/null
    . "$HOME/.cargo/env"
  fi
  if ! command -v cc >/dev/null 2>&1; then
    apt_install build-essential
  fi
  if ! command -v cargo >/dev/null 2>&1; then
    command -v curl >/dev/null 2>&1 || apt_install curl ca-certificates
    echo "installing the Rust toolchain with rustup"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
      sh -s -- -y --profile minimal --component rustfmt,clippy
    # shellcheck source=/dev/null
    . "$HOME/.cargo/env"
  fi
  cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt
  cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
  cargo --version
}

# Install (only when missing), initialise and start MariaDB without systemd.
start_mariadb() {
  require_root "installing/starting MariaDB"
  if ! is_installed mariadb-server; then
    echo "installing mariadb-server"
    apt_install mariadb-server
    # The package may have started a server through invoke-rc.d; if so, reuse it.
    if server_answers; then
      return 0
    fi
  fi
  if [ ! -d /var/lib/mysql/mysql ]; then
    echo "initialising /var/lib/mysql"
    mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
  fi
  install -d -o mysql -g mysql -m 0755 /run/mysqld
  install -d -o mysql -g adm -m 2750 /var/log/mysql
  echo "starting mariadbd (no systemd)"
  # --pidfile: the mariadbd processes of tools/cluster.sh must not count as this one.
  start-stop-daemon --start --oknodo --background --pidfile /run/mysqld/mysqld.pid \
    --exec /usr/sbin/mariadbd -- --user=mysql --log-error="$MYSQL_LOG"
  local waited_s=0
  until server_answers; do
    if [ "$waited_s" -ge "$MARIADB_START_TIMEOUT_S" ]; then
      tail -n 30 "$MYSQL_LOG" >&2 2>/dev/null || true
      die "MariaDB did not answer on ${MYSQL_HOST}:${MYSQL_PORT} within ${MARIADB_START_TIMEOUT_S} s (log: $MYSQL_LOG)"
    fi
    sleep 1
    waited_s=$((waited_s + 1))
  done
}

# root over TCP with an empty password. root@localhost keeps unix_socket too, so
# `mariadb` as OS root still works; it gets the empty password as well because a TCP
# connection from 127.0.0.1 may be matched to root@localhost when names are resolved.
grant_root_over_tcp() {
  require_root "granting root@${MYSQL_HOST} access"
  echo "granting root@${MYSQL_HOST} an empty password over TCP"
  mariadb --socket="$MYSQL_SOCK" -uroot <<'SQL'
ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket;
CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
FLUSH PRIVILEGES;
SQL
}

ensure_mariadb() {
  if server_answers; then
    echo "MariaDB answers on ${MYSQL_HOST}:${MYSQL_PORT}"
  else
    start_mariadb
  fi
  if ! root_over_tcp_works; then
    grant_root_over_tcp
    root_over_tcp_works || die "root@${MYSQL_HOST} still cannot log in over TCP"
  fi
  sql_tcp -N -B -e 'SELECT CONCAT("server ", VERSION())'
}

# Tests drop their own databases; leftovers come from killed runs. A database with a
# table created in the last FL_TEST_DB_STALE_MIN minutes may belong to a run going on
# right now (another terminal, another engineer) and is left alone.
drop_stale_test_databases() {
  [[ "$FL_TEST_DB_STALE_MIN" =~ ^[0-9]+$ ]] || die "FL_TEST_DB_STALE_MIN must be a whole number"
  local stale db dropped=0
  stale="$(sql_tcp -N -B <<SQL
SELECT s.schema_name
FROM information_schema.schemata s
LEFT JOIN information_schema.tables t ON t.table_schema = s.schema_name
WHERE s.schema_name LIKE 'fl\\_test\\_%'
GROUP BY s.schema_name
HAVING MAX(t.create_time) IS NULL
    OR MAX(t.create_time) < NOW() - INTERVAL ${FL_TEST_DB_STALE_MIN} MINUTE;
SQL
)"
  for db in $stale; do
    # Names come from the server and match fl\_test\_%; refuse anything odd anyway.
    [[ "$db" =~ ^fl_test_[A-Za-z0-9_]+$ ]] || die "unexpected database name: $db"
    sql_tcp -e "DROP DATABASE IF EXISTS \`$db\`"
    dropped=$((dropped + 1))
  done
  echo "dropped $dropped stale fl_test_* database(s)"
  sql_tcp -e 'CREATE DATABASE IF NOT EXISTS factledger_test'
  echo "database factledger_test ready"
}

# A NATS server greets every new connection with an INFO line; bash's /dev/tcp reads
# it without needing any client installed. A subshell, so the descriptor and the
# silenced stderr of `exec` stay in it.
nats_answers() (
  greeting=""
  exec 3<>"/dev/tcp/${NATS_HOST}/${NATS_PORT}" || exit 1
  read -r -t 2 greeting <&3 || true
  [[ "$greeting" == INFO* ]]
) 2>/dev/null

# Install (only when missing) and start nats-server with JetStream, without systemd.
ensure_nats() {
  if nats_answers; then
    echo "NATS answers on ${NATS_HOST}:${NATS_PORT}"
    return 0
  fi
  if ! command -v nats-server >/dev/null 2>&1; then
    echo "installing nats-server"
    apt_install nats-server
    # The package may have started a server through invoke-rc.d; if so, reuse it.
    if nats_answers; then
      return 0
    fi
  fi
  mkdir -p "$NATS_STORE_DIR"
  echo "starting nats-server -js (no systemd; store $NATS_STORE_DIR, log $NATS_LOG)"
  nohup nats-server -js -a "$NATS_HOST" -p "$NATS_PORT" -sd "$NATS_STORE_DIR" \
    >"$NATS_LOG" 2>&1 </dev/null &
  local waited_s=0
  until nats_answers; do
    if [ "$waited_s" -ge "$NATS_START_TIMEOUT_S" ]; then
      tail -n 30 "$NATS_LOG" >&2 2>/dev/null || true
      die "NATS did not answer on ${NATS_HOST}:${NATS_PORT} within ${NATS_START_TIMEOUT_S} s (log: $NATS_LOG)"
    fi
    sleep 1
    waited_s=$((waited_s + 1))
  done
}

# The console's browser tests (tests/suite/console_browser.rs) drive headless
# chromium through chromedriver; Debian packages both.
ensure_chromedriver() {
  if ! command -v chromedriver >/dev/null 2>&1; then
    echo "installing chromium and chromium-driver"
    apt_install chromium chromium-driver
  fi
  command -v chromedriver >/dev/null 2>&1 || die "chromedriver still missing after installing chromium-driver"
  chromedriver --version
}

# tests/scale.rs (issue 21): Galera needs its provider library and rsync (the state
# transfers), which a --no-install-recommends mariadb-server does not bring along.
ensure_cluster() {
  if [ ! -f /usr/lib/galera/libgalera_smm.so ]; then
    echo "installing galera-4"
    apt_install galera-4
  fi
  command -v rsync >/dev/null 2>&1 || apt_install rsync
  cluster_started=1
  tools/cluster.sh start
  eval "$(tools/cluster.sh env)"
  tools/cluster.sh env
}

# Installed once, outside the project's target dir (cargo install would otherwise
# honour CARGO_TARGET_DIR and leave a release build of cargo-deny in it).
ensure_cargo_deny() {
  if cargo deny --version >/dev/null 2>&1; then
    return 0
  fi
  echo "installing cargo-deny $CARGO_DENY_VERSION (once; a few minutes to build)"
  env -u CARGO_TARGET_DIR cargo install --locked cargo-deny --version "$CARGO_DENY_VERSION"
}

# Fuzz the API of the debug binary `cargo test` just built. Only an uninstallable
# schemathesis (PyPI unreachable) is skipped; any failure it finds fails the check.
fuzz_api() {
  local rc=0
  tools/fuzz-api.sh "${CARGO_TARGET_DIR:-target}/debug/factledger" || rc=$?
  if [ "$rc" -eq "$FUZZ_SKIPPED_RC" ]; then
    echo "API fuzzing: SKIPPED - schemathesis could not be installed from PyPI" \
      "(https://pypi.org); run tools/fuzz-api.sh where PyPI is reachable"
  elif [ "$rc" -ne 0 ]; then
    die "API fuzzing failed (exit $rc)"
  fi
}

# Advisories only when the database can be fetched now: a stale local copy would
# pass silently, and an unreachable GitHub must not fail the whole check.
check_advisories() {
  if timeout "$ADVISORY_DB_FETCH_TIMEOUT_S" cargo deny fetch db; then
    cargo deny --offline check advisories
  else
    echo "cargo deny check advisories: SKIPPED - the RustSec advisory database" \
      "(https://github.com/rustsec/advisory-db) could not be fetched within" \
      "${ADVISORY_DB_FETCH_TIMEOUT_S} s; run it where GitHub is reachable"
  fi
}

section "Rust toolchain"
ensure_rust

section "MariaDB on ${MYSQL_HOST}:${MYSQL_PORT}"
ensure_mariadb
drop_stale_test_databases
echo "FACTLEDGER_TEST_MYSQL_URL=$FACTLEDGER_TEST_MYSQL_URL"

section "MariaDB TLS (self-signed test certificate)"
tools/mariadb-tls.sh "$MYSQL_TLS_DIR"
export FACTLEDGER_TEST_MYSQL_TLS_CA="$MYSQL_TLS_DIR/ca.pem"
echo "FACTLEDGER_TEST_MYSQL_TLS_CA=$FACTLEDGER_TEST_MYSQL_TLS_CA"

section "NATS JetStream on ${NATS_HOST}:${NATS_PORT}"
ensure_nats
echo "FACTLEDGER_TEST_NATS_URL=$FACTLEDGER_TEST_NATS_URL"
echo "RUST_TEST_THREADS=$RUST_TEST_THREADS"
echo "CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-<default: ./target>}"

section "chromium and chromedriver (console browser tests)"
ensure_chromedriver
FACTLEDGER_CHROMEDRIVER="$(command -v chromedriver)"
export FACTLEDGER_CHROMEDRIVER
mkdir -p "${CARGO_TARGET_DIR:-target}/console-shots"
# Absolute: the tests run with the package root as their working directory anyway.
FACTLEDGER_CONSOLE_SHOTS="$(cd "${CARGO_TARGET_DIR:-target}/console-shots" && pwd)"
export FACTLEDGER_CONSOLE_SHOTS
echo "FACTLEDGER_CHROMEDRIVER=$FACTLEDGER_CHROMEDRIVER"
echo "FACTLEDGER_CONSOLE_SHOTS=$FACTLEDGER_CONSOLE_SHOTS"

section "MariaDB Galera cluster and replica (tools/cluster.sh, for tests/scale.rs)"
ensure_cluster

section "layers (tools/check-layers.sh: infra <- runtime <- capability)"
tools/check-layers.sh --self-test
tools/check-layers.sh

section "cargo fmt --check"
cargo fmt --all -- --check

section "cargo clippy (dev profile, -D warnings)"
cargo clippy --workspace --all-targets -- -D warnings

section "cargo deny (bans, licenses, sources; advisories when reachable)"
ensure_cargo_deny
cargo deny --version
cargo deny check bans licenses sources
check_advisories

section "cargo test (dev profile; SQLite and MariaDB)"
cargo test --workspace

section "API fuzzing (schemathesis)"
fuzz_api
