// Method names, in one table. KvMethod: the KV cache methods a command line, an eval spec or code
// can ask for (kv_cache_factory.h says what each one stores). KvPlanMethod: what built a plan
// (KvPlan::method, a plan file's "method"): a KvMethod, a calibration method (`mpkv calibrate
// --method`, calib/plan_allocation.h) or a plan file that names none. Names are parsed once, where
// they enter (the CLI, `mpkv eval`'s method list, a plan file); everything inside uses the enums.
#pragma once
#include <string>

#include "quant/quant_options.h"

namespace mpkv {

enum class KvMethod { f16, uniform, kivi, rotated, turbo, progressive };
inline constexpr KvMethod kKvMethods[] = {KvMethod::f16,     KvMethod::uniform, KvMethod::kivi,
                                          KvMethod::rotated, KvMethod::turbo,   KvMethod::progressive};

// The first six are the KvMethods, in the same order.
enum class KvPlanMethod { f16, uniform, kivi, rotated, turbo, progressive, pmkvq, ratequant, combined, fixed, file };
// Indexed by KvPlanMethod: the names, as written in plan files, eval rows and on the command line.
inline constexpr const char* kKvPlanMethodNames[] = {"f16",   "uniform",   "kivi",     "rotated", "turbo", "progressive",
                                                     "pmkvq", "ratequant", "combined", "fixed",   "file"};

inline KvPlanMethod plan_method_of(KvMethod m) { return static_cast<KvPlanMethod>(static_cast<int>(m)); }
const char* kv_plan_method_name(KvPlanMethod m);
// Error naming every method unless `s` is one of the names above.
KvPlanMethod parse_kv_plan_method(const std::string& s);

inline const char* kv_method_name(KvMethod m) { return kv_plan_method_name(plan_method_of(m)); }
bool is_kv_method(const std::string& s);
// Error ("--kv-method 'x' is not one of ...") unless `s` names a KvMethod.
KvMethod parse_kv_method(const std::string& s);
// "f16, uniform, kivi, rotated, turbo, progressive" (for help texts and errors).
std::string kv_method_list();
// The quantizer a quantizing method writes its pages with (progressive: uniform codes). Not for f16.
QuantMethod kv_method_quantizer(KvMethod m);

}  // namespace mpkv
