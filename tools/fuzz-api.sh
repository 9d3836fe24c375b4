#!/usr/bin/env bash
# API fuzzing against the contract (issue 14 item 10): schemathesis generates requests
# from the service's own /openapi.json (valid and invalid ones) and checks every answer.
#
#   tools/fuzz-api.sh [PATH_TO_FACTLEDGER_BINARY]
#
# The binary defaults to ${CARGO_TARGET_DIR:-target}/debug/factledger (the dev-profile
# build `cargo test` leaves behind); this script builds nothing. It
#   1. creates, once, a Python venv outside the repository with a pinned schemathesis
#      (reused on later runs; python3-venv is installed with apt when missing),
#   2. starts `factledger serve` on a fresh SQLite file in a temporary directory on
#      127.0.0.1 with a port the kernel picks (settlement and periodic anchors off, so
#      nothing but the fuzzer writes), and reads the admin key it prints on first start,
#   3. runs schemathesis over every operation with that key, checking:
#        no_server_error             no 5xx, whatever the input, except the documented
#                                    503 PROJECTION_BEHIND for a `min_position` the
#                                    projection has not reached (tools/fuzz-api-hooks.py,
#                                    which says why; it replaces not_a_server_error)
#        status_code_conformance     every status is one the operation documents
#        content_type_conformance    the Content-Type is the documented one
#        response_schema_conformance every JSON body matches its documented schema
#      bounded (FUZZ_MAX_EXAMPLES per operation, FUZZ_TIME_S for the whole run) and
#      reproducible (a fixed seed, no example database carried between runs),
#   4. stops the server (also on error or Ctrl-C) and exits non-zero on any failure.
#
# Exit codes: 0 all checks passed; 1 a check failed or the server misbehaved;
# 75 (EX_TEMPFAIL) schemathesis could not be installed (PyPI unreachable): nothing was
# tested, and tools/test.sh reports the step as SKIPPED.
#
# No operation is excluded: every route of /openapi.json is fuzzed, the operator ones
# (rebuilds, reconciliations, job controls, anchors) included — the database is a
# throwaway file.
#
# Environment (all optional):
#   FUZZ_MAX_EXAMPLES   default 25: generated cases per operation and phase
#   FUZZ_SEED           default 14: the seed (same seed + same binary = same requests)
#   FUZZ_TIME_S         default 180: hard bound on schemathesis' run (seconds); the
#                       whole step, server start included, stays under 4 minutes
#   FUZZ_WORKERS        default 2: concurrent schemathesis workers (2 cores)
#   FUZZ_REPORT_DIR     where the JUnit report goes (default: the temporary directory,
#                       removed at the end; set it to keep the report)
#   XDG_CACHE_HOME      the venv lives in ${XDG_CACHE_HOME:-$HOME/.cache}/factledger
set -euo pipefail

# Paths given by the caller are relative to where they called from.
readonly CALLER_DIR="$PWD"
cd "$(dirname "$0")/.."

# Pinned: a newer schemathesis may add checks or change generation; upgrade on purpose.
readonly SCHEMATHESIS_VERSION=4.32.5
readonly VENV_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/factledger/schemathesis-venv"
readonly PIP_TIMEOUT_S=180
readonly SERVER_START_TIMEOUT_S=45
readonly FUZZ_MAX_EXAMPLES="${FUZZ_MAX_EXAMPLES:-25}"
readonly FUZZ_SEED="${FUZZ_SEED:-14}"
readonly FUZZ_TIME_S="${FUZZ_TIME_S:-180}"
readonly FUZZ_WORKERS="${FUZZ_WORKERS:-2}"
# Each request must answer well within this; a debug build on 2 busy cores is slow.
readonly FUZZ_REQUEST_TIMEOUT_S=20
readonly CHECKS=no_server_error,status_code_conformance,content_type_conformance,response_schema_conformance
readonly HOOKS_FILE="$PWD/tools/fuzz-api-hooks.py"
readonly EX_TEMPFAIL=75

# The default is relative to the repository root, where cargo puts `target/`.
binary="${1:-${CARGO_TARGET_DIR:-target}/debug/factledger}"
if [ -n "${1:-}" ] && [[ "$binary" != /* ]]; then
  binary="$CALLER_DIR/$binary"
fi

die() {
  echo "tools/fuzz-api.sh: $*" >&2
  exit 1
}

for n in "$FUZZ_MAX_EXAMPLES" "$FUZZ_SEED" "$FUZZ_TIME_S" "$FUZZ_WORKERS"; do
  [[ "$n" =~ ^[0-9]+$ ]] || die "FUZZ_* settings must be whole numbers (got '$n')"
done
[ -x "$binary" ] || die "no factledger binary at $binary (build it first: cargo build, or cargo test)"
binary="$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")"

# python3 -m venv needs ensurepip, which Debian ships in python3-venv.
ensure_python_venv() {
  if command -v python3 >/dev/null 2>&1 && python3 -c 'import ensurepip, venv' 2>/dev/null; then
    return 0
  fi
  [ "$(id -u)" -eq 0 ] || die "python3 with the venv module is missing (apt-get install python3-venv, as root)"
  echo "installing python3-venv"
  apt-get update
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv
}

# Created once and reused; reinstalled when the pinned version changed.
ensure_schemathesis() {
  if [ -x "$VENV_DIR/bin/st" ] &&
    [ "$("$VENV_DIR/bin/st" --version 2>/dev/null)" = "st, version $SCHEMATHESIS_VERSION" ]; then
    return 0
  fi
  ensure_python_venv
  echo "creating $VENV_DIR with schemathesis $SCHEMATHESIS_VERSION (once)"
  mkdir -p "$(dirname "$VENV_DIR")"
  python3 -m venv "$VENV_DIR"
  if ! timeout "$PIP_TIMEOUT_S" "$VENV_DIR/bin/pip" install --quiet --disable-pip-version-check \
    --timeout 30 --retries 2 \
    "schemathesis==$SCHEMATHESIS_VERSION"; then
    echo "tools/fuzz-api.sh: pip could not install schemathesis $SCHEMATHESIS_VERSION" \
      "(is PyPI reachable?)" >&2
    exit "$EX_TEMPFAIL"
  fi
}

ensure_schemathesis
"$VENV_DIR/bin/st" --version

work_dir="$(mktemp -d "${TMPDIR:-/tmp}/factledger-fuzz.XXXXXX")"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work_dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

server_log="$work_dir/serve.log"
# Port 0: the kernel picks a free port and `serve` prints the address it bound, so
# there is no window in which another process could take a port chosen here.
# Run from the temporary directory: the admin key file, the integrity keys and the
# anchor file all default to the working directory.
(
  cd "$work_dir"
  exec "$binary" serve \
    --database-url "sqlite://$work_dir/fuzz.db" \
    --listen 127.0.0.1:0 \
    --settlement-every off \
    --anchor-every-s 0
) >"$server_log" 2>&1 &
server_pid=$!

base_url=""
waited_s=0
until base_url="$(sed -n 's|^factledger listening on \(http://[0-9.:]*\)$|\1|p' "$server_log")" &&
  [ -n "$base_url" ]; do
  if ! kill -0 "$server_pid" 2>/dev/null; then
    cat "$server_log" >&2
    die "factledger serve exited before listening"
  fi
  if [ "$waited_s" -ge "$SERVER_START_TIMEOUT_S" ]; then
    cat "$server_log" >&2
    die "factledger serve did not listen within $SERVER_START_TIMEOUT_S s"
  fi
  sleep 1
  waited_s=$((waited_s + 1))
done
# The key is the line after "First start: created admin API key …".
admin_key="$(sed -n '/^First start: created admin API key/{n;p;q}' "$server_log")"
[ -n "$admin_key" ] || die "serve printed no admin key on first start (log: $(cat "$server_log"))"
echo "factledger serve (pid $server_pid) on $base_url, fresh SQLite database in $work_dir"

report_dir="${FUZZ_REPORT_DIR:-$work_dir/report}"
[[ "$report_dir" == /* ]] || report_dir="$CALLER_DIR/$report_dir"
echo "schemathesis: checks $CHECKS; $FUZZ_MAX_EXAMPLES examples per operation, seed $FUZZ_SEED," \
  "at most $FUZZ_TIME_S s"
started_s=$SECONDS
st_rc=0
# `timeout` is the hard bound; --max-time would make schemathesis spend the whole
# budget (it repeats fuzzing until the time is up) instead of stopping when done.
# From the temporary directory: schemathesis keeps a `.schemathesis/` cache in its
# working directory, which must not land in the repository.
(
  cd "$work_dir"
  SCHEMATHESIS_HOOKS="$HOOKS_FILE" \
    exec timeout --kill-after=10 "$FUZZ_TIME_S" "$VENV_DIR/bin/st" run "$base_url/openapi.json" \
    --header "Authorization: Bearer $admin_key" \
    --checks "$CHECKS" \
    --max-examples "$FUZZ_MAX_EXAMPLES" \
    --seed "$FUZZ_SEED" \
    --generation-database none \
    --workers "$FUZZ_WORKERS" \
    --request-timeout "$FUZZ_REQUEST_TIMEOUT_S" \
    --no-color \
    --report junit --report-dir "$report_dir"
) || st_rc=$?
echo "schemathesis finished in $((SECONDS - started_s)) s (exit $st_rc)"

if ! kill -0 "$server_pid" 2>/dev/null; then
  tail -n 50 "$server_log" >&2
  die "factledger serve died during the fuzz run"
fi
if [ "$st_rc" -eq 124 ] || [ "$st_rc" -eq 137 ]; then
  die "schemathesis did not finish within $FUZZ_TIME_S s"
fi
if [ "$st_rc" -ne 0 ]; then
  # A 500's body holds only an error id; the error itself is in the server's log.
  echo "--- server log: warnings and errors ---" >&2
  grep -E 'WARN|ERROR' "$server_log" | tail -n 40 >&2 || true
  die "schemathesis found failures (exit $st_rc): see the reproductions above its summary"
fi
echo "API fuzzing: no failures"
