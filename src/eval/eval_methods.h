// The method x bits matrix of `mpkv eval`: which KV options each cell runs with.
//
//   f16                          once (the 16-bit reference itself), bits 16
//   uniform, kivi, rotated, turbo  integer b: K and V at b bits; b + 0.5: keys at b+1, values at
//                                b ("K3/V2" for 2.5; keys carry the outlier channels)
//   progressive                  final bits on the 16 -> 8 -> 4 -> 2 -> 1 ladder: b in {1,2,4,8}
//                                for both, 3 as K4/V2, 6 as K8/V4; other b cannot be expressed
//                                without a per-component plan and are skipped (with the reason)
//   pmkvq, ratequant, combined   the calibrated plan <plan_dir>/<method>_<b>.json (`mpkv calibrate`)
//   split                        every fixed K/V split at b from the widths {2, 3, 4, 8} (2.5: K3/V2,
//                                K2/V3; 3: K4/V2, K3/V3, K2/V4): the plans <plan_dir>/fixed_k<K>v<V>.json
//                                (`mpkv calibrate --method fixed --k-bits K --v-bits V --report-in R`),
//                                so they carry the quantizer and key smoothing of the calibrated plans
//                                in the same folder and hold their bytes (docs/calibration.md)
//   plan:NAME                    the plan file <plan_dir>/NAME.json, once, labelled NAME; its
//                                nominal bits are the number after NAME's last '_' (ablation plans
//                                such as fixed_uniform_3, ratequant_3_pi16; scripts/ablation.sh)
// A method written "name:b" (e.g. "kivi:2") runs at b only, whatever the bits list says.
#pragma once
#include <string>
#include <vector>

#include "eval/lockstep_decoder.h"

namespace mpkv {

struct EvalMatrix {
  std::vector<EvalMethod> methods;
  std::vector<std::string> skipped;  // "progressive-2.5: <reason>"
};

// Error on an unknown method, bits outside (1, 16), or a missing plan file (naming the file and
// the command that makes it). `model_path` only goes into that message.
EvalMatrix eval_matrix(const std::vector<std::string>& methods, const std::vector<double>& bits,
                       const std::string& plan_dir, const std::string& model_path);

// "2", "2.5": the bits as they appear in labels and plan file names.
std::string format_bits(double b);

}  // namespace mpkv
