#include "alloc/multiple_choice.h"

#include <glpk.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "util/error.h"
#include "util/units.h"

namespace mpkv {

namespace {

void validate(const MultipleChoiceProblem& p) {
  MPKV_CHECK(!p.cost.empty(), "multiple choice: no components");
  MPKV_CHECK(p.cost.size() == p.bytes.size(), "multiple choice: cost has " + std::to_string(p.cost.size()) +
                                                  " components but bytes has " + std::to_string(p.bytes.size()));
  for (size_t i = 0; i < p.cost.size(); ++i) {
    const std::string where = "multiple choice: component " + std::to_string(i);
    MPKV_CHECK(!p.cost[i].empty(), where + " has no choices");
    MPKV_CHECK(p.cost[i].size() == p.bytes[i].size(), where + ": cost and bytes differ in length");
    for (size_t j = 0; j < p.cost[i].size(); ++j) {
      MPKV_CHECK(std::isfinite(p.cost[i][j]), where + " choice " + std::to_string(j) + ": cost is not finite");
      MPKV_CHECK(p.bytes[i][j] >= 0, where + " choice " + std::to_string(j) + ": negative bytes");
    }
  }
}

struct ProbDeleter {
  void operator()(glp_prob* p) const { glp_delete_prob(p); }
};

// GLPK's terminal output off for the scope (it is process/thread-global state; restored after).
struct TermOutOff {
  int previous;
  TermOutOff() : previous(glp_term_out(GLP_OFF)) {}
  ~TermOutOff() { glp_term_out(previous); }
};

// One GLPK solve with the memory row bounded by glpk_budget; returns the chosen index per component.
std::vector<int> solve_with_glpk(const MultipleChoiceProblem& p, double glpk_budget) {
  // Conditioning: GLPK's tolerances are absolute-ish, so costs are shifted per component by their
  // minimum (a constant per row of the one-choice constraint: argmin unchanged) and scaled to [0, 1].
  const int n = (int)p.cost.size();
  std::vector<double> shift(n);
  double scale = 0;
  for (int i = 0; i < n; ++i) {
    shift[i] = *std::min_element(p.cost[i].begin(), p.cost[i].end());
    for (double c : p.cost[i]) scale = std::max(scale, c - shift[i]);
  }
  if (scale == 0) scale = 1;

  TermOutOff quiet;
  std::unique_ptr<glp_prob, ProbDeleter> lp(glp_create_prob());
  glp_set_obj_dir(lp.get(), GLP_MIN);
  // Rows 1..n: one choice per component (= 1). Row n+1: memory (<= budget).
  glp_add_rows(lp.get(), n + 1);
  for (int i = 0; i < n; ++i) glp_set_row_bnds(lp.get(), i + 1, GLP_FX, 1.0, 1.0);
  glp_set_row_bnds(lp.get(), n + 1, GLP_UP, 0.0, glpk_budget);

  int n_cols = 0;
  for (const auto& c : p.cost) n_cols += (int)c.size();
  glp_add_cols(lp.get(), n_cols);
  // GLPK triplets are 1-based: index 0 unused.
  std::vector<int> ia(1), ja(1);
  std::vector<double> ar(1);
  int col = 0;
  for (int i = 0; i < n; ++i) {
    for (size_t j = 0; j < p.cost[i].size(); ++j) {
      ++col;
      glp_set_col_kind(lp.get(), col, GLP_BV);
      glp_set_obj_coef(lp.get(), col, (p.cost[i][j] - shift[i]) / scale);
      ia.push_back(i + 1), ja.push_back(col), ar.push_back(1.0);
      ia.push_back(n + 1), ja.push_back(col), ar.push_back((double)p.bytes[i][j]);  // exact below 2^53
    }
  }
  glp_load_matrix(lp.get(), (int)ia.size() - 1, ia.data(), ja.data(), ar.data());

  glp_iocp parm;
  glp_init_iocp(&parm);
  parm.presolve = GLP_ON;
  parm.msg_lev = GLP_MSG_OFF;
  const int rc = glp_intopt(lp.get(), &parm);
  const int status = glp_mip_status(lp.get());
  MPKV_CHECK(rc == 0 && status == GLP_OPT, "multiple choice: GLPK found no optimum (glp_intopt returned " +
                                               std::to_string(rc) + ", status " + std::to_string(status) + ")");

  std::vector<int> choice(n, -1);
  col = 0;
  for (int i = 0; i < n; ++i) {
    for (size_t j = 0; j < p.cost[i].size(); ++j) {
      ++col;
      if (glp_mip_col_val(lp.get(), col) > 0.5) {
        MPKV_ASSERT(choice[i] < 0, "multiple choice: GLPK chose two options for component " + std::to_string(i));
        choice[i] = (int)j;
      }
    }
    MPKV_ASSERT(choice[i] >= 0, "multiple choice: GLPK chose nothing for component " + std::to_string(i));
  }
  return choice;
}

}  // namespace

int64_t min_feasible_bytes(const MultipleChoiceProblem& p) {
  validate(p);
  int64_t total = 0;
  for (const auto& b : p.bytes) total += *std::min_element(b.begin(), b.end());
  return total;
}

MultipleChoiceSolution solve_multiple_choice(const MultipleChoiceProblem& p) {
  const int64_t min_bytes = min_feasible_bytes(p);
  MPKV_CHECK(p.budget_bytes >= min_bytes,
             "infeasible KV budget: " + std::to_string(p.budget_bytes) + " bytes (" + mib(p.budget_bytes) +
                 ") is below the smallest feasible budget " + std::to_string(min_bytes) + " bytes (" + mib(min_bytes) +
                 "), every component at its smallest bit-width");

  const int n = (int)p.cost.size();
  MultipleChoiceSolution s;
  s.budget_bytes = p.budget_bytes;
  s.min_feasible_bytes = min_bytes;
  // The budget is a promise: the chosen bytes are rechecked in integers, since GLPK works in doubles
  // with relative feasibility tolerances (1e-7 of a 1e9-byte budget is 100 bytes). Should a solution
  // overshoot, GLPK's bound is tightened by the overshoot and the problem solved again.
  double glpk_budget = (double)p.budget_bytes;
  for (int attempt = 0; attempt < 4; ++attempt) {
    s.choice = solve_with_glpk(p, glpk_budget);
    s.objective = 0;
    s.bytes = 0;
    for (int i = 0; i < n; ++i) {
      s.objective += p.cost[i][s.choice[i]];
      s.bytes += p.bytes[i][s.choice[i]];
    }
    if (s.bytes <= p.budget_bytes) return s;
    glpk_budget -= (double)(s.bytes - p.budget_bytes);
  }
  throw Error("multiple choice: GLPK solutions keep exceeding the budget " + std::to_string(p.budget_bytes) +
              " bytes (last: " + std::to_string(s.bytes) + ")");
}

void to_json(nlohmann::json& j, const MultipleChoiceSolution& s) {
  j = {{"choice", s.choice},
       {"objective", s.objective},
       {"bytes", s.bytes},
       {"budget_bytes", s.budget_bytes},
       {"min_feasible_bytes", s.min_feasible_bytes}};
}

void from_json(const nlohmann::json& j, MultipleChoiceSolution& s) {
  j.at("choice").get_to(s.choice);
  j.at("objective").get_to(s.objective);
  j.at("bytes").get_to(s.bytes);
  j.at("budget_bytes").get_to(s.budget_bytes);
  j.at("min_feasible_bytes").get_to(s.min_feasible_bytes);
}

}  // namespace mpkv
