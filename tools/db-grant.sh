#!/usr/bin/env bash
# Least privilege at the database (issue 14 item 3): one OWNER that runs migrations,
# one SERVICE user that `factledger serve` runs as. The service may append events and
# read them — never UPDATE, DELETE, TRUNCATE or DROP them, nor touch triggers:
#
#   events, chain_anchors   SELECT, INSERT
#   event_sequence          SELECT, UPDATE            (the appender's position lock)
#   _sqlx_migrations        SELECT                    (serve checks nothing is pending)
#   wallet projection sets  DML + CREATE/DROP/ALTER/INDEX on the fixed names a full
#                           rebuild uses (<table>, <table>__rebuild, <table>__old)
#   every other table       SELECT, INSERT, UPDATE, DELETE
#
# Grants are per table, so run this again after a migration adds a table (it is
# idempotent). Usage, as a MariaDB account that may grant (root):
#
#   tools/db-grant.sh DATABASE SERVICE_USER SERVICE_PASSWORD [OWNER_USER OWNER_PASSWORD]
#
# Connection: MYSQL_HOST (127.0.0.1), MYSQL_PORT (3306), MYSQL_USER (root) and
# MYSQL_PWD (empty) for the granting account; USER_HOST ('%') for the new accounts.
# Then: `factledger migrate --database-url mysql://OWNER:…@host/DATABASE` and
#       `factledger serve --database-url mysql://SERVICE_USER:…@host/DATABASE`.
set -euo pipefail

[ "$#" -eq 3 ] || [ "$#" -eq 5 ] || {
  sed -n '2,22p' "$0" >&2
  exit 2
}
db="$1" service="$2" service_pw="$3" owner="${4:-}" owner_pw="${5:-}"
host="${USER_HOST:-%}"
for name in "$db" "$service" "$owner"; do
  [[ -z "$name" || "$name" =~ ^[A-Za-z0-9_]+$ ]] || {
    echo "db-grant: names must be [A-Za-z0-9_]+, got '$name'" >&2
    exit 2
  }
done

sql() {
  mariadb -h"${MYSQL_HOST:-127.0.0.1}" -P"${MYSQL_PORT:-3306}" -u"${MYSQL_USER:-root}" \
    -N -B "$@"
}
# A password as a SQL string literal.
quote() {
  local s="${1//\\/\\\\}"
  printf "'%s'" "${s//\'/\\\'}"
}

readonly WALLET_SETS="wallet_balances wallet_ledger wallet_blocks wallet_generation"
readonly APPEND_ONLY="events chain_anchors"

{
  if [ -n "$owner" ]; then
    echo "CREATE USER IF NOT EXISTS '$owner'@'$host' IDENTIFIED BY $(quote "$owner_pw");"
    echo "GRANT ALL PRIVILEGES ON \`$db\`.* TO '$owner'@'$host';"
  fi
  echo "CREATE USER IF NOT EXISTS '$service'@'$host' IDENTIFIED BY $(quote "$service_pw");"
  for t in $APPEND_ONLY; do
    echo "GRANT SELECT, INSERT ON \`$db\`.\`$t\` TO '$service'@'$host';"
  done
  echo "GRANT SELECT, UPDATE ON \`$db\`.\`event_sequence\` TO '$service'@'$host';"
  echo "GRANT SELECT ON \`$db\`.\`_sqlx_migrations\` TO '$service'@'$host';"
  for t in $WALLET_SETS; do
    for name in "$t" "${t}__rebuild" "${t}__old"; do
      echo "GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX ON \`$db\`.\`$name\` TO '$service'@'$host';"
    done
  done
  # Every other table of the schema as it stands.
  skip=" $APPEND_ONLY event_sequence _sqlx_migrations $WALLET_SETS "
  while read -r t; do
    [[ "$t" == *__rebuild || "$t" == *__old || "$skip" == *" $t "* ]] && continue
    echo "GRANT SELECT, INSERT, UPDATE, DELETE ON \`$db\`.\`$t\` TO '$service'@'$host';"
  done < <(sql -e "SELECT table_name FROM information_schema.tables WHERE table_schema = '$db' ORDER BY table_name")
  echo "FLUSH PRIVILEGES;"
} | sql
echo "db-grant: '$service'@'$host' may append and read events in $db, never change them"
