// The OpenAI request parser: every accepted shape, and every error class giving ApiError(400)
// with the offending field in `param`.
#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/openai_request.h"

using namespace mpkv::server;

namespace {
CompletionRequest chat(const std::string& body) { return parse_completion_request(Endpoint::chat, body); }
CompletionRequest completion(const std::string& body) { return parse_completion_request(Endpoint::completions, body); }

// The param of the 400 the body gets ("<no error>" when it parses).
std::string error_param(Endpoint e, const std::string& body) {
  try {
    parse_completion_request(e, body);
  } catch (const ApiError& err) {
    EXPECT_EQ(err.status(), 400) << body;
    EXPECT_EQ(err.type(), "invalid_request_error");
    return err.param();
  }
  return "<no error>";
}
const std::string kMsg = R"("messages": [{"role": "user", "content": "hi"}])";
std::string chat_with(const std::string& extra) { return "{" + kMsg + ", " + extra + "}"; }
}  // namespace

TEST(ServerRequest, ChatDefaultsAndFields) {
  CompletionRequest r = chat("{" + kMsg + "}");
  EXPECT_EQ(r.endpoint, Endpoint::chat);
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.messages[0].content, "hi");
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.temperature, 1.0f);
  EXPECT_EQ(r.top_p, 1.0f);
  EXPECT_EQ(r.top_k, 0);
  EXPECT_FALSE(r.seed.has_value());
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.top_logprobs, -1);

  r = chat(chat_with(R"("model": "x", "max_tokens": 7, "temperature": 0, "top_p": 0.5, "top_k": 3, "seed": -1,
                        "stop": ["a", "bc"], "stream": true, "stream_options": {"include_usage": true},
                        "logprobs": true, "top_logprobs": 2, "n": 1, "unknown_field": {"x": 1})"));
  EXPECT_EQ(r.model, "x");
  EXPECT_EQ(*r.max_tokens, 7);
  EXPECT_EQ(r.temperature, 0.0f);
  EXPECT_EQ(r.top_p, 0.5f);
  EXPECT_EQ(r.top_k, 3);
  EXPECT_EQ(*r.seed, ~uint64_t{0});  // int64 -1 reinterpreted
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.top_logprobs, 2);
}

TEST(ServerRequest, MaxCompletionTokensWins) {
  EXPECT_EQ(*chat(chat_with(R"("max_tokens": 5, "max_completion_tokens": 9)")).max_tokens, 9);
}

TEST(ServerRequest, MessageContentShapes) {
  CompletionRequest r = chat(R"({"messages": [
      {"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null},
      {"role": "user", "content": ""}]})");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "a\nb");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.messages[3].content, "");
}

TEST(ServerRequest, CompletionPromptAndLogprobs) {
  CompletionRequest r = completion(R"({"prompt": "Once", "logprobs": 3, "stop": "x"})");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "Once");
  EXPECT_FALSE(r.prompts[0].is_tokens);
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(completion(R"({"prompt": ["only one"]})").prompts.at(0).text, "only one");
  EXPECT_EQ(completion(R"({"prompt": "p", "logprobs": null})").top_logprobs, -1);
}

TEST(ServerRequest, MalformedBodies) {
  for (const char* body : {"", "{", "nul", "[1,2]", "\"text\"", "42", "{\"messages\": [}"})
    EXPECT_EQ(error_param(Endpoint::chat, body), "") << body;
}

TEST(ServerRequest, MissingOrBadMessages) {
  EXPECT_EQ(error_param(Endpoint::chat, "{}"), "messages");
  EXPECT_EQ(error_param(Endpoint::chat, R"({"messages": []})"), "messages");
  EXPECT_EQ(error_param(Endpoint::chat, R"({"messages": "hi"})"), "messages");
  EXPECT_EQ(error_param(Endpoint::chat, R"({"messages": [1]})"), "messages[0]");
  EXPECT_EQ(error_param(Endpoint::chat, R"({"messages": [{"content": "x"}]})"), "messages[0].role");
  EXPECT_EQ(error_param(Endpoint::chat, R"({"messages": [{"role": "tool", "content": "x"}]})"), "messages[0].tool_call_id");
  EXPECT_EQ(error_param(Endpoint::chat, R"({"messages": [{"role": "user"}]})"), "messages[0].content");
  EXPECT_EQ(error_param(Endpoint::chat, R"({"messages": [{"role": "user", "content": 5}]})"), "messages[0].content");
  EXPECT_EQ(error_param(Endpoint::chat, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"),
            "messages[0].content[0]");
  EXPECT_EQ(error_param(Endpoint::chat, R"({"messages": [{"role": "user", "content": [{"type": "text", "text": 1}]}]})"),
            "messages[0].content[0].text");
}

// OpenAI's four prompt forms: text, texts, token ids, lists of token ids (mixed lists too).
TEST(ServerRequest, PromptShapes) {
  CompletionRequest r = completion(R"({"prompt": [1, 2, 3]})");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_TRUE(r.prompts[0].is_tokens);
  EXPECT_EQ(r.prompts[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  r = completion(R"({"prompt": ["a", [7, 8], "b"]})");
  ASSERT_EQ(r.prompts.size(), 3u);
  EXPECT_EQ(r.prompts[0].text, "a");
  EXPECT_EQ(r.prompts[1].tokens, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(r.prompts[2].text, "b");
  EXPECT_EQ(completion(R"({"prompt": [[5], [6]]})").prompts.size(), 2u);
  std::string many = R"({"prompt": [)";
  for (int i = 0; i <= kMaxPrompts; ++i) many += std::string(i ? "," : "") + "\"x\"";
  EXPECT_EQ(error_param(Endpoint::completions, many + "]}"), "prompt");  // kMaxPrompts + 1
  EXPECT_EQ(error_param(Endpoint::completions, "{}"), "prompt");
  EXPECT_EQ(error_param(Endpoint::completions, R"({"prompt": []})"), "prompt");
  EXPECT_EQ(error_param(Endpoint::completions, R"({"prompt": 5})"), "prompt");
  EXPECT_EQ(error_param(Endpoint::completions, R"({"prompt": [1, -2]})"), "prompt");
  EXPECT_EQ(error_param(Endpoint::completions, R"({"prompt": [1, 2.5]})"), "prompt");
  EXPECT_EQ(error_param(Endpoint::completions, R"({"prompt": [1, "a"]})"), "prompt");
  EXPECT_EQ(error_param(Endpoint::completions, R"({"prompt": [1, 2147483648]})"), "prompt");
  EXPECT_EQ(error_param(Endpoint::completions, R"({"prompt": ["a", [1, -1]]})"), "prompt[1]");
  EXPECT_EQ(error_param(Endpoint::completions, R"({"prompt": ["a", 5]})"), "prompt");
}

TEST(ServerRequest, WrongTypes) {
  const std::pair<const char*, const char*> cases[] = {
      {R"("max_tokens": "5")", "max_tokens"},     {R"("max_tokens": 5.5)", "max_tokens"},
      {R"("temperature": "hot")", "temperature"}, {R"("top_p": true)", "top_p"},
      {R"("top_k": 1.5)", "top_k"},               {R"("seed": "1")", "seed"},
      {R"("stop": 5)", "stop"},                   {R"("stop": [1])", "stop"},
      {R"("stream": "yes")", "stream"},           {R"("logprobs": 1)", "logprobs"},
      {R"("model": 3)", "model"},                 {R"("stream": true, "stream_options": 1)", "stream_options"},
      {R"("stream": true, "stream_options": {"include_usage": "y"})", "include_usage"},
  };
  for (const auto& [extra, param] : cases) EXPECT_EQ(error_param(Endpoint::chat, chat_with(extra)), param) << extra;
}

TEST(ServerRequest, OutOfRange) {
  const std::pair<const char*, const char*> cases[] = {
      {R"("max_tokens": 0)", "max_tokens"},
      {R"("max_tokens": -3)", "max_tokens"},
      {R"("max_tokens": 4294967296)", "max_tokens"},
      {R"("max_completion_tokens": 0)", "max_completion_tokens"},
      {R"("temperature": -0.1)", "temperature"},
      {R"("temperature": 2.01)", "temperature"},
      {R"("top_p": 0)", "top_p"},
      {R"("top_p": 1.5)", "top_p"},
      {R"("top_k": -2)", "top_k"},
      {R"("seed": 18446744073709551615)", "seed"},  // beyond int64
      {R"("stop": ["a", "b", "c", "d", "e"])", "stop"},
      {R"("stop": "")", "stop"},
      {R"("logprobs": true, "top_logprobs": 21)", "top_logprobs"},
      {R"("logprobs": true, "top_logprobs": -1)", "top_logprobs"},
      {R"("top_logprobs": 2)", "top_logprobs"},  // needs logprobs: true
      {R"("stream_options": {"include_usage": true})", "stream_options"},  // needs stream: true
  };
  for (const auto& [extra, param] : cases) EXPECT_EQ(error_param(Endpoint::chat, chat_with(extra)), param) << extra;
  EXPECT_EQ(error_param(Endpoint::completions, R"({"prompt": "p", "logprobs": 21})"), "logprobs");
  EXPECT_EQ(error_param(Endpoint::completions, R"({"prompt": "p", "logprobs": true})"), "logprobs");
}

TEST(ServerRequest, UnsupportedFeaturesAreRefusedNotIgnored) {
  EXPECT_EQ(error_param(Endpoint::chat, chat_with(R"("n": 17)")), "n");  // at most kMaxN
  EXPECT_EQ(error_param(Endpoint::chat, chat_with(R"("n": 0)")), "n");
  EXPECT_EQ(error_param(Endpoint::completions, R"({"prompt": ["a", "b", "c", "d", "e"], "n": 13})"), "n");  // 65 choices
  EXPECT_EQ(error_param(Endpoint::completions, R"({"prompt": "p", "n": 4, "best_of": 5})"), "best_of");
  EXPECT_EQ(error_param(Endpoint::completions, R"({"prompt": ["a", "b", "c", "d"], "n": 16, "best_of": 16})"), "<no error>");
  EXPECT_EQ(chat(chat_with(R"("n": 16)")).n, 16);
  EXPECT_EQ(error_param(Endpoint::chat, chat_with(R"("tools": [{"type": "function"}])")), "tools[0].function");
  EXPECT_EQ(error_param(Endpoint::chat, chat_with(R"("response_format": {"type": "yaml"})")), "response_format.type");
  EXPECT_EQ(error_param(Endpoint::chat, chat_with(R"("echo": true)")), "echo");  // completions only
  EXPECT_EQ(error_param(Endpoint::completions, R"({"prompt": "p", "best_of": 3})"), "best_of");
  EXPECT_EQ(error_param(Endpoint::completions, R"({"prompt": "p", "suffix": "end"})"), "suffix");
  // Their neutral values are fine.
  EXPECT_EQ(error_param(Endpoint::chat, chat_with(R"("n": 1, "presence_penalty": 0, "frequency_penalty": 0.0,
                                                    "logit_bias": {}, "tools": [], "response_format": {"type": "text"})")),
            "<no error>");
}

TEST(ServerRequest, NullMeansAbsent) {
  CompletionRequest r = chat(chat_with(R"("max_tokens": null, "temperature": null, "stop": null, "seed": null)"));
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.temperature, 1.0f);
  EXPECT_TRUE(r.stop.empty());
}

TEST(ServerRequest, VllmSamplingFields) {
  CompletionRequest r = chat("{" + kMsg + "}");
  EXPECT_FALSE(r.ignore_eos);
  EXPECT_EQ(r.min_tokens, 0);
  EXPECT_EQ(r.repetition_penalty, 1.0f);
  EXPECT_EQ(r.min_p, 0.0f);
  r = completion(R"({"prompt": "p", "ignore_eos": true, "min_tokens": 5, "max_tokens": 5, "repetition_penalty": 1.3,
                     "min_p": 0.05})");
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_EQ(r.min_tokens, 5);
  EXPECT_EQ(r.repetition_penalty, 1.3f);
  EXPECT_EQ(r.min_p, 0.05f);
  EXPECT_EQ(chat(chat_with(R"("min_tokens": 1000)")).min_tokens, 1000);  // no max_tokens: nothing to compare with
  const std::pair<const char*, const char*> cases[] = {
      {R"("ignore_eos": 1)", "ignore_eos"},
      {R"("min_tokens": -1)", "min_tokens"},
      {R"("min_tokens": 1.5)", "min_tokens"},
      {R"("min_tokens": 6, "max_tokens": 5)", "min_tokens"},
      {R"("min_tokens": 6, "max_completion_tokens": 5)", "min_tokens"},
      {R"("repetition_penalty": 0)", "repetition_penalty"},
      {R"("repetition_penalty": -1)", "repetition_penalty"},
      {R"("repetition_penalty": "x")", "repetition_penalty"},
      {R"("min_p": -0.01)", "min_p"},
      {R"("min_p": 1.01)", "min_p"},
  };
  for (const auto& [extra, param] : cases) EXPECT_EQ(error_param(Endpoint::chat, chat_with(extra)), param) << extra;
}

TEST(ServerRequest, OpenAiPenaltiesAndLogitBias) {
  CompletionRequest r = chat("{" + kMsg + "}");
  EXPECT_EQ(r.presence_penalty, 0.0f);
  EXPECT_EQ(r.frequency_penalty, 0.0f);
  EXPECT_TRUE(r.logit_bias.empty());
  r = chat(chat_with(R"("presence_penalty": -2, "frequency_penalty": 1.5, "logit_bias": {"50": 100, "7": -100, "9": 0.5})"));
  EXPECT_EQ(r.presence_penalty, -2.0f);
  EXPECT_EQ(r.frequency_penalty, 1.5f);
  EXPECT_EQ(r.logit_bias, (std::vector<std::pair<int32_t, float>>{{7, -100.0f}, {9, 0.5f}, {50, 100.0f}}));
  const std::pair<const char*, const char*> cases[] = {
      {R"("presence_penalty": 2.01)", "presence_penalty"},
      {R"("presence_penalty": "1")", "presence_penalty"},
      {R"("frequency_penalty": -2.5)", "frequency_penalty"},
      {R"("logit_bias": [1])", "logit_bias"},
      {R"("logit_bias": {"x": 1})", "logit_bias"},
      {R"("logit_bias": {"-1": 1})", "logit_bias"},
      {R"("logit_bias": {"1.5": 1})", "logit_bias"},
      {R"("logit_bias": {"99999999999": 1})", "logit_bias"},
      {R"("logit_bias": {"": 1})", "logit_bias"},
      {R"("logit_bias": {"5": 1, "05": 2})", "logit_bias"},  // the same token twice
      {R"("logit_bias": {"5": 100.5})", "logit_bias.5"},
      {R"("logit_bias": {"5": "1"})", "logit_bias.5"},
  };
  for (const auto& [extra, param] : cases) EXPECT_EQ(error_param(Endpoint::chat, chat_with(extra)), param) << extra;
}

TEST(ServerRequest, StopTokenIdsPriorityAndEcho) {
  CompletionRequest r = completion(R"({"prompt": "p", "stop_token_ids": [2, 0], "priority": -5, "echo": true})");
  EXPECT_EQ(r.stop_token_ids, (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(r.priority, -5);
  EXPECT_TRUE(r.echo);
  EXPECT_FALSE(completion(R"({"prompt": "p"})").echo);
  EXPECT_EQ(chat(chat_with(R"("priority": 2147483647)")).priority, 2147483647);
  std::string many = R"("stop_token_ids": [)";
  for (int i = 0; i <= kMaxStopTokenIds; ++i) many += std::string(i ? "," : "") + "1";
  const std::pair<std::string, const char*> cases[] = {
      {R"("stop_token_ids": 5)", "stop_token_ids"},
      {R"("stop_token_ids": [-1])", "stop_token_ids"},
      {R"("stop_token_ids": ["1"])", "stop_token_ids"},
      {many + "]", "stop_token_ids"},
      {R"("priority": 1.5)", "priority"},
      {R"("priority": 2147483648)", "priority"},
      {R"("echo": 1)", "echo"},
  };
  for (const auto& [extra, param] : cases)
    EXPECT_EQ(error_param(Endpoint::completions, R"({"prompt": "p", )" + extra + "}"), param) << extra;
}

TEST(ServerRequest, TokenizeAndDetokenizeShapes) {
  TokenizeRequest t = parse_tokenize_request(R"({"content": "hi", "with_pieces": true})");  // llama-server
  EXPECT_EQ(t.text, "hi");
  EXPECT_FALSE(t.add_special);  // llama-server's default
  EXPECT_TRUE(t.with_pieces);
  t = parse_tokenize_request(R"({"prompt": "hi", "return_token_strs": true})");  // vLLM
  EXPECT_TRUE(t.add_special);  // vLLM's default
  EXPECT_TRUE(t.return_token_strs);
  EXPECT_FALSE(parse_tokenize_request(R"({"prompt": "hi", "add_special_tokens": false})").add_special);
  t = parse_tokenize_request("{" + kMsg + "}");
  EXPECT_TRUE(t.chat);
  ASSERT_EQ(t.messages.size(), 1u);
  EXPECT_EQ(parse_detokenize_request(R"({"tokens": [3, 1]})"), (std::vector<int32_t>{3, 1}));
  auto param_of = [](auto parse, const std::string& body) {
    try {
      parse(body);
    } catch (const ApiError& e) {
      return e.param();
    }
    return std::string("<no error>");
  };
  auto tok = [](const std::string& b) { parse_tokenize_request(b); };
  auto detok = [](const std::string& b) { parse_detokenize_request(b); };
  EXPECT_EQ(param_of(tok, "{}"), "prompt");
  EXPECT_EQ(param_of(tok, R"({"content": 5})"), "content");
  EXPECT_EQ(param_of(tok, R"({"prompt": "x", "add_special_tokens": "no"})"), "add_special_tokens");
  EXPECT_EQ(param_of(tok, "{" + kMsg + R"(, "add_generation_prompt": false})"), "add_generation_prompt");
  EXPECT_EQ(param_of(tok, "[]"), "");
  EXPECT_EQ(param_of(detok, "{}"), "tokens");
  EXPECT_EQ(param_of(detok, R"({"tokens": [1, -1]})"), "tokens");
  EXPECT_EQ(param_of(detok, R"({"tokens": "12"})"), "tokens");
}

TEST(ServerRequest, UnknownTopLevelFieldsAreAcceptedAndListed) {
  const CompletionRequest r = chat(chat_with(R"("zeta": 1, "user": "u", "top_k": 2, "alpha": {"x": [1]})"));
  EXPECT_EQ(r.unknown_fields, (std::vector<std::string>{"alpha", "user", "zeta"}));
  EXPECT_TRUE(chat("{" + kMsg + "}").unknown_fields.empty());
  for (const char* f : {"model", "messages", "prompt", "ignore_eos", "min_tokens", "repetition_penalty", "min_p",
                        "presence_penalty", "frequency_penalty", "logit_bias", "stop_token_ids", "priority", "echo"})
    EXPECT_TRUE(is_known_field(f)) << f;
  EXPECT_FALSE(is_known_field("user"));
}

TEST(ServerRequest, ChatTemplateKwargs) {
  const CompletionRequest r = parse_completion_request(
      Endpoint::chat, R"({"messages": [{"role": "user", "content": "x"}],
                          "chat_template_kwargs": {"enable_thinking": false, "b": {"c": [1, "d"]}}})");
  ASSERT_EQ(r.chat_template_kwargs.size(), 2u);
  EXPECT_EQ(r.chat_template_kwargs[0].first, "b");  // by name
  EXPECT_EQ(r.chat_template_kwargs[0].second, R"({"c":[1,"d"]})");
  EXPECT_EQ(r.chat_template_kwargs[1], (std::pair<std::string, std::string>{"enable_thinking", "false"}));
  EXPECT_TRUE(r.unknown_fields.empty());
  for (const char* bad : {"[]", "\"x\"", "1", "true"})
    EXPECT_EQ(error_param(Endpoint::chat, std::string(R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": )") + bad + "}"),
              "chat_template_kwargs") << bad;
  EXPECT_EQ(error_param(Endpoint::chat, R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": null})"),
            "<no error>");
  EXPECT_EQ(error_param(Endpoint::completions, R"({"prompt": "x", "chat_template_kwargs": {}})"), "chat_template_kwargs");
}
