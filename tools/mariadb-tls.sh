#!/usr/bin/env bash
# Give the local test MariaDB (127.0.0.1:3306) a self-signed TLS certificate, so that
# `ssl-mode=required` / `verify_ca` connections can be tested (issue 14, F10).
#
#   tools/mariadb-tls.sh [DIR]        DIR defaults to /etc/mysql/factledger-tls
#
# What it does, each step only when needed (running it twice changes nothing):
#   1. DIR/ca.pem (a throw-away CA; its key is deleted once it has signed) and
#      DIR/server-cert.pem + DIR/server-key.pem (EC P-256, SAN 127.0.0.1, ::1 and
#      localhost), valid CERT_DAYS; re-issued when missing, not matching, or expiring
#      within CERT_RENEW_DAYS. Keys are 0600 and owned by mysql.
#   2. /etc/mysql/conf.d/factledger-tls.cnf with ssl_cert/ssl_key/ssl_ca; when the
#      server's option files do not read /etc/mysql/conf.d/ (Debian's mariadb.cnf does;
#      a hand-written my.cnf may not), an `!includedir` line is appended to my.cnf.
#   3. A server already serving these files reloads them with `FLUSH SSL` (MariaDB
#      >= 10.4) when they were re-issued. A server started without TLS cannot turn it
#      on at run time (ssl_cert is read-only and FLUSH SSL only reloads), so it is
#      restarted: after waiting up to QUIET_WAIT_S for other client sessions to end,
#      it is shut down cleanly (systemd when it runs the service, else
#      `mariadb-admin shutdown`), started again with the arguments it had, and waited
#      for.
#   4. A TLS session with the CA verified is opened and its cipher printed.
#
# Needs root for steps 1-3; when everything is in place already it only checks.
set -euo pipefail

readonly TLS_DIR="${1:-/etc/mysql/factledger-tls}"
readonly CONF_DIR=/etc/mysql/conf.d
readonly CONF_FILE="$CONF_DIR/factledger-tls.cnf"
readonly MY_CNF=/etc/mysql/my.cnf
readonly MYSQL_HOST=127.0.0.1
readonly MYSQL_PORT=3306
readonly MYSQL_LOG=/var/log/mysql/error.log
readonly MYSQL_PID_FILE=/run/mysqld/mysqld.pid
readonly MARIADBD=/usr/sbin/mariadbd
# Ten years: a test CA on a test machine; renewal below covers long-lived machines.
readonly CERT_DAYS=3650
readonly CERT_RENEW_DAYS=30
# How long to wait for other clients (another engineer's test run) to finish before
# restarting a server that has no TLS yet; after that it is restarted anyway.
readonly QUIET_WAIT_S="${FL_TLS_QUIET_WAIT_S:-120}"
readonly SHUTDOWN_TIMEOUT_S=120
readonly START_TIMEOUT_S=60

readonly CA_CERT="$TLS_DIR/ca.pem"
readonly SERVER_CERT="$TLS_DIR/server-cert.pem"
readonly SERVER_KEY="$TLS_DIR/server-key.pem"

# The private work directory of issue_certs (holds the CA key until it is deleted).
work_dir=""
trap 'rm -rf "$work_dir"' EXIT

die() {
  echo "tools/mariadb-tls.sh: $*" >&2
  exit 1
}
require_root() {
  [ "$(id -u)" -eq 0 ] || die "$1 needs root (run as root, or configure TLS by hand: see README)"
}
sql() {
  mariadb -h"$MYSQL_HOST" -P"$MYSQL_PORT" -uroot -N -B "$@"
}
server_answers() {
  mariadb-admin -h"$MYSQL_HOST" -P"$MYSQL_PORT" -uroot ping >/dev/null 2>&1
}

certs_are_current() {
  [ -s "$CA_CERT" ] && [ -s "$SERVER_CERT" ] && [ -s "$SERVER_KEY" ] || return 1
  openssl verify -CAfile "$CA_CERT" "$SERVER_CERT" >/dev/null 2>&1 || return 1
  openssl x509 -checkend $((CERT_RENEW_DAYS * 86400)) -noout -in "$SERVER_CERT" >/dev/null || return 1
  openssl x509 -checkend $((CERT_RENEW_DAYS * 86400)) -noout -in "$CA_CERT" >/dev/null || return 1
  # The key must be the certificate's key.
  [ "$(openssl pkey -in "$SERVER_KEY" -pubout 2>/dev/null)" = \
    "$(openssl x509 -in "$SERVER_CERT" -noout -pubkey)" ]
}

# A CA (basicConstraints CA:TRUE, as webpki insists) and a v3 server certificate with
# subjectAltNames, signed by it, in a private work directory; then moved into place.
issue_certs() {
  require_root "issuing the MariaDB test certificate"
  command -v openssl >/dev/null 2>&1 || {
    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openssl
  }
  install -d -o mysql -g mysql -m 0755 "$TLS_DIR"
  local work
  work="$(mktemp -d)"
  work_dir="$work"
  local umask_before
  umask_before="$(umask)"
  umask 077
  cat >"$work/ca.cnf" <<'CNF'
[req]
distinguished_name = dn
x509_extensions = v3_ca
prompt = no
[dn]
CN = factledger test CA (tools/mariadb-tls.sh)
[v3_ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
CNF
  cat >"$work/server.ext" <<'EXT'
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, IP:::1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
EXT
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/ca-key.pem"
  openssl req -x509 -new -config "$work/ca.cnf" -key "$work/ca-key.pem" \
    -days "$CERT_DAYS" -sha256 -out "$work/ca.pem"
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/server-key.pem"
  openssl req -new -key "$work/server-key.pem" -subj "/CN=localhost" -out "$work/server.csr"
  openssl x509 -req -in "$work/server.csr" -CA "$work/ca.pem" -CAkey "$work/ca-key.pem" \
    -CAcreateserial -days "$CERT_DAYS" -sha256 -extfile "$work/server.ext" \
    -out "$work/server-cert.pem" 2>/dev/null
  umask "$umask_before"
  install -o mysql -g mysql -m 0644 "$work/ca.pem" "$CA_CERT"
  install -o mysql -g mysql -m 0644 "$work/server-cert.pem" "$SERVER_CERT"
  install -o mysql -g mysql -m 0600 "$work/server-key.pem" "$SERVER_KEY"
  rm -rf "$work"
  work_dir=""
  echo "issued a self-signed CA and server certificate in $TLS_DIR (CA key discarded)"
}

server_reads_conf_dir() {
  "$MARIADBD" --print-defaults 2>/dev/null | grep -q -- "--ssl[-_]cert=$SERVER_CERT"
}

write_conf() {
  local wanted
  wanted="$(printf '%s\n' \
    '# Written by factledger tools/mariadb-tls.sh: TLS with a self-signed test CA.' \
    '[mysqld]' \
    "ssl_cert = $SERVER_CERT" \
    "ssl_key = $SERVER_KEY" \
    "ssl_ca = $CA_CERT")"
  if [ "$(cat "$CONF_FILE" 2>/dev/null)" != "$wanted" ]; then
    require_root "writing $CONF_FILE"
    install -d -m 0755 "$CONF_DIR"
    printf '%s\n' "$wanted" >"$CONF_FILE"
    chmod 0644 "$CONF_FILE"
    echo "wrote $CONF_FILE"
  fi
  if ! server_reads_conf_dir; then
    require_root "adding !includedir $CONF_DIR/ to $MY_CNF"
    printf '\n# Added by factledger tools/mariadb-tls.sh (reads %s)\n!includedir %s/\n' \
      "$CONF_FILE" "$CONF_DIR" >>"$MY_CNF"
    echo "appended !includedir $CONF_DIR/ to $MY_CNF"
    server_reads_conf_dir || die "$MARIADBD --print-defaults still shows no ssl_cert=$SERVER_CERT"
  fi
}

server_serves_our_cert() {
  [ "$(sql -e 'SELECT CONCAT(@@have_ssl, " ", @@ssl_cert)')" = "YES $SERVER_CERT" ]
}

# Other client sessions (not ours, not the server's own threads).
other_sessions() {
  sql -e "SELECT COUNT(*) FROM information_schema.processlist
          WHERE id <> CONNECTION_ID() AND command NOT IN ('Daemon', 'Binlog Dump')
            AND user NOT IN ('system user', 'event_scheduler', 'unauthenticated user')"
}

wait_for_quiet() {
  local waited_s=0 n
  while n="$(other_sessions)" && [ "$n" -gt 0 ]; do
    if [ "$waited_s" -ge "$QUIET_WAIT_S" ]; then
      echo "warning: $n other client session(s) still open after ${QUIET_WAIT_S} s; restarting anyway" >&2
      return 0
    fi
    [ "$waited_s" -eq 0 ] && echo "waiting up to ${QUIET_WAIT_S} s for $n other client session(s) to end"
    sleep 2
    waited_s=$((waited_s + 2))
  done
}

wait_until() {
  local what="$1" timeout_s="$2" waited_s=0
  shift 2
  until "$@"; do
    if [ "$waited_s" -ge "$timeout_s" ]; then
      tail -n 30 "$MYSQL_LOG" >&2 2>/dev/null || true
      die "MariaDB did not $what within ${timeout_s} s (log: $MYSQL_LOG)"
    fi
    sleep 1
    waited_s=$((waited_s + 1))
  done
}
server_down() { ! server_answers && ! kill -0 "$1" 2>/dev/null; }

restart_server() {
  require_root "restarting MariaDB to load its certificate"
  wait_for_quiet
  if [ -d /run/systemd/system ] && systemctl is-active --quiet mariadb 2>/dev/null; then
    echo "restarting MariaDB through systemd"
    systemctl restart mariadb
  else
    local pid args=()
    pid="$(cat "$MYSQL_PID_FILE" 2>/dev/null)" || die "no $MYSQL_PID_FILE: cannot tell which mariadbd to restart"
    [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$MARIADBD" ] ||
      die "pid $pid (from $MYSQL_PID_FILE) is not $MARIADBD"
    # Start it again with exactly the arguments it has now.
    mapfile -d '' -t args <"/proc/$pid/cmdline"
    echo "restarting mariadbd (pid $pid): clean shutdown, then start with: ${args[*]}"
    mariadb-admin -h"$MYSQL_HOST" -P"$MYSQL_PORT" -uroot shutdown
    wait_until "stop" "$SHUTDOWN_TIMEOUT_S" server_down "$pid"
    # --pidfile: other mariadbd processes (tools/cluster.sh's) must not count as this one.
    start-stop-daemon --start --background --pidfile "$MYSQL_PID_FILE" --exec "$MARIADBD" -- "${args[@]:1}"
  fi
  wait_until "answer after the restart" "$START_TIMEOUT_S" server_answers
}

check_tls_session() {
  local cipher
  cipher="$(mariadb -h"$MYSQL_HOST" -P"$MYSQL_PORT" -uroot -N -B \
    --ssl --ssl-ca="$CA_CERT" --ssl-verify-server-cert \
    -e "SHOW SESSION STATUS LIKE 'Ssl_cipher'" | cut -f2)"
  [ -n "$cipher" ] || die "a TLS session to ${MYSQL_HOST}:${MYSQL_PORT} has no cipher"
  echo "MariaDB TLS ok: cipher $cipher, CA $CA_CERT"
}

main() {
  server_answers || die "MariaDB does not answer on ${MYSQL_HOST}:${MYSQL_PORT}; start it first (tools/test.sh does)"
  local issued=0
  if ! certs_are_current; then
    issue_certs
    issued=1
  fi
  write_conf
  if server_serves_our_cert; then
    if [ "$issued" -eq 1 ]; then
      sql -e 'FLUSH SSL'
      echo "reloaded the certificate with FLUSH SSL"
    fi
  else
    restart_server
    server_serves_our_cert || die "MariaDB restarted but does not serve $SERVER_CERT (have_ssl: $(sql -e 'SELECT @@have_ssl'))"
  fi
  check_tls_session
}

main
