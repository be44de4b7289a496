// The structured-output request fields (src/server/constraint_fields.h) through the request parser:
// every peer's spelling gives its Constraint and names its field; order of schema properties kept;
// malformed values, two constraining fields and end-of-generation overrides are 400s naming the field.
#include <gtest/gtest.h>

#include "server/api_error.h"
#include "server/openai_request.h"

using namespace mpkv;
using namespace mpkv::server;

namespace {
const std::string kMsg = R"("messages": [{"role": "user", "content": "hi"}])";
CompletionRequest chat_with(const std::string& extra) { return parse_completion_request(Endpoint::chat, "{" + kMsg + ", " + extra + "}"); }

std::string error_param(const std::string& extra) {
  try {
    chat_with(extra);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << extra;
    return e.param();
  }
  return "<no error>";
}

struct Case {
  std::string extra;
  ConstraintKind kind;
  std::string text, field;
};

TEST(ConstraintFields, EverySpelling) {
  const std::string schema = R"({"type":"object","properties":{"z":{"type":"integer"},"a":{"type":"string"}}})";
  const std::vector<Case> cases = {
      {R"("response_format": {"type": "json_object"})", ConstraintKind::json_object, "", "response_format"},
      {R"("response_format": {"type": "json_object", "schema": )" + schema + "}", ConstraintKind::json_schema, schema,
       "response_format.schema"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": true, "schema": )" + schema + "}}",
       ConstraintKind::json_schema, schema, "response_format.json_schema.schema"},
      {R"("structured_outputs": {"json": )" + schema + "}", ConstraintKind::json_schema, schema, "structured_outputs.json"},
      {R"("structured_outputs": {"json": ")" + std::string(R"({\"type\":\"object\",\"properties\":{\"z\":{\"type\":\"integer\"},\"a\":{\"type\":\"string\"}}})") + "\"}",
       ConstraintKind::json_schema, schema, "structured_outputs.json"},
      {R"("structured_outputs": {"regex": "a+b", "choice": null})", ConstraintKind::regex, "a+b", "structured_outputs.regex"},
      {R"("structured_outputs": {"choice": ["x", "y"]})", ConstraintKind::choice, R"(["x","y"])", "structured_outputs.choice"},
      {R"("structured_outputs": {"grammar": "root ::= \"a\""})", ConstraintKind::grammar, "root ::= \"a\"", "structured_outputs.grammar"},
      {R"("structured_outputs": {"json_object": true})", ConstraintKind::json_object, "", "structured_outputs.json_object"},
      {R"("guided_json": )" + schema, ConstraintKind::json_schema, schema, "guided_json"},
      {R"("guided_regex": "[0-9]+")", ConstraintKind::regex, "[0-9]+", "guided_regex"},
      {R"("guided_choice": ["yes", "no"])", ConstraintKind::choice, R"(["yes","no"])", "guided_choice"},
      {R"("guided_grammar": "root ::= \"b\"")", ConstraintKind::grammar, "root ::= \"b\"", "guided_grammar"},
      {R"("json_schema": )" + schema, ConstraintKind::json_schema, schema, "json_schema"},
      {R"("grammar": "root ::= [a-z]+")", ConstraintKind::grammar, "root ::= [a-z]+", "grammar"},
  };
  for (const Case& c : cases) {
    const CompletionRequest r = chat_with(c.extra);
    ASSERT_TRUE(r.constraint.has_value()) << c.extra;
    EXPECT_EQ(r.constraint->kind, c.kind) << c.extra;
    EXPECT_EQ(r.constraint->text, c.text) << c.extra;  // the schema's properties in the order sent (z before a)
    EXPECT_EQ(r.constraint_field, c.field) << c.extra;
    EXPECT_TRUE(r.unknown_fields.empty()) << c.extra;
  }
  EXPECT_FALSE(chat_with(R"("response_format": {"type": "text"})").constraint.has_value());
  EXPECT_FALSE(chat_with(R"("max_tokens": 3)").constraint.has_value());
  const CompletionRequest c =
      parse_completion_request(Endpoint::completions, R"({"prompt": "p", "guided_regex": "x"})");  // both endpoints
  ASSERT_TRUE(c.constraint.has_value());
  EXPECT_EQ(c.constraint->kind, ConstraintKind::regex);
}

TEST(ConstraintFields, MalformedValuesNameTheirField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("response_format": "json")", "response_format"},
      {R"("response_format": {"type": "yaml"})", "response_format.type"},
      {R"("response_format": {"type": "json_schema"})", "response_format.json_schema"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": "x"}})", "response_format.json_schema.schema"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"name": 3, "schema": {}}})", "response_format.json_schema.name"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"strict": "yes", "schema": {}}})", "response_format.json_schema.strict"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"schema": "{bad"}})", "response_format.json_schema.schema"},
      {R"("response_format": {"type": "json_schema", "json_schema": {"schema": [1]}})", "response_format.json_schema.schema"},
      {R"("structured_outputs": {})", "structured_outputs"},
      {R"("structured_outputs": {"regex": "a", "choice": ["b"]})", "structured_outputs.choice"},
      {R"("structured_outputs": {"structural_tag": {}})", "structured_outputs.structural_tag"},
      {R"("structured_outputs": {"json_object": 1})", "structured_outputs.json_object"},
      {R"("guided_choice": [])", "guided_choice"},
      {R"("guided_choice": ["a", 1])", "guided_choice"},
      {R"("guided_choice": ["a", ""])", "guided_choice"},
      {R"("guided_regex": "")", "guided_regex"},
      {R"("guided_regex": 5)", "guided_regex"},
      {R"("grammar": ["root"])", "grammar"},
      {R"("guided_regex": "a", "grammar": "root ::= \"a\"")", "grammar"},
      {R"("response_format": {"type": "json_object"}, "guided_json": {})", "guided_json"},
      {R"("guided_regex": "a", "min_tokens": 1)", "min_tokens"},
      {R"("guided_regex": "a", "ignore_eos": true)", "ignore_eos"},
  };
  for (const auto& [extra, param] : cases) EXPECT_EQ(error_param(extra), param) << extra;
}

}  // namespace
