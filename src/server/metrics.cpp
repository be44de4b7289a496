#include "server/metrics.h"

#include <algorithm>
#include <cstdio>

namespace mpkv::server {

namespace {
// Bucket upper bounds in seconds: from 1 ms (TTFT, inter-token) or 0.1 s (whole requests) to
// minutes, so both a 2-core CPU run and a fast machine land inside the range.
std::vector<double> latency_bounds() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> request_bounds() {
  return {0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0};
}

// Tokens per request: vLLM's 1-2-5 series.
std::vector<double> token_bounds() {
  std::vector<double> b;
  for (double decade = 1; decade <= 100000; decade *= 10)
    for (double m : {1, 2, 5}) b.push_back(m * decade);
  return b;
}

std::string num(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.10g", x);
  return buf;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

// One sample: name{labels} value. `labels` is the text inside the braces.
void sample(std::string& out, const std::string& name, const std::string& labels, double value) {
  out += name + "{" + labels + "} " + num(value) + "\n";
}

void metric(std::string& out, const std::string& name, const char* type, const char* help, const std::string& labels,
            double value) {
  header(out, name, type, help);
  sample(out, name, labels, value);
}

void histogram(std::string& out, const std::string& name, const char* help, const std::string& labels,
               const Histogram::Snapshot& h) {
  header(out, name, "histogram", help);
  for (size_t i = 0; i <= h.upper_bounds.size(); ++i) {
    const std::string le = i < h.upper_bounds.size() ? num(h.upper_bounds[i]) : "+Inf";
    sample(out, name + "_bucket", labels + ",le=\"" + le + "\"", static_cast<double>(h.cumulative[i]));
  }
  sample(out, name + "_sum", labels, h.sum);
  sample(out, name + "_count", labels, static_cast<double>(h.cumulative.back()));
}

// Structured outputs (docs/structured_outputs.md, "Metrics"): constrained requests, the grammar
// compiler's work and cache, and the masks' cost per step.
void grammar_metrics(std::string& out, const EngineMetrics& m, const std::string& L) {
  const GrammarCompilerStats& g = m.grammar_compile;
  const auto d = [](uint64_t x) { return static_cast<double>(x); };
  metric(out, "mpkv:constrained_requests_total", "counter", "Engine requests with a grammar (one per choice).", L,
         d(m.constrained_requests_total));
  metric(out, "mpkv:grammar_compile_requests_total", "counter", "Constraints asked of the grammar compiler.", L,
         d(g.requests_total));
  metric(out, "mpkv:grammar_cache_hits_total", "counter", "Constraints answered from the compiled-grammar cache.", L,
         d(g.cache_hits_total));
  metric(out, "mpkv:grammar_compiles_total", "counter", "Grammar compilations finished (successful or not).", L,
         d(g.compiles_total));
  metric(out, "mpkv:grammar_compile_seconds_total", "counter", "Time spent compiling grammars.", L,
         g.compile_seconds_total);
  metric(out, "mpkv:grammar_compile_errors_total", "counter", "Constraints refused (bad, too large, too slow, busy).", L,
         d(g.errors_total));
  metric(out, "mpkv:grammar_compile_timeouts_total", "counter", "Constraints refused for compiling past the timeout.", L,
         d(g.timeouts_total));
  metric(out, "mpkv:grammar_cache_entries", "gauge", "Compiled grammars in the cache.", L, d(g.cached));
  metric(out, "mpkv:grammar_mask_steps_total", "counter", "Engine steps that filled at least one token mask.", L,
         d(m.grammar_mask_steps_total));
  metric(out, "mpkv:grammar_mask_rows_total", "counter", "Token masks filled.", L, d(m.grammar_mask_rows_total));
  metric(out, "mpkv:grammar_mask_seconds_total", "counter",
         "Wall time of the steps' mask phase (divide by grammar_mask_steps_total: per step).", L, m.grammar_mask_seconds_total);
  metric(out, "mpkv:grammar_check_first_rows_total", "counter",
         "Constrained rows that drew their token without the grammar's mask first (check-first sampling).", L,
         d(m.grammar_check_first_rows_total));
  metric(out, "mpkv:grammar_mask_skipped_rows_total", "counter",
         "Of those, rows whose draw the grammar accepted: no mask filled.", L, d(m.grammar_mask_skipped_rows_total));
}

// The prefix cache (docs/serving.md "Prefix cache"): vLLM's token counters and mpkv's state.
void prefix_cache_metrics(std::string& out, const EngineMetrics& m, const std::string& L) {
  const PrefixCacheStats& p = m.prefix_cache;
  metric(out, "vllm:prefix_cache_queries", "counter", "Prompt tokens looked up in the prefix cache (first admissions).", L,
         static_cast<double>(m.prefix_cache_queries_total));
  metric(out, "vllm:prefix_cache_hits", "counter", "Prompt tokens read from the prefix cache.", L,
         static_cast<double>(m.prefix_cache_hits_total));
  metric(out, "mpkv:prefix_cache_bytes", "gauge", "KV bytes of cached blocks no request holds (evictable).", L,
         static_cast<double>(p.cold_bytes));
  metric(out, "mpkv:prefix_cache_blocks", "gauge", "Cached blocks (one page position of every layer).", L,
         static_cast<double>(p.blocks));
  header(out, "mpkv:prefix_cache_pages", "gauge", "Cached pages by their highest current bits.");
  for (const auto& [bits, n] : p.pages_by_bits)
    sample(out, "mpkv:prefix_cache_pages", "bits=\"" + std::to_string(bits) + "\"," + L, static_cast<double>(n));
  metric(out, "mpkv:prefix_cache_evictions_total", "counter", "Cached blocks evicted.", L, static_cast<double>(p.evictions));
  metric(out, "mpkv:prefix_cache_shrinks_total", "counter", "Block halvings of cached pages no request held.", L,
         static_cast<double>(p.cold_halvings));
}

// A counter of whole units, printed exactly (num() keeps 10 digits; byte totals pass 1e10).
void count_metric(std::string& out, const std::string& name, const char* help, const std::string& labels, uint64_t v) {
  header(out, name, "counter", help);
  out += name + "{" + labels + "} " + std::to_string(v) + "\n";
}

// Decode steps' roofline counters and the probed machine limits (docs/serving.md "Roofline
// counters"): a report divides the byte and multiply-add totals by the steps' seconds and by the limits.
void roofline_metrics(std::string& out, const EngineMetrics& m, const MachineLimitGauges& g, const std::string& L) {
  const DecodeStepTotals& d = m.decode;
  count_metric(out, "mpkv:decode_steps_total", "Engine steps whose batch held decode tokens only.", L, d.steps);
  count_metric(out, "mpkv:decode_step_tokens_total", "Tokens of those decode steps.", L, d.tokens);
  metric(out, "mpkv:decode_step_seconds_total", "counter", "Wall time of those decode steps (scheduling to callbacks).",
         L, d.seconds);
  count_metric(out, "mpkv:decode_step_weight_bytes_total",
               "Weight bytes those steps' forward calls read (every multiplied matrix once per step).", L,
               d.work.weight_bytes);
  header(out, "mpkv:decode_step_kv_bytes_total", "counter",
         "KV page bytes those steps' queries read, by the blocks' current bits (codes + scales + zeros; 16: fp16).");
  for (const auto& [bits, bytes] : d.work.kv_page_bytes_by_bits)
    out += "mpkv:decode_step_kv_bytes_total{bits=\"" + std::to_string(bits) + "\"," + L + "} " + std::to_string(bytes) +
           "\n";
  count_metric(out, "mpkv:decode_step_kv_fp16_row_bytes_total",
               "KV bytes of fp16 sink and window rows those steps' queries read.", L, d.work.kv_fp16_row_bytes);
  count_metric(out, "mpkv:decode_step_macs_total",
               "Multiply-adds of those steps (weight rows x columns per token + attention).", L, d.work.macs);
  metric(out, "mpkv:machine_read_bytes_per_second", "gauge",
         "Read bandwidth probed at startup with the server's threads (0: not probed; --probe-machine-limits).", L,
         g.read_bytes_per_s);
  metric(out, "mpkv:machine_int8_macs_per_second", "gauge",
         "int8 multiply-add peak probed at startup: one core's best probe x threads (0: not probed).", L,
         g.int8_macs_per_s);
  metric(out, "mpkv:machine_probe_threads", "gauge", "Threads of the startup probes (0: not probed).", L, g.threads);
}

size_t reason_index(FinishReason r) {
  switch (r) {
    case FinishReason::stop: return 0;
    case FinishReason::length:
    case FinishReason::context: return 1;
    case FinishReason::abort: return 2;
    case FinishReason::none: break;
  }
  return 3;
}
}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double x) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), x) - bounds_.begin();  // first bound >= x
  std::lock_guard lock(mu_);
  ++counts_[i];
  sum_ += x;
}

Histogram::Snapshot Histogram::snapshot() const {
  std::lock_guard lock(mu_);
  Snapshot s{bounds_, {}, sum_};
  uint64_t acc = 0;
  for (uint64_t c : counts_) s.cumulative.push_back(acc += c);
  return s;
}

std::string escape_label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

ServerMetrics::ServerMetrics(std::string model_name)
    : model_label_("model_name=\"" + escape_label_value(model_name) + "\""),
      ttft_(latency_bounds()),
      itl_(latency_bounds()),
      e2e_(request_bounds()),
      queue_(request_bounds()),
      prefill_(request_bounds()),
      decode_(request_bounds()),
      inference_(request_bounds()),
      prompt_tokens_(token_bounds()),
      generation_tokens_(token_bounds()) {}

void ServerMetrics::on_output(RequestTiming& t, const RequestOutput& out, std::chrono::steady_clock::time_point now) {
  if (!out.tokens.empty()) {
    if (t.has_tokens) {
      const double gap = std::chrono::duration<double>(now - t.last_tokens).count() / out.tokens.size();
      for (size_t i = 0; i < out.tokens.size(); ++i) itl_.observe(gap);
    }
    t.last_tokens = now;
    t.has_tokens = true;
  }
  if (!out.finished) return;
  {
    std::lock_guard lock(mu_);
    ++finished_[reason_index(out.reason)];
  }
  if (out.reason == FinishReason::abort) return;  // its latencies measure the client, not the server
  const RequestStats& s = out.stats;
  if (s.n_generated > 0) {
    ttft_.observe(s.first_token_seconds);
    prefill_.observe(s.first_token_seconds - s.queue_seconds);
    decode_.observe(s.total_seconds - s.first_token_seconds);
  }
  e2e_.observe(s.total_seconds);
  queue_.observe(s.queue_seconds);
  inference_.observe(s.total_seconds - s.queue_seconds);
  prompt_tokens_.observe(s.n_prompt_tokens);
  generation_tokens_.observe(s.n_generated);
}

void ServerMetrics::set_machine_limits(const MachineLimitGauges& g) {
  std::lock_guard lock(mu_);
  limits_ = g;
}

bool ServerMetrics::count_unknown_field(const std::string& name) {
  std::lock_guard lock(mu_);
  if (auto it = unknown_fields_.find(name); it != unknown_fields_.end()) {
    ++it->second;
    return false;
  }
  if (unknown_fields_.size() < kMaxUnknownFieldLabels) {
    unknown_fields_[name] = 1;
    return true;
  }
  ++unknown_other_;
  if (unknown_seen_.size() >= 4096) return false;
  return unknown_seen_.insert(name).second;
}

std::string ServerMetrics::render(const EngineMetrics& m) const {
  const std::string& L = model_label_;
  std::string out;
  metric(out, "vllm:num_requests_running", "gauge", "Requests running (admitted, holding KV pages).", L, m.running);
  metric(out, "vllm:num_requests_waiting", "gauge", "Requests waiting for admission.", L, m.waiting);
  const double usage = m.kv_budget_bytes ? static_cast<double>(m.kv_bytes_used) / m.kv_budget_bytes : 0.0;
  metric(out, "vllm:kv_cache_usage_perc", "gauge", "KV bytes in use / KV budget (0..1; 0 without a budget).", L, usage);
  metric(out, "vllm:num_preemptions_total", "counter", "Requests preempted (pages freed, recomputed later).", L,
         static_cast<double>(m.preemptions_total));
  metric(out, "vllm:prompt_tokens_total", "counter", "Prompt tokens processed.", L, static_cast<double>(m.prompt_tokens_total));
  metric(out, "vllm:generation_tokens_total", "counter", "Tokens generated.", L,
         static_cast<double>(m.generation_tokens_total));
  {
    std::lock_guard lock(mu_);
    header(out, "vllm:request_success_total", "counter", "Finished requests by finish reason.");
    const char* names[] = {"stop", "length", "abort"};
    for (size_t i = 0; i < 3; ++i)
      sample(out, "vllm:request_success_total", "finished_reason=\"" + std::string(names[i]) + "\"," + L,
             static_cast<double>(finished_[i]));
  }
  {
    std::lock_guard lock(mu_);
    header(out, "mpkv:request_unknown_fields_total", "counter",
           "Requests' top-level fields this server does not read (accepted, ignored), by name; other: past 64 names.");
    for (const auto& [name, n] : unknown_fields_)
      sample(out, "mpkv:request_unknown_fields_total", "field=\"" + escape_label_value(name) + "\"," + L,
             static_cast<double>(n));
    sample(out, "mpkv:request_unknown_fields_total", "field=\"other\"," + L, static_cast<double>(unknown_other_));
  }
  histogram(out, "vllm:time_to_first_token_seconds", "Time to first token.", L, ttft_.snapshot());
  const Histogram::Snapshot itl = itl_.snapshot();
  histogram(out, "vllm:inter_token_latency_seconds", "Time between successive output tokens.", L, itl);
  histogram(out, "vllm:time_per_output_token_seconds", "vLLM's older name of vllm:inter_token_latency_seconds.", L, itl);
  histogram(out, "vllm:e2e_request_latency_seconds", "Request latency, arrival to last token.", L, e2e_.snapshot());
  histogram(out, "vllm:request_queue_time_seconds", "Time from arrival to first scheduled.", L, queue_.snapshot());
  histogram(out, "vllm:request_prefill_time_seconds", "Time from first scheduled to the first token.", L,
            prefill_.snapshot());
  histogram(out, "vllm:request_decode_time_seconds", "Time from the first token to the last.", L, decode_.snapshot());
  histogram(out, "vllm:request_inference_time_seconds", "Time from first scheduled to the last token.", L,
            inference_.snapshot());
  histogram(out, "vllm:request_prompt_tokens", "Prompt tokens per finished request.", L, prompt_tokens_.snapshot());
  histogram(out, "vllm:request_generation_tokens", "Generated tokens per finished request.", L,
            generation_tokens_.snapshot());
  metric(out, "mpkv:kv_bytes_used", "gauge", "KV cache bytes in use over all sequences.", L,
         static_cast<double>(m.kv_bytes_used));
  metric(out, "mpkv:kv_budget_bytes", "gauge", "KV cache byte budget (0: none).", L, static_cast<double>(m.kv_budget_bytes));
  metric(out, "mpkv:kv_tokens", "gauge", "Token positions held in the KV cache over all sequences.", L,
         static_cast<double>(m.kv_tokens));
  metric(out, "mpkv:kv_effective_bits", "gauge", "Stored bits per cached K/V element, every byte counted (0: empty).", L,
         m.kv_effective_bits);
  header(out, "mpkv:kv_page_shrinks_total", "counter", "Page block halvings by bits before and after.");
  for (const auto& [bits, n] : m.page_shrinks)
    sample(out, "mpkv:kv_page_shrinks_total",
           "from=\"" + std::to_string(bits.first) + "\",to=\"" + std::to_string(bits.second) + "\"," + L,
           static_cast<double>(n));
  prefix_cache_metrics(out, m, L);
  grammar_metrics(out, m, L);
  MachineLimitGauges limits;
  {
    std::lock_guard lock(mu_);
    limits = limits_;
  }
  roofline_metrics(out, m, limits, L);
  return out;
}

}  // namespace mpkv::server
