#!/usr/bin/env bash
# Registry figures (issue: bundles and the on-node registry cache), with
# baselines measured in the same run:
#   blob GET throughput, 1 GiB blob and 4 KiB blobs: firstboot's registry
#     vs distribution/distribution v3 serving the same content on loopback
#   bundle images pullable after boot (in a QEMU VM): registry start → READY
#     vs `ctr images import` of the same images (the k3s-style alternative)
#   peer serving: ten clients pull the whole bundle at once over mutual TLS,
#     firstboot's registry vs distribution v3 serving the same images
# Needs the default image (make image). Prints a Markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${TERRARIUM_CACHE:-$HOME/.cache/terrarium}
dist="$cache/bin/distribution-registry-v3.1.2"
if [ ! -x "$dist" ]; then
  echo "bench: building distribution/distribution v3.1.2 (once)" >&2
  mkdir -p "$cache/bin"
  (cd tools/distribution && go build -o "$dist.partial" github.com/distribution/distribution/v3/cmd/registry && mv "$dist.partial" "$dist")
fi
log=$(mktemp /tmp/terrarium-regbench.XXXXXX.log)
echo "bench: blob GET comparison" >&2
TERRARIUM_DIST_REGISTRY="$dist" go test -run '^$' -bench BenchmarkCompare -benchtime 3s -count 3 ./pkg/node/images/registry | tee "$log" >&2
echo "bench: peer serving, ten clients over mutual TLS" >&2
TERRARIUM_DIST_REGISTRY="$dist" TERRARIUM_CACHE="$cache" TERRARIUM_BUNDLE_OF=$PWD/out/manifest.json \
  go test -run '^$' -bench BenchmarkPeerServing -benchtime 1x -count 3 -timeout 60m ./pkg/node/images/registry | tee -a "$log" >&2
echo "bench: bundle ready vs ctr import (QEMU)" >&2
TERRARIUM_BIN=$PWD/bin TERRARIUM_IMAGE=$PWD/out/terrarium.qcow2 go test -run '^$' -bench BundleReadyVsImport -benchtime 1x -count 3 -timeout 60m ./qemu-tests/ | tee -a "$log" >&2

# ratio A B DIGITS: A / B rounded (bc's scale truncates: 2.99 would read 2.9).
ratio() { awk -v a="$1" -v b="$2" -v d="$3" 'BEGIN { printf "%.*f", d, a / b }'; }
med() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mbs() { grep -E "BenchmarkCompare/$1-" "$log" | awk '{for(i=1;i<=NF;i++) if($i=="MB/s") print $(i-1)}' | med; }
t1=$(mbs blob1GiB/terrarium); d1=$(mbs blob1GiB/distribution)
ts=$(mbs small4KiB/terrarium); ds=$(mbs small4KiB/distribution)
nsop() { grep -E "BenchmarkPeerServing/$1-" "$log" | awk '{print $3}' | med; }
pt=$(nsop terrarium); pd=$(nsop distribution)
ready=$(grep BundleReadyVsImport "$log" | grep -oE '[0-9.]+ ms-registry-ready([[:space:]]|$)' | cut -d' ' -f1 | med)
imp=$(grep BundleReadyVsImport "$log" | grep -oE '[0-9.]+ ms-ctr-import' | cut -d' ' -f1 | med)
cat <<EOF2
| figure | terrarium | baseline | ratio |
|---|---|---|---|
| 1 GiB blob GET (MB/s, median of 3) | $t1 | distribution v3: $d1 | $(ratio "$t1" "$d1" 2) |
| 4 KiB blob GETs (MB/s, median of 3) | $ts | distribution v3: $ds | $(ratio "$ts" "$ds" 2) |
| bundle pullable after boot (ms) | registry ready: $ready | ctr import: $imp | $(ratio "$imp" "$ready" 1)× faster |
| 10 peers pull the whole bundle over mTLS (s, median of 3) | $(ratio "$pt" 1000000000 1) | distribution v3: $(ratio "$pd" 1000000000 1) | $(ratio "$pd" "$pt" 2) |
EOF2
