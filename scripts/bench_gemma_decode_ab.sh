#!/usr/bin/env bash
# Gemma-3-270M decode at depth 128, 1 thread: this build with the weight prefetch of the matvec
# driver (its default distance) and without it (MPKV_MATVEC_PREFETCH_BYTES=0, the driver of main
# before it), plus optionally an older build (OLD=<build dir>, e.g. one of 3b1a349). The variants
# alternate within each of ROUNDS rounds (`mpkv bench ... -r REPS`, medians inside), so a shared
# machine's load falls on all of them alike; the table gives, per variant, the medians over the
# rounds of tok/s and of tokens per CPU-second, and their ratios to the no-prefetch variant.
# Then `bench_matvec --model`: the matvec time of one step per matrix role, without and with prefetch.
# docs/results/engine_speed.md, Gemma section.
# Usage: [OLD=<build dir>] [BUILD=build] [ROUNDS=5] [REPS=5] [DEPTH=128] scripts/bench_gemma_decode_ab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}; ROUNDS=${ROUNDS:-5}; REPS=${REPS:-5}; DEPTH=${DEPTH:-128}
M=models/gemma-3-270m-q4_k_m.gguf
export OMP_WAIT_POLICY=passive
scripts/get_model.sh gemma3-270m

decode() {  # $1: binary; prints "tok/s tok/CPU-s"
  local out
  out=$("$1" bench -m "$M" --synthetic -p 16 -n 32 -d "$DEPTH" -r "$REPS" -t 1 2>&1) || { echo "$out" >&2; exit 1; }
  # builds before 88a950b print no tokens per CPU-second: "nan"
  awk '/^decode/ {s = $0; if (!sub(/.*MiB; /, "", s)) s = "nan"; print $6, (s == "nan" ? s : s + 0)}' <<<"$out"
}
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2)}'; }

declare -A wall cpu
variants=(pf nopf)
[ -n "${OLD:-}" ] && variants+=(old)
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
  for v in "${variants[@]}"; do
    case $v in
      pf) res=$(decode "$BUILD"/mpkv) ;;
      nopf) res=$(MPKV_MATVEC_PREFETCH_BYTES=0 decode "$BUILD"/mpkv) ;;
      old) res=$(MPKV_MATVEC_PREFETCH_BYTES=0 decode "$OLD"/mpkv) ;;
    esac
    read -r w c <<<"$res"
    wall[$v]+="$w "; cpu[$v]+="$c "
    echo "round $r $v: $w tok/s, $c tok per CPU-second"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| variant | decode tok/s (median of $ROUNDS rounds) | ratio | tok per CPU-second | ratio |"
echo "|---|---|---|---|---|"
med() { tr ' ' '\n' <<<"$1" | grep . | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a == "nan" || b == "nan") print "n/a"; else printf "%.2fx", a / b}'; }
bw=$(med "${wall[nopf]}"); bc=$(med "${cpu[nopf]}")
for v in "${variants[@]}"; do
  mw=$(med "${wall[$v]}"); mc=$(med "${cpu[$v]}")
  case $v in pf) label="this build, prefetch default" ;; nopf) label="this build, MPKV_MATVEC_PREFETCH_BYTES=0" ;; old) label="OLD=$OLD" ;; esac
  echo "| $label | $mw | $(ratio "$mw" "$bw") | $mc | $(ratio "$mc" "$bc") |"
done
echo
"$BUILD"/bench_matvec --model "$M"
