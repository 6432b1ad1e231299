#!/usr/bin/env bash
# Cluster formation under QEMU/TCG: Terrarium's zero-touch formation against
# a plain `kubeadm init` + `kubeadm join` run over SSH on the same image with
# the same images in the same registry cache, the same leader-election
# flags, the same probe patches and the same certificate key type. Both boot
# two VMs at once (control plane: 2 vCPUs; worker: 1 vCPU at niceness 10;
# 3 GiB each) on a private link with no route out. Prints seconds from
# power-on to API ready, to every node Ready and to every node's pod
# network Ready (both from the API's conditions, the same question for both
# methods), the ratios, and Terrarium's timelines. Takes 30 to 45 minutes.
# First, the cost of one mutual-TLS handshake with kubeadm's default RSA
# 2048 certificates against the ECDSA P-256 ones Terrarium has kubeadm make,
# natively and under TCG (qemu-x86_64, user-mode emulation: the same code
# generator the VMs run on).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${BENCH_OUT:-out/bench-cluster}
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*-timeline.txt  # a half that does not finish must not report the last run's figures
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
printf '\n%-24s %10s %12s %27s\n' "cluster formation (TCG)" "API ready" "nodes Ready" "pod network on every node"
for m in terrarium kubeadm; do
  printf '%-24s %8.0f s %10.0f s %25.0f s\n' "$m" "$(field $m apiReadySeconds)" "$(field $m nodesReadySeconds)" "$(field $m podNetworkReadySeconds)"
done
printf 'terrarium: every node healthy (firstboot blessed the boot) at %.0f s\n' "$(field terrarium healthySeconds)"
# Rounded, not truncated as bc's scale would.
for f in podNetworkReadySeconds:"pod network on every node" nodesReadySeconds:"nodes Ready" apiReadySeconds:"API ready"; do
  awk -v k="$(field kubeadm "${f%%:*}")" -v t="$(field terrarium "${f%%:*}")" -v n="${f#*:}" \
    'BEGIN { printf "ratio kubeadm / terrarium, %s: %.2f\n", n, k / t }'
done
echo
cat "$out/terrarium-timeline.txt"
