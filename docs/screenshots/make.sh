#!/usr/bin/env bash
# Re-make the README screenshots with the real app, offscreen:
#   bash docs/screenshots/make.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
shot() { python -m fpexplorer screenshot --out "docs/screenshots/$1.png" "${@:2}"; }
shot formats-compare       --format fp32 fp16 bf16 --value 0.1 --view number-line
shot formats-range         --format fp16 bf16 float8_e4m3fn --value 65504 --view range
shot formats-fp64-subnormal --format fp64 --value 4.9e-324 --view table
shot formats-fp4-codes     --format fp4 fp6_e2m3 --value 2.7 --view codes
shot formats-custom        --format e6m9 fp16 --value 1000.3 --view properties
shot formats-nan-dark      --format fp16 float8_e4m3fn --value nan --view codes --theme dark
shot formats-overflow      --format float8_e4m3fn fp16 bf16 --value 500 --view number-line --size 1920x1080
shot formats-small-dark    --format fp32 fp16 bf16 float8_e5m2 --value fp16:0x0001 --view table --size 1024x640 --theme dark
shot formats-block       --format fp32 --value 0.1 --view block --size 1280x800
shot training              --panel training --run tests/gui/training/data/overflow-fp16.jsonl
# The Low precision page: two real 60-step FP8 runs of the transformer task (about 20 s each
# on a CPU), dynamic and delayed scaling side by side.
runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
for scaling in dynamic delayed; do
  python -m fpexplorer train --task transformer --precision fp8 --fp8-scaling "$scaling" \
    --steps 60 --stats-every 1 --device cpu --out "$runs/fp8-$scaling.jsonl" 2>/dev/null
done
shot training-low-precision --panel training --training-page low \
  --run "$runs/fp8-dynamic.jsonl" "$runs/fp8-delayed.jsonl"
