# Functions that start (and, as root, install) the loopback servers the tests
# use. Sourced by scripts/test.sh. Each one is idempotent.

SERVICES_DIR="${FENCEGATE_SERVICES_DIR:-/tmp/fencegate-services}"
mkdir -p "$SERVICES_DIR"

apt_install() {
  if [ "$(id -u)" != 0 ]; then
    echo "need $* but not root: install it first" >&2
    return 1
  fi
  if [ ! -f "$SERVICES_DIR/apt-updated" ]; then
    apt-get update -qq && touch "$SERVICES_DIR/apt-updated"
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

wait_for() { # wait_for SECONDS CMD...
  local n=$(( $1 * 5 )); shift
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}

ensure_postgres() {
  if ! command -v pg_ctlcluster >/dev/null; then
    apt_install postgresql
  fi
  if ! pg_isready -h 127.0.0.1 -p 5432 -q; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -1)" main start || true
  fi
  wait_for 30 pg_isready -h 127.0.0.1 -p 5432 -q || { echo "Postgres did not start" >&2; return 1; }
  # trust auth on loopback is how this machine kind is set up; make sure the test database exists.
  psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='test'" | grep -q 1 \
    || psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE test" >/dev/null
}

ensure_redis() {
  if ! command -v redis-server >/dev/null; then
    apt_install redis-server
  fi
  if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/ci.log
  fi
  wait_for 15 redis-cli -h 127.0.0.1 -p 6379 ping || { echo "Redis did not start" >&2; return 1; }
}

ensure_s3() { :; }
ensure_etcd() { :; }
