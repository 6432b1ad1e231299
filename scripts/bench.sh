#!/usr/bin/env bash
# `make bench`: build and boot figures of the default image, each the median
# of BENCH_RUNS runs (default 3), with baselines measured in the same run:
#   cold build      (empty cache)  vs. mmdebstrap alone with the same packages
#   warm build      (cache filled) vs. the cold build
#   boot to "provisioned" under TCG vs. boot to switch_root (firmware+kernel+initramfs)
# Prints a Markdown table; docs/benchmarks.md records the last one.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${BENCH_RUNS:-3}
spec=os/terrarium.yaml
work=$(mktemp -d /tmp/terrarium-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
secs() { local s; s=$(date +%s.%N); "$@" >/dev/null 2>&1; awk -v a="$(date +%s.%N)" -v b="$s" 'BEGIN { printf "%.3f\n", a - b }'; }
# ratio A B DIGITS: A / B rounded (bc's scale truncates: 2.99 would read 2.9).
ratio() { awk -v a="$1" -v b="$2" -v d="$3" 'BEGIN { printf "%.*f", d, a / b }'; }

pkgs=$(awk '/packages:/{p=1;next} p&&/^ *- /{gsub(/^ *- /,"");printf "%s,",$0;next} p&&!/^ *- /{p=0}' "$spec" | sed 's/,$//')

echo "bench: $runs runs each" >&2
cold=(); base=(); warm=()
for i in $(seq "$runs"); do
  echo "bench: cold build $i" >&2
  cold+=("$(TERRARIUM_CACHE="$work/cache-$i" secs bin/imagebuild build --spec "$spec" --out "$work/out-cold")")
  echo "bench: mmdebstrap baseline $i" >&2
  base+=("$(secs mmdebstrap --variant=minbase --include="$pkgs" --format=tar trixie "$work/base.tar" http://deb.debian.org/debian)")
  rm -f "$work/base.tar"
done
cache="$work/cache-1"
for i in $(seq "$runs"); do
  echo "bench: warm build $i" >&2
  warm+=("$(TERRARIUM_CACHE="$cache" secs bin/imagebuild build --spec "$spec" --out "$work/out-warm")")
done
raw=$(stat -c %s "$work/out-warm/terrarium.raw"); qcow=$(stat -c %s "$work/out-warm/terrarium.qcow2")
raw_alloc=$(du -k "$work/out-warm/terrarium.raw" | cut -f1)

echo "bench: boots" >&2
boot=$(TERRARIUM_IMAGE="$work/out-warm/terrarium.qcow2" go test -run '^$' -bench BootToProvisioned -benchtime="${runs}x" -timeout 60m -v ./qemu-tests/ 2>&1 | tee "$work/boot.log" | grep -E "BenchmarkBootToProvisioned" | tail -1)
timeline=$(awk '/median of/{buf=""} {buf=buf $0 "\n"} END{printf "%s", buf}' "$work/boot.log" | sed -n '/median of/,/provisioned .*s (+/p' | sed 's/^ *//; s/^bench_test.go:[0-9]*: //')

c=$(printf '%s\n' "${cold[@]}" | median); b=$(printf '%s\n' "${base[@]}" | median); w=$(printf '%s\n' "${warm[@]}" | median)
cat <<EOF2
| figure (median of $runs) | value | baseline in the same run |
|---|---|---|
| cold build, empty cache | $(printf %.1f "$c") s | mmdebstrap alone: $(printf %.1f "$b") s |
| warm build, cache filled | $(printf %.1f "$w") s | $(ratio "$c" "$w" 1)× faster than cold |
| raw image | $((raw >> 20)) MiB ($((raw_alloc >> 10)) MiB allocated, sparse) | |
| qcow2 image | $((qcow >> 20)) MiB | |
| QEMU start → provisioned (TCG) | $(echo "$boot" | grep -oE '[0-9.]+ s-to-provisioned' | cut -d' ' -f1) s | to switch_root: $(echo "$boot" | grep -oE '[0-9.]+ s-to-switch-root' | cut -d' ' -f1) s |

cold runs: ${cold[*]}; mmdebstrap: ${base[*]}; warm runs: ${warm[*]}

Boot timeline (median boot):

\`\`\`
$timeline
\`\`\`
EOF2
