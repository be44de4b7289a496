// What a request's output must match (docs/structured_outputs.md): a JSON schema, any JSON object,
// a regular expression, one of a list of strings, or a grammar in xgrammar's EBNF (which reads
// llama.cpp's GBNF). A Constraint is plain data: the server's request fields set it
// (server/constraint_fields.h), and so may any other code (a forced tool call sets a json_schema
// built from the tools' parameter schemas); ConstraintCompiler (grammar_compiler.h) turns it into
// a compiled grammar, and the engine masks every sampled token with it (token_matcher.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mpkv {

enum class ConstraintKind : uint8_t {
  json_schema,  // text: the schema (JSON); the output is one JSON value valid against it
  json_object,  // text: unused; the output is any JSON object
  regex,        // text: the pattern (xgrammar's regex dialect, matched in full)
  choice,       // text: a JSON array of strings; the output is exactly one of them
  grammar,      // text: EBNF / GBNF with a `root` rule
};
const char* to_string(ConstraintKind k);

struct Constraint {
  ConstraintKind kind = ConstraintKind::json_object;
  std::string text;
  // The cache key: kind and text.
  std::string key() const;
  bool operator==(const Constraint&) const = default;
};

// A choice constraint from its strings (text = their JSON array).
Constraint choice_constraint(const std::vector<std::string>& choices);

}  // namespace mpkv
