#!/usr/bin/env bash
# Cluster formation under QEMU/TCG: Terrarium's zero-touch formation against
# a plain `kubeadm init` + `kubeadm join` run over SSH on the same image with
# the same images in the same registry cache, the same leader-election
# flags, the same probe patches and the same certificate key type. Both boot
# two VMs at once (control plane: 2 vCPUs; worker: 1 vCPU at niceness 10;
# 3 GiB each) on a private link with no route out. Prints seconds from
# power-on to API ready, to every node Ready and to every node's pod
# network Ready (both from the API's conditions, the same question for both
# methods), to a user's first Deployment (a bundled image the worker has
# not run yet) running on the worker, the ratios, and Terrarium's
# timelines. BENCH_RUNS (default 3) runs of each half, one after the
# other; every run is listed and the ratios are of the medians. Takes 30
# to 45 minutes a run.
# First, the cost of one mutual-TLS handshake with kubeadm's default RSA
# 2048 certificates against the ECDSA P-256 ones Terrarium has kubeadm make,
# natively and under TCG (qemu-x86_64, user-mode emulation: the same code
# generator the VMs run on).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${BENCH_OUT:-out/bench-cluster}
mkdir -p "$out"
runs=${BENCH_RUNS:-3}
rm -rf "$out"/run-* "$out"/*.json "$out"/*-timeline.txt  # a half that does not finish must not report the last run's figures
go test -c -o "$out/kubeadmconfig.test" ./pkg/node/kube/kubeadmconfig
handshakes() { "$@" "$out/kubeadmconfig.test" -test.run '^$' -test.bench MutualTLSHandshake -test.benchtime 50x -test.count 3 | grep '^Benchmark'; }
echo "mutual-TLS handshake, native:"; handshakes env
echo "mutual-TLS handshake, TCG (qemu-x86_64 -cpu qemu64, the VMs' model):"; handshakes qemu-x86_64 -cpu qemu64
export TERRARIUM_BIN=$PWD/bin TERRARIUM_IMAGE=$PWD/out/terrarium.qcow2
for i in $(seq 1 "$runs"); do
  run=$(realpath -m "$out/run-$i")
  mkdir -p "$run"
  # The halves take turns at going first (the second finds the host's
  # caches warm).
  order="ZeroTouch Kubeadm"
  [ $((i % 2)) -eq 0 ] && order="Kubeadm ZeroTouch"
  echo "bench-cluster: run $i of $runs ($order)" >&2
  for half in $order; do
    # The whole output (a failure's detail, the consoles' paths) goes to
    # test.log; the terminal gets the headlines.
    TERRARIUM_BENCH_OUT=$run go test -tags e2e -count=1 -timeout 130m -v -run "TestClusterBench$half\$" ./qemu-tests/ 2>&1 |
      tee -a "$run/test.log" | grep --line-buffered -E '^(=== RUN|--- |PASS|FAIL|ok)|bench_cluster_test' || true
  done
  for m in terrarium kubeadm; do
    [ -f "$run/$m.json" ] || { echo "bench-cluster: run $i: $m did not finish (see above)"; exit 1; }
  done
done
field() { sed -n "s/.*\"$2\": \([0-9.]*\).*/\1/p" "$1"; }
# A figure a half did not reach (its first Deployment never ran) is absent
# from its JSON: shown as "-", never as 0.
num() { if [ -n "$1" ]; then printf ' %17.0f' "$1"; else printf ' %17s' -; fi; }
med() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
median() { for r in "$out"/run-*/"$1".json; do field "$r" "$2"; done | med; }
figures="apiReadySeconds:API-ready nodesReadySeconds:nodes-Ready podNetworkReadySeconds:pod-network firstDeploymentSeconds:first-Deployment firstDeploymentAfterApplySeconds:apply-to-running"
printf '\n%-22s' "formation (TCG), s"
for f in $figures; do printf ' %17s' "${f#*:}"; done; echo
for m in terrarium kubeadm; do
  for r in "$out"/run-*/"$m".json; do
    printf '%-22s' "$m $(basename "$(dirname "$r")")"
    for f in $figures; do num "$(field "$r" "${f%%:*}")"; done; echo
  done
  printf '%-22s' "$m median"
  for f in $figures; do num "$(median $m "${f%%:*}")"; done; echo
done
printf 'terrarium: every node healthy (firstboot blessed the boot), median %.0f s\n' "$(median terrarium healthySeconds)"
# Rounded, not truncated as bc's scale would: terrarium / kubeadm, the
# issue's ratio (≤ 0.5 is twice as fast).
for f in $figures; do
  awk -v k="$(median kubeadm "${f%%:*}")" -v t="$(median terrarium "${f%%:*}")" -v n="${f#*:}" \
    'BEGIN { if (k == "" || t == "") printf "ratio terrarium / kubeadm, medians, %s: - (a half has no figure)\n", n; else printf "ratio terrarium / kubeadm, medians, %s: %.2f\n", n, t / k }'
done
echo
last=$(ls -d "$out"/run-* | sort -V | tail -1)
cat "$last/terrarium-timeline.txt"
