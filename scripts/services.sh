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

# ensure_s3 runs versitygw (posix backend) on loopback as the test S3 server,
# creates the bucket fencegate-test and exports FENCEGATE_TEST_S3_*. It runs
# with --keep-alive, as S3 keeps HTTP connections open between requests
# (versitygw's default answers every request with Connection: close, so each
# PUT of the tests and of loadbench paid a TCP dial that real S3 does not).
ensure_s3() {
  local port=7070 ak=fencegate-ak sk=fencegate-sk bucket=fencegate-test
  local root="$SERVICES_DIR/versitygw" endpoint="http://127.0.0.1:7070"
  local bin
  local gobin
  gobin="$(go env GOBIN)"; gobin="${gobin:-$(go env GOPATH)/bin}"
  bin="$(command -v versitygw || echo "$gobin/versitygw")"
  if [ ! -x "$bin" ]; then
    go install github.com/versity/versitygw/cmd/versitygw@v1.8.0 || { echo "cannot install versitygw" >&2; return 1; }
  fi
  # The posix backend keeps metadata in user xattrs: use the first root that has them.
  local cand
  for cand in "$SERVICES_DIR/versitygw" "$HOME/.cache/fencegate-versitygw" /var/tmp/fencegate-versitygw; do
    mkdir -p "$cand" 2>/dev/null || continue
    if python3 -c "import os,sys; os.setxattr(sys.argv[1], 'user.fencegate', b'1')" "$cand" 2>/dev/null \
       || setfattr -n user.fencegate -v 1 "$cand" 2>/dev/null; then
      root="$cand"; break
    fi
  done
  mkdir -p "$root"
  if ! curl -s -o /dev/null "$endpoint/"; then
    nohup "$bin" --access "$ak" --secret "$sk" --port "127.0.0.1:$port" --keep-alive --quiet posix "$root" \
      >"$SERVICES_DIR/versitygw.log" 2>&1 &
  fi
  wait_for 30 curl -s -o /dev/null "$endpoint/" || { echo "versitygw did not start (see $SERVICES_DIR/versitygw.log)" >&2; return 1; }
  # Create the bucket with a signed CreateBucket (409 when it exists is fine).
  local code
  code="$(curl -s -o /dev/null -w '%{http_code}' -X PUT \
    --aws-sigv4 "aws:amz:us-east-1:s3" --user "$ak:$sk" \
    -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" \
    "$endpoint/$bucket")"
  case "$code" in
    200|409) ;;
    *) echo "versitygw: create bucket $bucket: HTTP $code" >&2; return 1 ;;
  esac
  export FENCEGATE_TEST_S3_ENDPOINT="$endpoint"
  export FENCEGATE_TEST_S3_BUCKET="$bucket"
  export FENCEGATE_TEST_S3_ACCESS_KEY="$ak"
  export FENCEGATE_TEST_S3_SECRET_KEY="$sk"
}
# ensure_etcd runs a single-member etcd (Debian's etcd-server) on loopback,
# client 127.0.0.1:2379, peer 127.0.0.1:2380, data under $SERVICES_DIR/etcd,
# and exports FENCEGATE_TEST_ETCD.
ensure_etcd() {
  local endpoint=127.0.0.1:2379
  if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
    apt_install etcd-server etcd-client || return 1
  fi
  if ! etcdctl --endpoints="$endpoint" --dial-timeout=1s endpoint health >/dev/null 2>&1; then
    mkdir -p "$SERVICES_DIR/etcd"
    nohup etcd --name fencegate-test --data-dir "$SERVICES_DIR/etcd/data" \
      --listen-client-urls "http://$endpoint" --advertise-client-urls "http://$endpoint" \
      --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
      --initial-cluster fencegate-test=http://127.0.0.1:2380 \
      >"$SERVICES_DIR/etcd.log" 2>&1 &
  fi
  wait_for 30 etcdctl --endpoints="$endpoint" --dial-timeout=1s endpoint health \
    || { echo "etcd did not start (see $SERVICES_DIR/etcd.log)" >&2; return 1; }
  export FENCEGATE_TEST_ETCD="$endpoint"
}

# ensure_spin installs the spin model checker (and gcc), which the model
# tests in model/ run.
ensure_spin() {
  command -v spin >/dev/null 2>&1 && command -v gcc >/dev/null 2>&1 && return 0
  apt_install spin gcc
}

# ensure_chromium installs Debian's chromium, the headless browser the
# console's browser tests (e2e/console_test.go, chromedp) drive.
ensure_chromium() {
  command -v chromium >/dev/null 2>&1 && return 0
  apt_install chromium
}

# ensure_s3clients installs Debian's S3 command-line clients, which the
# front-door tests in e2e/ run unmodified, and exports where they are
# (FENCEGATE_TEST_AWS, FENCEGATE_TEST_RCLONE, FENCEGATE_TEST_S3CMD). The
# Debian binaries in /usr/bin are used by path: an `aws` earlier on PATH (a
# pyenv AWS CLI v1, say) is another client. Debian bookworm ships awscli 2.9,
# rclone 1.60 and s3cmd 2.3; awscli before 2.13 does not read AWS_ENDPOINT_URL,
# so the tests pass --endpoint-url.
ensure_s3clients() {
  if [ ! -x /usr/bin/aws ] || [ ! -x /usr/bin/rclone ] || [ ! -x /usr/bin/s3cmd ]; then
    apt_install awscli rclone s3cmd || return 1
  fi
  export FENCEGATE_TEST_AWS=/usr/bin/aws FENCEGATE_TEST_RCLONE=/usr/bin/rclone FENCEGATE_TEST_S3CMD=/usr/bin/s3cmd
}

# ensure_shells installs zsh and fish (Debian's), whose completion of
# fencectl's scripts cmd/fencectl/completion_test.go runs (bash is there).
ensure_shells() {
  command -v zsh >/dev/null 2>&1 && command -v fish >/dev/null 2>&1 && return 0
  apt_install zsh fish
}

# ensure_wrk installs Debian's wrk, the independent load generator
# internal/cmd/loadbench cross-checks its client's numbers with.
ensure_wrk() {
  command -v wrk >/dev/null 2>&1 && return 0
  apt_install wrk
}

# ensure_promtool installs promtool (Debian's prometheus package), which
# deploy/prometheus_test.go runs over the shipped alert rules and their tests.
ensure_promtool() {
  command -v promtool >/dev/null 2>&1 && return 0
  apt_install prometheus
}

# ensure_systemd_analyze: deploy/kit verifies the systemd unit with it
# (Debian's systemd package; nothing is started).
ensure_systemd_analyze() {
  command -v systemd-analyze >/dev/null 2>&1 && return 0
  apt_install systemd
}

# ensure_nats makes sure NATS JetStream listens on 127.0.0.1:4222 (the queue
# example's e2e test): the machine's nats-server, started as the machine
# starts it when it is not up. It never restarts a running server.
ensure_nats() {
  nats_up() { (exec 3<>/dev/tcp/127.0.0.1/4222) 2>/dev/null; }
  if ! nats_up; then
    if [ -x /usr/sbin/nats-server ] && command -v start-stop-daemon >/dev/null; then
      mkdir -p /var/lib/nats-server
      start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
        -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
    else
      echo "NATS JetStream is not running on 127.0.0.1:4222 and /usr/sbin/nats-server is not installed" >&2
      return 1
    fi
  fi
  wait_for 15 nats_up || { echo "NATS did not start" >&2; return 1; }
  export FENCEGATE_TEST_NATS="${FENCEGATE_TEST_NATS:-nats://127.0.0.1:4222}"
}
