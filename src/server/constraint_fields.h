// The request fields that constrain the output (docs/structured_outputs.md, "Request fields"), on
// both endpoints, in every spelling the peers accept:
//   OpenAI:       response_format {"type": "text" | "json_object" | "json_schema",
//                                  "json_schema": {"name", "schema", "strict"}}
//                 (llama-server's {"type": "json_object", "schema": {...}} too)
//   vLLM:         structured_outputs {"json" | "regex" | "choice" | "grammar" | "json_object"},
//                 and its older guided_json / guided_regex / guided_choice / guided_grammar
//   llama-server: json_schema (a schema), grammar (GBNF)
// At most one of them may constrain a request. Schemas are read with nlohmann::ordered_json, so
// their properties keep the order sent (the order the output lists them). What the field holds is
// checked here only for shape; GrammarCompiler checks and compiles the constraint itself.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/constraint.h"

namespace mpkv::server {

// A constraint and the field it came from (the `param` of a 400 about it).
struct FieldConstraint {
  Constraint constraint;
  std::string field;
};

// Throws ApiError(400) naming the field for a malformed value or a second constraining field.
std::optional<FieldConstraint> parse_constraint_fields(std::string_view body_text);

// The top-level names parse_constraint_fields reads (openai_request.cpp's known-field table).
const std::vector<std::string_view>& constraint_field_names();

}  // namespace mpkv::server
