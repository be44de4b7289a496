// What mpkv accepts of a JSON schema before xgrammar compiles it (docs/structured_outputs.md,
// "Schemas"). xgrammar drops some keywords with only a log warning (uniqueItems, contains,
// multipleOf on numbers, oneOf's exclusivity, allOf of several schemas, length limits beside a
// pattern or format); a request must never get an output that ignores part of its schema, so those
// are refused here, as are keywords xgrammar does not read at all, recursive schemas (a $ref that
// reaches itself), $refs that do not resolve inside the document, and schemas nested deeper than
// kMaxSchemaDepth or with more than kMaxSchemaNodes subschemas. Object keys keep their order
// (ordered_json): properties are generated in the order the schema lists them.
#pragma once
#include <cstddef>

#include <nlohmann/json.hpp>

namespace mpkv {

inline constexpr int kMaxSchemaDepth = 32;
inline constexpr size_t kMaxSchemaNodes = 2048;

// Throws ConstraintError saying what and where (a JSON pointer into the schema).
void check_schema(const nlohmann::ordered_json& schema);

}  // namespace mpkv
