#!/usr/bin/env bash
# The Debian packages rafka's two commands need, installed when missing (as .ci/run always did):
#   Java 17 (Spark through RayDP: make demo, the Spark tests), make, kcat and Node/npm (the Kafka-client tests),
#   Chromium (the web console's page tests), iproute2/nftables/iptables and redis-server (the multi-node suites, GCS fault tolerance); `bench` adds redis-server and nats-server, the peers of
#   benchmarks/peers_bench.py. Usage: .ci/system-deps.sh [demo|test|bench]  (default: test)
set -euo pipefail
what="${1:-test}"
need=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v make >/dev/null 2>&1 || need+=(make)
if [ "$what" = test ]; then
  command -v kcat >/dev/null 2>&1 || need+=(kcat)              # a librdkafka CLI against the wire listener
  command -v npm >/dev/null 2>&1 || need+=(nodejs npm)          # kafkajs (tests/e2e/test_wire_kafkajs.py runs npm ci)
  command -v chromium >/dev/null 2>&1 || need+=(chromium)       # headless: tests/e2e/test_web_console.py
  command -v ip >/dev/null 2>&1 || need+=(iproute2)             # network-namespace nodes: tests/multinode (rafka.testkit)
  command -v nft >/dev/null 2>&1 || need+=(nftables)            # their partitions and lossy links
  command -v iptables >/dev/null 2>&1 || need+=(iptables)
  command -v redis-server >/dev/null 2>&1 || need+=(redis-server)  # Ray's GCS fault tolerance: tests/multinode/test_head_node.py
fi
if [ "$what" = bench ]; then
  command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
  command -v nats-server >/dev/null 2>&1 || need+=(nats-server)
fi
[ ${#need[@]} -eq 0 ] && exit 0
echo "installing Debian packages: ${need[*]}" >&2
if [ "$(id -u)" -eq 0 ]; then sudo=(); elif command -v sudo >/dev/null 2>&1; then sudo=(sudo); else
  echo "rafka needs these Debian packages: ${need[*]} (run as root: apt-get install -y ${need[*]})" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q "${need[@]}"
