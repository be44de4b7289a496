#include "kvcache/kv_method.h"

#include <iterator>

#include "util/error.h"

namespace mpkv {

static_assert(std::size(kKvPlanMethodNames) == static_cast<size_t>(KvPlanMethod::file) + 1, "one name per method");

const char* kv_plan_method_name(KvPlanMethod m) {
  const auto i = static_cast<size_t>(m);
  MPKV_ASSERT(i < std::size(kKvPlanMethodNames), "KvPlanMethod out of range");
  return kKvPlanMethodNames[i];
}

KvPlanMethod parse_kv_plan_method(const std::string& s) {
  for (size_t i = 0; i < std::size(kKvPlanMethodNames); ++i)
    if (s == kKvPlanMethodNames[i]) return static_cast<KvPlanMethod>(i);
  std::string all;
  for (const char* n : kKvPlanMethodNames) all += (all.empty() ? "" : ", ") + std::string(n);
  throw Error("unknown plan method '" + s + "' (expected one of " + all + ")");
}

bool is_kv_method(const std::string& s) {
  for (KvMethod m : kKvMethods)
    if (s == kv_method_name(m)) return true;
  return false;
}

KvMethod parse_kv_method(const std::string& s) {
  for (KvMethod m : kKvMethods)
    if (s == kv_method_name(m)) return m;
  throw Error("--kv-method '" + s + "' is not one of " + kv_method_list());
}

std::string kv_method_list() {
  std::string s;
  for (KvMethod m : kKvMethods) s += (s.empty() ? "" : ", ") + std::string(kv_method_name(m));
  return s;
}

QuantMethod kv_method_quantizer(KvMethod m) {
  switch (m) {
    case KvMethod::uniform:
    case KvMethod::progressive: return QuantMethod::uniform;
    case KvMethod::kivi: return QuantMethod::kivi;
    case KvMethod::rotated: return QuantMethod::rotated;
    case KvMethod::turbo: return QuantMethod::turbo;
    case KvMethod::f16: break;
  }
  MPKV_ASSERT(false, "f16 has no quantizer");
  return QuantMethod::uniform;
}

}  // namespace mpkv
