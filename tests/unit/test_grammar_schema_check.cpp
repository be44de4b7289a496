// check_schema (src/grammar/schema_check.h): what it lets through to xgrammar and what it refuses,
// with the place it names.
#include <gtest/gtest.h>

#include "grammar/constraint_error.h"
#include "grammar/schema_check.h"

namespace mpkv {
namespace {

using ojson = nlohmann::ordered_json;

std::string refusal(const std::string& schema) {
  try {
    check_schema(ojson::parse(schema));
  } catch (const ConstraintError& e) {
    return e.what();
  }
  return "";
}

TEST(SchemaCheck, AcceptsWhatXgrammarApplies) {
  // A pydantic-style schema: $defs + $ref, anyOf with null, enums, patterns, nested arrays.
  const std::string ok = R"({
    "$defs": {"Color": {"enum": ["red", "green"], "title": "Color", "type": "string"},
              "Item": {"type": "object", "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]+$"},
                                                         "qty": {"type": "integer", "minimum": 1, "multipleOf": 2}},
                       "required": ["sku", "qty"], "additionalProperties": false}},
    "title": "Order", "type": "object",
    "properties": {"color": {"$ref": "#/$defs/Color"}, "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}, "minItems": 1},
                   "note": {"anyOf": [{"type": "string", "maxLength": 20}, {"type": "null"}], "default": null},
                   "when": {"type": "string", "format": "date"}, "pair": {"type": "array", "prefixItems": [{"type": "number"}, true]}},
    "required": ["color", "items"]})";
  EXPECT_EQ(refusal(ok), "");
}

TEST(SchemaCheck, RefusesWhatXgrammarWouldIgnore) {
  EXPECT_NE(refusal(R"({"type": "array", "uniqueItems": true})").find("'uniqueItems'"), std::string::npos);
  EXPECT_NE(refusal(R"({"properties": {"a": {"type": "array", "contains": {"type": "string"}}}})").find("/properties/a/contains"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"type": "number", "multipleOf": 0.5})").find("multipleOf"), std::string::npos);
  EXPECT_NE(refusal(R"({"oneOf": [{"type": "string"}, {"type": "integer"}]})").find("use anyOf"), std::string::npos);
  EXPECT_NE(refusal(R"({"allOf": [{"type": "string"}, {"minLength": 2}]})").find("allOf"), std::string::npos);
  EXPECT_NE(refusal(R"({"type": "string", "pattern": "a+", "maxLength": 3})").find("length limit"), std::string::npos);
  EXPECT_NE(refusal(R"({"type": "string", "format": "credit-card"})").find("format"), std::string::npos);
  EXPECT_NE(refusal(R"({"not": {"type": "string"}})").find("'not'"), std::string::npos);
  EXPECT_NE(refusal(R"({"if": {}, "then": {}})").find("'if'"), std::string::npos);
  EXPECT_NE(refusal(R"([1, 2])").find("must be a JSON object"), std::string::npos);
}

TEST(SchemaCheck, RefusesRecursionAndDanglingRefs) {
  EXPECT_NE(refusal(R"({"type": "object", "properties": {"child": {"$ref": "#"}}})").find("recursive"), std::string::npos);
  EXPECT_NE(refusal(R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"items": {"$ref": "#/$defs/a"}}}, "$ref": "#/$defs/a"})")
                .find("recursive"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"$ref": "#/$defs/missing"})").find("names nothing"), std::string::npos);
  EXPECT_NE(refusal(R"({"$ref": "https://example.com/s.json"})").find("only refs inside"), std::string::npos);
  // The same definition used twice is not recursion.
  EXPECT_EQ(refusal(R"({"$defs": {"p": {"type": "integer"}}, "properties": {"x": {"$ref": "#/$defs/p"}, "y": {"$ref": "#/$defs/p"}}})"), "");
}

TEST(SchemaCheck, RefusesHugeSchemas) {
  std::string deep = R"({"type": "string"})";
  for (int i = 0; i <= kMaxSchemaDepth; ++i) deep = R"({"type": "array", "items": )" + deep + "}";
  EXPECT_NE(refusal(deep).find("nested deeper"), std::string::npos);
  ojson wide = {{"type", "object"}, {"properties", ojson::object()}};
  for (size_t i = 0; i <= kMaxSchemaNodes; ++i) wide["properties"]["p" + std::to_string(i)] = {{"type", "integer"}};
  try {
    check_schema(wide);
    FAIL() << "a schema of " << kMaxSchemaNodes + 1 << " properties passed";
  } catch (const ConstraintError& e) {
    EXPECT_NE(std::string(e.what()).find("subschemas"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mpkv
