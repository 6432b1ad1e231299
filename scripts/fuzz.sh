#!/usr/bin/env bash
# Runs every Go fuzz target of the repository (found with
# `go test -list '^Fuzz' ./pkg/...`) for FUZZTIME each (default 10m), one
# after another, and prints each target's last execs line. Exits non-zero
# if any target fails; Go then writes the failing input to the package's
# testdata/fuzz/<Target>/, where it becomes a regression test
# (docs/fuzzing.md). `make fuzz` runs it. FUZZ_MATCH, an extended regular
# expression, keeps only the targets whose "package name" matches it.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10m}

# `go test -list` prints a package's matching names, then "ok <package>".
# A target is "DIR PACKAGE NAME": DIR is the module it is tested in, the
# repository's own or a component's nested module (components/*/ with Go
# packages of ours, tested with GOWORK=off as `make unit` does).
targets=()
# collect DIR PATTERN lists DIR's fuzz targets in PATTERN's packages.
collect() {
	local dir=$1 pattern=$2 list line pkg n names=()
	list=$(cd "$dir" && GOWORK=off $GO test -list '^Fuzz' "$pattern")
	while IFS= read -r line; do
		case $line in
		Fuzz*) names+=("$line") ;;
		ok*)
			pkg=$(awk '{print $2}' <<<"$line")
			for n in "${names[@]}"; do targets+=("$dir $pkg $n"); done
			names=()
			;;
		*) names=() ;;
		esac
	done <<<"$list"
}
collect . ./pkg/...
collect components/metallb ./link
collect components/local-path-provisioner ./volume
if [ -n "${FUZZ_MATCH:-}" ]; then
	kept=()
	for t in "${targets[@]}"; do
		if grep -Eq -- "$FUZZ_MATCH" <<<"$t"; then kept+=("$t"); fi
	done
	targets=("${kept[@]}")
fi
if [ ${#targets[@]} -eq 0 ]; then
	echo "fuzz: no fuzz targets found${FUZZ_MATCH:+ matching $FUZZ_MATCH}" >&2
	exit 1
fi
echo "fuzz: ${#targets[@]} targets, $FUZZTIME each"

log=$(mktemp)
trap 'rm -f "$log"' EXIT

# fuzz DIR PKG NAME runs one target into $log.
fuzz() { (cd "$1" && GOWORK=off $GO test -run '^$' -fuzz "^$3\$" -fuzztime "$FUZZTIME" "$2") >"$log" 2>&1; }

# deadline_race reports whether the run in $log failed only because a worker
# missed the end of -fuzztime (go.dev/issue/75804): no input was found.
deadline_race() {
	grep -q '^[[:space:]]*context deadline exceeded$' "$log" && ! grep -q 'Failing input written' "$log"
}

failed=()
for t in "${targets[@]}"; do
	read -r dir pkg name <<<"$t"
	echo "== $pkg $name"
	ok=true
	if ! fuzz "$dir" "$pkg" "$name"; then
		ok=false
		if deadline_race; then
			echo "(stopped by Go's fuzztime deadline race, no failing input; running it again)"
			fuzz "$dir" "$pkg" "$name" && ok=true
		fi
	fi
	if ! $ok; then
		grep -v '^fuzz: elapsed' "$log" || true
		failed+=("$pkg $name")
	fi
	grep '^fuzz: elapsed' "$log" | tail -n 1 || true
done

if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz: ${#failed[@]} of ${#targets[@]} targets failed:"
	printf '  %s\n' "${failed[@]}"
	exit 1
fi
echo "fuzz: all ${#targets[@]} targets passed"
