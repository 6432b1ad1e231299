#!/usr/bin/env bash
# Cluster formation under QEMU/TCG: Terrarium's zero-touch formation against
# a plain `kubeadm init` + `kubeadm join` run over SSH on the same image with
# the same images in the same registry cache, the same leader-election
# flags, the same probe patches and the same certificate key type. Both boot
# two VMs at once (control plane: 2 vCPUs; worker: 1 vCPU at niceness 10;
# 3 GiB each) on a private link with no route out. Prints seconds from power-on to API ready and to all nodes
# Ready, the ratio, and both nodes' timelines. Takes 20 to 40 minutes.
# First, the cost of one mutual-TLS handshake with kubeadm's default RSA
# 2048 certificates against the ECDSA P-256 ones Terrarium has kubeadm make,
# natively and under TCG (qemu-x86_64, user-mode emulation: the same code
# generator the VMs run on).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${BENCH_OUT:-out/bench-cluster}
mkdir -p "$out"
go test -c -o "$out/kubeadmconfig.test" ./pkg/kubeadmconfig
handshakes() { "$@" "$out/kubeadmconfig.test" -test.run '^$' -test.bench MutualTLSHandshake -test.benchtime 50x -test.count 3 | grep '^Benchmark'; }
echo "mutual-TLS handshake, native:"; handshakes env
echo "mutual-TLS handshake, TCG (qemu-x86_64 -cpu qemu64, the VMs' model):"; handshakes qemu-x86_64 -cpu qemu64
export TERRARIUM_BIN=$PWD/bin TERRARIUM_IMAGE=$PWD/out/terrarium.qcow2 TERRARIUM_BENCH_OUT=$PWD/$out
# The whole output (a failure's detail, the consoles' paths) goes to
# test.log; the terminal gets the headlines.
go test -tags e2e -count=1 -timeout 130m -v -run 'TestClusterBench(ZeroTouch|Kubeadm)$' ./qemu-tests/ 2>&1 | tee "$out/test.log" |
  grep --line-buffered -E '^(=== RUN|--- |PASS|FAIL|ok)|bench_cluster_test' || true
field() { sed -n "s/.*\"$2\": \([0-9.]*\).*/\1/p" "$out/$1.json"; }
for m in terrarium kubeadm; do
  [ -f "$out/$m.json" ] || { echo "bench-cluster: $m did not finish (see above)"; exit 1; }
done
printf '\n%-28s %12s %16s\n' "cluster formation (TCG)" "API ready" "all nodes Ready"
for m in terrarium kubeadm; do
  printf '%-28s %10.0f s %14.0f s\n' "$m" "$(field $m apiReadySeconds)" "$(field $m allNodesReadySeconds)"
done
# Rounded, not truncated as bc's scale would.
awk -v k="$(field kubeadm allNodesReadySeconds)" -v t="$(field terrarium allNodesReadySeconds)" \
  'BEGIN { printf "ratio (kubeadm / terrarium, all nodes Ready): %.2f\n", k / t }'
echo
cat "$out/terrarium-timeline.txt"
