#!/usr/bin/env bash
# Reproduces docs/results/plans_gemma3_kivi/: scripts/calibrate_gemma3.sh with the KIVI quantizer, 1 thread.
# Usage: scripts/calibrate_gemma3_kivi.sh [BUILD_DIR] [THREADS]   (default build, 1)
exec "$(dirname "$0")/calibrate_gemma3.sh" "${1:-build}" "${2:-1}" kivi
