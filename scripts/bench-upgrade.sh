#!/usr/bin/env bash
# A two-node cluster's upgrade under QEMU/TCG: Terrarium's one stick
# against the same upgrade done by hand with kubeadm (drain, kubeadm
# upgrade apply / node, the new kubelet and kubectl, restart, uncordon),
# on the same cluster formed from the same image (0.1.0, the previous
# Kubernetes) to the same Kubernetes (0.2.0's), images preloaded in both
# (qemu-tests/bench_upgrade_test.go). Prints per node cordon → Ready on
# the new version and the start → last node healthy, every run and the
# medians, the ratios of the medians, and the last run's timelines.
#
# The by-hand half's preparation (the new images side-loaded and pulled,
# the new binaries copied), which Terrarium's stick does within its clock,
# is its own figure.
#
# BENCH_RUNS (default 3) runs of both halves, taking turns at going
# first. One run takes about 45 minutes here, so BENCH_KEEP=1 adds runs to
# the ones already in $BENCH_OUT (the builds are kept with them) instead
# of starting afresh: BENCH_RUNS=1 BENCH_KEEP=1 three times makes three.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${BENCH_OUT:-out/bench-upgrade}")
runs=${BENCH_RUNS:-3}
if [ "${BENCH_KEEP:-0}" != 1 ]; then
  rm -rf "$out"  # a half that does not finish must not report an earlier run's figures
fi
mkdir -p "$out/builds"
export TERRARIUM_BIN=$PWD/bin TERRARIUM_BENCH_BUILDS=$out/builds
have=$(find "$out" -maxdepth 1 -name 'run-*' | wc -l)
for i in $(seq $((have + 1)) $((have + runs))); do
  run=$out/run-$i
  mkdir -p "$run"
  order="Terrarium Kubeadm"
  [ $((i % 2)) -eq 0 ] && order="Kubeadm Terrarium"
  echo "bench-upgrade: run $i ($order)" >&2
  for half in $order; do
    TERRARIUM_BENCH_OUT=$run go test -tags e2e -count=1 -timeout 150m -v -run "TestUpgradeBench$half\$" ./qemu-tests/ 2>&1 |
      tee -a "$run/test.log" | grep --line-buffered -E '^(=== RUN|--- |PASS|FAIL|ok)|bench_upgrade_test|cluster_upgrade_test' || true
  done
  for m in terrarium kubeadm; do
    if [ ! -f "$run/$m.figures" ]; then
      # Kept aside, out of the medians: its other half has no partner.
      mv "$run" "$out/failed-$i-$(date +%s)"
      echo "bench-upgrade: run $i: $m did not finish (see $out/failed-$i-*/test.log)"
      exit 1
    fi
  done
done
runs_done=$(find "$out" -maxdepth 1 -name 'run-*' | sort -V)
[ -n "$runs_done" ] || { echo "bench-upgrade: no run in $out"; exit 1; }
med() { sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}'; }
figure() { awk -v k="$2" '$1 == k {print $2}' "$1"; }
median() { for r in "$out"/run-*/"$1".figures; do figure "$r" "$2"; done | med; }
rows="cp-1 w-1 last-healthy"
printf '\n%-24s %16s %16s %16s\n' "upgrade (TCG), s" "cp-1 cordon→Ready" "w-1 cordon→Ready" "start→last healthy"
for m in terrarium kubeadm; do
  for r in $runs_done; do
    printf '%-24s' "$m $(basename "$r")"
    for k in $rows; do printf ' %16s' "$(figure "$r/$m.figures" "$k")"; done; echo
  done
  printf '%-24s' "$m median"
  for k in $rows; do printf ' %16s' "$(median $m "$k")"; done; echo
done
for k in $rows; do
  awk -v t="$(median terrarium "$k")" -v b="$(median kubeadm "$k")" -v n="$k" \
    'BEGIN { if (t == "" || b == "" || b == 0) printf "ratio terrarium / kubeadm by hand, medians, %s: -\n", n; else printf "ratio terrarium / kubeadm by hand, medians, %s: %.2f\n", n, t / b }'
done
printf 'kubeadm by hand: preparation before its clock (images side-loaded and pulled, binaries copied), median %s s\n' "$(median kubeadm preparation)"
last=$(echo "$runs_done" | tail -1)
echo
cat "$last/terrarium-timeline.txt" "$last/kubeadm-timeline.txt"
