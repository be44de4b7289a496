#include "eval/eval_methods.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "util/error.h"

namespace mpkv {

std::string format_bits(double b) {
  char s[32];
  std::snprintf(s, sizeof s, "%g", b);
  return s;
}

namespace {

bool is_half_step(double b) { return std::fabs(b * 2 - std::round(b * 2)) < 1e-9; }

EvalMethod fixed_bits(const std::string& name, double b) {
  EvalMethod m;
  m.method = name;
  m.bits = b;
  m.kv.method = parse_kv_method(name);
  const int lo = (int)std::floor(b + 1e-9);
  if (std::fabs(b - lo) < 1e-9) {
    m.kv.bits = lo;
    m.label = name + "-" + format_bits(b);
  } else {
    m.kv.k_bits = lo + 1;
    m.kv.v_bits = lo;
    m.kv.bits = lo;
    m.label = name + "-" + format_bits(b) + " (K" + std::to_string(lo + 1) + "/V" + std::to_string(lo) + ")";
  }
  return m;
}

bool on_ladder(int b) { return b == 1 || b == 2 || b == 4 || b == 8; }

// "plan:NAME": the plan file <plan_dir>/NAME.json; bits from the number after NAME's last '_'.
EvalMethod named_plan(const std::string& name, const std::string& plan_dir) {
  MPKV_CHECK(!name.empty() && name.find('/') == std::string::npos, "eval: plan:NAME needs a file name without '/'");
  const std::string file = plan_dir + "/" + name + ".json";
  MPKV_CHECK(std::filesystem::exists(file), "eval: plan " + file + " is missing (scripts/ablation.sh makes the ablation plans)");
  EvalMethod m;
  m.method = "plan";
  m.label = name;
  m.kv.plan_file = file;
  const size_t u = name.rfind('_');
  m.bits = u == std::string::npos ? 0 : std::strtod(name.c_str() + u + 1, nullptr);
  return m;
}

// The fixed K/V splits at average bits b (keys first, more key bits first), widths from RateQuant's
// candidates so each split holds the bytes of the calibrated plans at b.
std::vector<std::pair<int, int>> kv_splits(double b) {
  static const int widths[] = {8, 4, 3, 2};
  std::vector<std::pair<int, int>> out;
  for (int k : widths)
    for (int v : widths)
      if (std::fabs(k + v - 2 * b) < 1e-9) out.push_back({k, v});
  return out;
}

// "split" at b: one method per split, the plan <plan_dir>/fixed_k<K>v<V>.json each.
void add_splits(double b, const std::string& plan_dir, const std::string& model_path, EvalMatrix& r) {
  const auto splits = kv_splits(b);
  if (splits.empty()) {
    r.skipped.push_back("split-" + format_bits(b) + ": no K/V split of the widths 2, 3, 4, 8 averages " + format_bits(b));
    return;
  }
  for (const auto& [k, v] : splits) {
    const std::string kv = "K" + std::to_string(k) + "/V" + std::to_string(v);
    const std::string file = plan_dir + "/fixed_k" + std::to_string(k) + "v" + std::to_string(v) + ".json";
    MPKV_CHECK(std::filesystem::exists(file),
               "eval: plan " + file + " is missing; make it with: mpkv calibrate -m " + model_path +
                   " --method fixed --k-bits " + std::to_string(k) + " --v-bits " + std::to_string(v) +
                   " --report-in REPORT -o " + file + " (REPORT: the calibration the folder's plans came from)");
    EvalMethod m;
    m.method = "split";
    m.bits = b;
    m.label = "split-" + format_bits(b) + " (" + kv + ")";
    m.kv.plan_file = file;
    r.methods.push_back(m);
  }
}

}  // namespace

EvalMatrix eval_matrix(const std::vector<std::string>& methods, const std::vector<double>& bits,
                       const std::string& plan_dir, const std::string& model_path) {
  MPKV_CHECK(!methods.empty(), "eval: no methods");
  for (double b : bits)
    MPKV_CHECK(b >= 1 && b < 16 && is_half_step(b), "eval: bits " + format_bits(b) + " must be a multiple of 0.5 in [1, 16)");
  EvalMatrix r;
  bool f16_done = false;
  for (const std::string& spec : methods) {
    // "name:b" runs that method at b alone instead of at every entry of `bits`.
    const size_t colon = spec.find(':');
    const std::string name = spec.substr(0, colon);
    if (name == "plan") {
      MPKV_CHECK(colon != std::string::npos, "eval: write plan:NAME for <plan_dir>/NAME.json");
      r.methods.push_back(named_plan(spec.substr(colon + 1), plan_dir));
      continue;
    }
    std::vector<double> own = bits;
    if (colon != std::string::npos) {
      char* end = nullptr;
      const std::string b = spec.substr(colon + 1);
      const double v = std::strtod(b.c_str(), &end);
      MPKV_CHECK(!b.empty() && end && *end == '\0', "eval: bad bits in '" + spec + "' (e.g. kivi:2)");
      MPKV_CHECK(v >= 1 && v < 16 && is_half_step(v), "eval: bits " + b + " must be a multiple of 0.5 in [1, 16)");
      own = {v};
    }
    if (name == "f16") {
      if (!f16_done) {
        EvalMethod m;
        m.method = m.label = "f16";
        m.bits = 16;
        r.methods.push_back(m);
      }
      f16_done = true;
      continue;
    }
    MPKV_CHECK(!own.empty(), "eval: no bits given for method " + name);
    for (double b : own) {
      if (name == "uniform" || name == "kivi" || name == "rotated" || name == "turbo") {
        r.methods.push_back(fixed_bits(name, b));
      } else if (name == "progressive") {
        const int ib = (int)std::lround(b);
        if (std::fabs(b - ib) < 1e-9 && on_ladder(ib)) {
          r.methods.push_back(fixed_bits(name, b));
        } else if (std::fabs(b - ib) < 1e-9 && (ib == 3 || ib == 6)) {
          EvalMethod m = fixed_bits(name, b);
          m.kv.k_bits = ib == 3 ? 4 : 8;
          m.kv.v_bits = ib == 3 ? 2 : 4;
          m.label = name + "-" + format_bits(b) + " (K" + std::to_string(m.kv.k_bits) + "/V" + std::to_string(m.kv.v_bits) + ")";
          r.methods.push_back(m);
        } else {
          r.skipped.push_back(name + "-" + format_bits(b) +
                              ": progressive final bits lie on 16 -> 8 -> 4 -> 2 -> 1 for keys and values; this average "
                              "needs a per-component plan (combined)");
        }
      } else if (name == "pmkvq" || name == "ratequant" || name == "combined") {
        const std::string file = plan_dir + "/" + name + "_" + format_bits(b) + ".json";
        MPKV_CHECK(std::filesystem::exists(file),
                   "eval: plan " + file + " is missing; make it with: mpkv calibrate -m " + model_path + " --method " +
                       name + " --avg-bits " + format_bits(b) + " -o " + file);
        EvalMethod m;
        m.method = name;
        m.bits = b;
        m.label = name + "-" + format_bits(b);
        m.kv.plan_file = file;
        r.methods.push_back(m);
      } else if (name == "split") {
        add_splits(b, plan_dir, model_path, r);
      } else {
        throw Error("eval: unknown method '" + name +
                    "' (f16, uniform, kivi, rotated, turbo, progressive, pmkvq, ratequant, combined, split, plan:NAME)");
      }
    }
  }
  return r;
}

}  // namespace mpkv
