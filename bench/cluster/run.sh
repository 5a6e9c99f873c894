#!/usr/bin/env bash
# Write and read benchmark of three-node etcd, ZooKeeper and Aqueduct
# clusters on loopback, one system at a time, with the same client program
# (clusterbench) and settings for all three. See bench/cluster/README.md.
#
#   bench/cluster/run.sh [OUT.json]          (default bench/cluster/results.json)
#   AQUEDUCT_BIN=target/release/aqueduct bench/cluster/run.sh out.json
#
# Settings from the environment: CLIENTS (16), DURATION (20s), WARMUP (1s),
# SYSTEMS ("etcd zookeeper aqueduct"; Aqueduct runs only with AQUEDUCT_BIN).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${1:-$repo/bench/cluster/results.json}"
clients="${CLIENTS:-16}"
duration="${DURATION:-20s}"
warmup="${WARMUP:-1s}"
systems="${SYSTEMS:-etcd zookeeper aqueduct}"
value_bytes=179
keys=10000

root=""
pids=()     # every server process this script started and has not stopped
node_dir="" # the running system's directory (data and logs)
endpoints=""

log() { echo "run.sh: $*" >&2; }

stop_nodes() {
  local pid i
  for pid in "${pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    for ((i = 0; i < 100; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  pids=()
}

cleanup() {
  stop_nodes
  if [[ -n "$root" ]]; then
    rm -rf "$root"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# free_ports N prints N distinct free TCP ports on 127.0.0.1.
free_ports() {
  python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

show_logs() {
  local f
  for f in "$node_dir"/*.log; do
    [[ -f "$f" ]] || continue
    echo "--- ${f##*/} (last 30 lines)" >&2
    tail -n 30 "$f" >&2
  done
}

ensure_packages() {
  local missing=()
  if [[ " $systems " == *" etcd "* && ! -x /usr/bin/etcd ]]; then
    missing+=(etcd-server etcd-client)
  fi
  if [[ " $systems " == *" zookeeper "* && ! -f /usr/share/java/zookeeper.jar ]]; then
    missing+=(zookeeper)
  fi
  ((${#missing[@]})) || return 0
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    log "installing ${missing[*]}"
    apt-get update -qq >&2
    apt-get install -y --no-install-recommends "${missing[@]}" >&2
  else
    log "needs the Debian packages: ${missing[*]}"
    exit 1
  fi
}

start_etcd() {
  local ports i cluster=""
  node_dir="$(mktemp -d "$root/etcd.XXXXXX")"
  read -r -a ports <<<"$(free_ports 6)" # 0-2 client, 3-5 peer
  for i in 0 1 2; do
    cluster+="${cluster:+,}e$((i + 1))=http://127.0.0.1:${ports[i + 3]}"
  done
  endpoints="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}"
  for i in 0 1 2; do
    etcd --name "e$((i + 1))" --data-dir "$node_dir/e$((i + 1))" \
      --listen-client-urls "http://127.0.0.1:${ports[i]}" \
      --advertise-client-urls "http://127.0.0.1:${ports[i]}" \
      --listen-peer-urls "http://127.0.0.1:${ports[i + 3]}" \
      --initial-advertise-peer-urls "http://127.0.0.1:${ports[i + 3]}" \
      --initial-cluster "$cluster" --initial-cluster-token clusterbench \
      --initial-cluster-state new --logger zap --log-outputs stderr \
      >"$node_dir/e$((i + 1)).log" 2>&1 &
    pids+=($!)
  done
}

start_zookeeper() {
  local ports i servers="" cp=/usr/share/java/zookeeper.jar
  node_dir="$(mktemp -d "$root/zookeeper.XXXXXX")"
  read -r -a ports <<<"$(free_ports 9)" # 0-2 client, 3-5 quorum, 6-8 election
  for i in 0 1 2; do
    servers+="server.$((i + 1))=127.0.0.1:${ports[i + 3]}:${ports[i + 6]}"$'\n'
  done
  endpoints="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}"
  # The jar's manifest names its dependencies; slf4j-simple logs to stderr.
  if [[ -f /usr/share/java/slf4j-simple.jar ]]; then
    cp+=":/usr/share/java/slf4j-simple.jar"
  fi
  for i in 0 1 2; do
    local d="$node_dir/z$((i + 1))"
    mkdir -p "$d/data"
    echo "$((i + 1))" >"$d/data/myid"
    # forceSync (fsync of the transaction log before acknowledging) is on by default.
    cat >"$d/zoo.cfg" <<EOF
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$d/data
clientPort=${ports[i]}
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
$servers
EOF
    java -Xms256m -Xmx1g -cp "$cp" org.apache.zookeeper.server.quorum.QuorumPeerMain "$d/zoo.cfg" \
      >"$node_dir/z$((i + 1)).log" 2>&1 &
    pids+=($!)
  done
}

start_aqueduct() {
  local ports i cluster=""
  node_dir="$(mktemp -d "$root/aqueduct.XXXXXX")"
  read -r -a ports <<<"$(free_ports 6)" # 0-2 PostgreSQL, 3-5 HTTP
  for i in 0 1 2; do
    cluster+="${cluster:+,}$((i + 1))=127.0.0.1:${ports[i + 3]}"
  done
  endpoints="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}"
  # No fsync flag: the default (--fsync always) is durable, like etcd's and ZooKeeper's.
  for i in 0 1 2; do
    "$AQUEDUCT_BIN" serve --data-dir "$node_dir/n$((i + 1))" \
      --pg-addr "127.0.0.1:${ports[i]}" --http-addr "127.0.0.1:${ports[i + 3]}" \
      --node-id "$((i + 1))" --cluster "$cluster" \
      >"$node_dir/n$((i + 1)).log" 2>&1 &
    pids+=($!)
  done
}

# bench SYSTEM READY_TIMEOUT: waits until the running cluster takes a write,
# then runs the write and the read workload against it.
bench() {
  local system=$1 ready_timeout=$2 mode
  if ! "$cb" -system "$system" -endpoints "$endpoints" -mode ready -setup-timeout "$ready_timeout"; then
    log "$system did not take a write within $ready_timeout"
    show_logs
    exit 1
  fi
  for mode in write read; do
    if ! "$cb" -system "$system" -mode "$mode" -endpoints "$endpoints" \
      -clients "$clients" -duration "$duration" -warmup "$warmup" \
      -value-bytes "$value_bytes" -keys "$keys" -json "$root/result-$system-$mode.json"; then
      log "$system $mode failed"
      show_logs
      exit 1
    fi
  done
}

ensure_packages
root="$(mktemp -d -t clusterbench.XXXXXX)"
log "building clusterbench"
(cd "$here" && go build -buildvcs=false -o "$root/clusterbench" .)
cb="$root/clusterbench"

etcd_version="" zk_version="" aqueduct_version="" skipped=""
for system in $systems; do
  case "$system" in
  etcd)
    etcd_version="$(etcd --version | sed -n 's/^etcd Version: //p')"
    log "etcd $etcd_version: 3 nodes"
    start_etcd
    bench etcd 60s
    ;;
  zookeeper)
    zk_version="$(java -cp /usr/share/java/zookeeper.jar org.apache.zookeeper.version.VersionInfoMain |
      sed -n 's/^Apache ZooKeeper, version \([^ ]*\).*/\1/p')"
    log "ZooKeeper $zk_version: 3 servers"
    start_zookeeper
    bench zookeeper 60s
    ;;
  aqueduct)
    if [[ -z "${AQUEDUCT_BIN:-}" ]]; then
      log "AQUEDUCT_BIN is not set: skipping Aqueduct"
      skipped="AQUEDUCT_BIN is not set"
      continue
    fi
    if [[ ! -x "$AQUEDUCT_BIN" ]]; then
      log "AQUEDUCT_BIN=$AQUEDUCT_BIN is not an executable"
      exit 1
    fi
    aqueduct_version="$("$AQUEDUCT_BIN" --version 2>/dev/null | head -n 1 || true)"
    aqueduct_version="${aqueduct_version#aqueduct }"
    log "Aqueduct ${aqueduct_version:-(version unknown)}: 3 nodes"
    start_aqueduct
    bench aqueduct 30s
    ;;
  *)
    log "unknown system in SYSTEMS: $system"
    exit 1
    ;;
  esac
  stop_nodes
done

CLIENTS="$clients" DURATION="$duration" WARMUP="$warmup" VALUE_BYTES="$value_bytes" KEYS="$keys" \
  ETCD_VERSION="$etcd_version" ZK_VERSION="$zk_version" AQUEDUCT_VERSION="$aqueduct_version" \
  SKIPPED="$skipped" python3 - "$out" "$root" <<'EOF'
import datetime, glob, json, os, platform, sys

out, root = sys.argv[1], sys.argv[2]
env = os.environ
cpu = ""
with open("/proc/cpuinfo") as f:
    for line in f:
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
with open("/proc/meminfo") as f:
    mem_kib = int(next(l for l in f if l.startswith("MemTotal")).split()[1])
order = {"etcd": 0, "zookeeper": 1, "aqueduct": 2, "write": 0, "read": 1}
results = [json.load(open(p)) for p in glob.glob(os.path.join(root, "result-*.json"))]
results.sort(key=lambda r: (order[r["system"]], order[r["mode"]]))
doc = {
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "machine": {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(mem_kib / 2**20, 1),
        "kernel": platform.release(),
    },
    "settings": {
        "nodes": 3,
        "clients": int(env["CLIENTS"]),
        "duration": env["DURATION"],
        "warmup": env["WARMUP"],
        "value_bytes": int(env["VALUE_BYTES"]),
        "keys": int(env["KEYS"]),
    },
    "versions": {
        "etcd": env["ETCD_VERSION"] or None,
        "zookeeper": env["ZK_VERSION"] or None,
        "aqueduct": env["AQUEDUCT_VERSION"] or None,
    },
    "skipped": {"aqueduct": env["SKIPPED"]} if env["SKIPPED"] else {},
    "results": results,
}
with open(out, "w") as f:
    json.dump(doc, f, indent=2)
    f.write("\n")
EOF
log "wrote $out"
