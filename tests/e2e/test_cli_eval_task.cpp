// End-to-end `mpkv eval --task` on a tiny synthetic model (the CI smoke run of the accuracy
// harness, docs/accuracy_tasks.md): f16, f16 cut at the budget and a quantized method over a task
// file write a report whose counts agree with the per-item outputs; bad input is a clear error
// that writes nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "eval/task_run.h"
#include "fixtures/tiny_model.h"
#include "gguf/gguf_reader.h"
#include "kvcache/kv_cache_factory.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "test_support.h"

namespace mpkv {
namespace {

using test::run_cli;

std::string dir() { return test::temp_dir(); }

std::string tiny_model() {
  const std::string p = dir() + "/eval_task_tiny.gguf";
  if (!std::filesystem::exists(p)) {
    test::TinyModelSpec spec;
    spec.n_layer = 2;
    test::write_tiny_model(p, spec);
  }
  return p;
}

// Six items of ~200 byte-level tokens (the tiny model's context is 256), the key at depths 0, 0.2, ..., 1.
std::string task_file() {
  const std::string p = dir() + "/eval_task.jsonl";
  std::ofstream f(p);
  for (int i = 0; i < 6; ++i) {
    std::string prompt;
    for (int k = 0; k < 9; ++k) prompt += (k == i * 8 / 5 ? "the key is 4" + std::to_string(i) + ". " : "the lazy dog sleeps. ");
    nlohmann::json j{{"id", "t" + std::to_string(i)}, {"task", "passkey"}, {"prompt", prompt + "The key is"},
                     {"answer", "4" + std::to_string(i)}, {"max_tokens", 6}, {"rule", "first_number"},
                     {"depth", i / 5.0}, {"length", 200}};
    f << j.dump() << "\n";
  }
  return p;
}

TEST(CliEvalTask, ReportAgreesWithOutputs) {
  const std::string m = tiny_model(), tasks = task_file();
  const std::string json = dir() + "/eval_task.json", outs = dir() + "/eval_task_out.jsonl";
  auto r = run_cli("eval -m " + m + " --task " + tasks + " --methods f16,f16-evict,f16-trunc,kivi:2 --budget-method kivi:2 "
                   "--parallel 4 -t 1 --json " + json + " --outputs " + outs);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("| f16 | 16 | - |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Accuracy % by depth"), std::string::npos) << r.out;
  std::ifstream f(json);
  const nlohmann::json j = nlohmann::json::parse(f);
  ASSERT_EQ(j["files"].size(), 1u);
  const auto& rows = j["files"][0]["rows"];
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0]["method"], "f16");
  EXPECT_EQ(rows[1]["method"], "f16-evict");
  EXPECT_EQ(rows[2]["method"], "f16-trunc");
  EXPECT_EQ(rows[3]["method"], "kivi-2");
  EXPECT_FALSE(rows[0].contains("paired_vs_f16"));
  // The per-item outputs: 4 methods x 6 items, their "correct" summing to each row's count.
  std::ifstream o(outs);
  std::map<std::string, int> right, seen;
  for (std::string line; std::getline(o, line);) {
    const auto it = nlohmann::json::parse(line);
    ++seen[it["method"]];
    right[it["method"]] += it["correct"].get<bool>();
    if (it["method"] == "f16") EXPECT_EQ(it["kept_tokens"], it["prompt_tokens"]);
    if (it["method"] == "f16-evict") EXPECT_LT(it["kept_tokens"], it["prompt_tokens"]);  // the 2-bit budget holds less f16
  }
  for (const auto& row : rows) {
    EXPECT_EQ(row["n"], 6);
    EXPECT_EQ(seen[row["method"]], 6);
    EXPECT_EQ(row["right"], right[row["method"]]);
    const double lo = row["wilson95"][0], hi = row["wilson95"][1], acc = row["accuracy"];
    EXPECT_LE(lo, acc);
    EXPECT_GE(hi, acc);
    if (row["method"] != "f16") {
      const auto& p = row["paired_vs_f16"];
      EXPECT_NEAR(p["difference"].get<double>(), (row["right"].get<int>() - rows[0]["right"].get<int>()) / 6.0, 1e-12);
      EXPECT_GT(row["budget_bits_per_elem"].get<double>(), 0.0);
    }
  }
  // kivi-2 is the budget itself: its peak stays within it; the f16 row holds 16-bit rows.
  EXPECT_LE(rows[3]["peak_bits_per_elem"].get<double>(), rows[3]["budget_bits_per_elem"].get<double>() + 1e-9);
  EXPECT_GT(rows[0]["peak_bits_per_elem"].get<double>(), 16.0);
  // Over the whole context: the same where the cache saw the whole prompt, less where it was cut.
  EXPECT_DOUBLE_EQ(rows[0]["context_bits_per_elem"].get<double>(), rows[0]["peak_bits_per_elem"].get<double>());
  EXPECT_LT(rows[1]["context_bits_per_elem"].get<double>(), rows[1]["peak_bits_per_elem"].get<double>());
}

// The progress callback: once per batch of `parallel` items, counting finished items and right answers
// as the result does.
TEST(CliEvalTask, ProgressIsReportedPerBatch) {
  const std::string m = tiny_model();
  std::ifstream in(task_file());
  std::stringstream text;
  text << in.rdbuf();
  const std::vector<TaskItem> items = parse_task_items(text.str(), "eval_task.jsonl");
  const Tokenizer tok = Tokenizer::from_gguf(GgufReader(m));
  std::vector<std::vector<int32_t>> prompts;
  for (const TaskItem& it : items) prompts.push_back(tok.encode(it.prompt, tok.add_bos(), false));
  auto model = Model::load(m, 256);
  const KvDims dims = model->config().kv_dims();
  const KvByteModel f16(dims, make_kv_plan(KvCacheOptions{}, dims));
  TaskMethod method;
  method.label = "f16";
  TaskRunOptions o;
  o.n_ctx = 256;
  o.parallel = 4;
  std::vector<TaskProgress> seen;
  o.on_batch = [&seen](const TaskProgress& p) { seen.push_back(p); };
  const TaskMethodResult r = run_task_method(*model, tok, items, prompts, method, f16, o);
  ASSERT_EQ(seen.size(), 2u);  // 6 items in batches of 4 and 2
  EXPECT_EQ(seen[0].done, 4u);
  EXPECT_EQ(seen[1].done, 6u);
  int right_first = 0, right = 0;
  for (size_t i = 0; i < r.items.size(); ++i) (i < 4 ? right_first : right) += r.items[i].correct;
  EXPECT_EQ(seen[0].right, right_first);
  EXPECT_EQ(seen[1].right, right_first + right);
  for (const TaskProgress& p : seen) EXPECT_EQ(p.total, 6u);
  EXPECT_LE(seen[0].seconds, seen[1].seconds);
}

TEST(CliEvalTask, BadInputIsAnErrorAndWritesNothing) {
  const std::string m = tiny_model(), tasks = task_file(), json = dir() + "/eval_task_bad.json";
  auto r = run_cli("eval -m " + m + " --task " + dir() + "/no_such_tasks.jsonl --methods f16 -t 1 --json " + json);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  r = run_cli("eval -m " + m + " --task " + tasks + " -f " + tasks + " --methods f16 -t 1 --json " + json);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("does not combine"), std::string::npos) << r.out;
  const std::string bad = dir() + "/eval_task_bad.jsonl";
  std::ofstream(bad) << "{\"id\": \"x\", \"prompt\": \"p\"}\n";
  r = run_cli("eval -m " + m + " --task " + bad + " --methods f16 --budget-method kivi:2 -t 1 --json " + json);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("eval_task_bad.jsonl:1: missing"), std::string::npos) << r.out;
  r = run_cli("eval -m " + m + " --task " + tasks + " --methods f16 --budget-method kivi:2,uniform:2 -t 1 --json " + json);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_FALSE(std::filesystem::exists(json));
}

// Rows run in separate processes come back through --import: the same counts and paired columns as
// one run, every answer scored again (a line's own "correct" is ignored), and bad imports are errors.
TEST(CliEvalTask, ImportedRowsArePairedAndRescored) {
  const std::string m = tiny_model(), tasks = task_file(), base = dir() + "/eval_task_imp";
  auto r = run_cli("eval -m " + m + " --task " + tasks + " --methods f16,kivi:2 --budget-method kivi:2 -t 1 --json " +
                   base + "_one.json --outputs " + base + "_one.jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = run_cli("eval -m " + m + " --task " + tasks + " --methods kivi:2 --budget-method kivi:2 -t 1 --outputs " + base +
              "_kivi.jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  r = run_cli("eval -m " + m + " --task " + tasks + " --methods f16 --budget-method kivi:2 -t 1 --outputs " + base +
              "_f16.jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  // The kivi row first on the command line: the f16 row still comes first in the report.
  r = run_cli("eval -m " + m + " --task " + tasks + " --budget-method kivi:2 --import " + base + "_kivi.jsonl," + base +
              "_f16.jsonl --json " + base + "_imp.json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto one = nlohmann::json::parse(std::ifstream(base + "_one.json"))["files"][0]["rows"];
  const auto imp = nlohmann::json::parse(std::ifstream(base + "_imp.json"))["files"][0]["rows"];
  ASSERT_EQ(imp.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(imp[i]["method"], one[i]["method"]);
    EXPECT_EQ(imp[i]["right"], one[i]["right"]);
    EXPECT_EQ(imp[i]["budget_bits_per_elem"], one[i]["budget_bits_per_elem"]);
  }
  EXPECT_EQ(imp[1]["paired_vs_f16"], one[1]["paired_vs_f16"]);
  // A line claiming "correct" for a wrong answer is scored wrong; one more right answer is scored right.
  std::ifstream in(base + "_kivi.jsonl");
  std::string edited, line;
  int flipped = -1;
  for (int i = 0; std::getline(in, line); ++i) {
    auto j = nlohmann::json::parse(line);
    j["method"] = "edited";
    if (i == 0) {  // "correct" is left as it was, now wrong
      flipped = j["correct"].get<bool>() ? -1 : 1;
      j["generated"] = j["correct"].get<bool>() ? std::string(" 999999") : " " + j["answer"].get<std::string>() + ".";
    }
    edited += j.dump() + "\n";
  }
  std::ofstream(base + "_edited.jsonl") << edited;
  r = run_cli("eval -m " + m + " --task " + tasks + " --budget-method kivi:2 --import " + base + "_f16.jsonl," + base +
              "_edited.jsonl --json " + base + "_ed.json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto ed = nlohmann::json::parse(std::ifstream(base + "_ed.json"))["files"][0]["rows"];
  EXPECT_EQ(ed[1]["right"].get<int>(), one[1]["right"].get<int>() + flipped);
  // Errors, and nothing written: the same row twice, a row lacking an item, another answer.
  const std::string json = base + "_bad.json";
  r = run_cli("eval -m " + m + " --task " + tasks + " --methods f16 --budget-method kivi:2 -t 1 --import " + base +
              "_f16.jsonl --json " + json);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("two rows named 'f16'"), std::string::npos) << r.out;
  std::ifstream in2(base + "_kivi.jsonl");
  std::string head, wrong_answer;
  for (int i = 0; std::getline(in2, line); ++i) {
    if (i < 5) head += line + "\n";
    auto j = nlohmann::json::parse(line);
    if (i == 2) j["answer"] = "1";
    wrong_answer += j.dump() + "\n";
  }
  std::ofstream(base + "_short.jsonl") << head;
  std::ofstream(base + "_wrong.jsonl") << wrong_answer;
  r = run_cli("eval -m " + m + " --task " + tasks + " --budget-method kivi:2 --import " + base + "_short.jsonl --json " + json);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("lacks item 't5'"), std::string::npos) << r.out;
  r = run_cli("eval -m " + m + " --task " + tasks + " --budget-method kivi:2 --import " + base + "_wrong.jsonl --json " + json);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("_wrong.jsonl:3: item 't2' has another answer"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(json));
}

}  // namespace
}  // namespace mpkv
