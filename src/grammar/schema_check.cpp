#include "grammar/schema_check.h"

#include <set>
#include <string>
#include <string_view>

#include "grammar/constraint_error.h"

namespace mpkv {

namespace {
using ojson = nlohmann::ordered_json;

// Keywords whose value is one subschema, a map of subschemas, or an array of them.
constexpr std::string_view kOneSchema[] = {"additionalProperties", "propertyNames", "unevaluatedProperties", "items",
                                           "unevaluatedItems"};
constexpr std::string_view kSchemaMaps[] = {"properties", "patternProperties", "$defs", "definitions"};
constexpr std::string_view kSchemaArrays[] = {"anyOf", "allOf", "prefixItems"};
// Keywords xgrammar applies, and annotations that constrain nothing.
constexpr std::string_view kPlain[] = {
    "type", "required", "enum", "const", "minProperties", "maxProperties", "minItems", "maxItems", "minLength",
    "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    "$ref", "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly",
    "writeOnly", "nullable", "strict"};
// String formats xgrammar generates exactly (its built-in format table).
constexpr std::string_view kFormats[] = {"email", "date", "time", "date-time", "duration", "ipv4", "ipv6",
                                         "hostname", "uuid", "uri"};

template <size_t N>
bool in(const std::string_view (&set)[N], std::string_view k) {
  for (std::string_view s : set)
    if (s == k) return true;
  return false;
}

[[noreturn]] void refuse(const std::string& where, const std::string& what) {
  throw ConstraintError("the schema " + what + (where.empty() ? std::string(" (at its root)") : " (at " + where + ")"));
}

bool has_type(const ojson& s, const char* t) {
  auto it = s.find("type");
  if (it == s.end()) return false;
  if (it->is_string()) return *it == t;
  if (it->is_array())
    for (const ojson& x : *it)
      if (x == t) return true;
  return false;
}

class Checker {
 public:
  explicit Checker(const ojson& root) : root_(root) {}

  // Shape, keywords and size of one subschema and everything under it.
  void walk(const ojson& s, const std::string& where, int depth) {
    if (++nodes_ > kMaxSchemaNodes) refuse(where, "has more than " + std::to_string(kMaxSchemaNodes) + " subschemas");
    if (depth > kMaxSchemaDepth) refuse(where, "is nested deeper than " + std::to_string(kMaxSchemaDepth) + " levels");
    if (s.is_boolean()) return;  // true: anything, false: nothing (xgrammar reads both)
    if (!s.is_object()) refuse(where, "has a subschema that is not an object");
    for (const auto& [k, v] : s.items()) {
      const std::string at = where + "/" + k;
      if (in(kOneSchema, k)) {
        walk(v, at, depth + 1);
      } else if (in(kSchemaMaps, k)) {
        if (!v.is_object()) refuse(at, "'" + k + "' must be an object of subschemas");
        for (const auto& [name, sub] : v.items()) walk(sub, at + "/" + name, depth + 1);
      } else if (in(kSchemaArrays, k)) {
        if (!v.is_array() || v.empty()) refuse(at, "'" + k + "' must be a non-empty array of subschemas");
        if (k == "allOf" && v.size() > 1) refuse(at, "uses 'allOf' with more than one schema, which is not supported");
        for (size_t i = 0; i < v.size(); ++i) walk(v[i], at + "/" + std::to_string(i), depth + 1);
      } else if (!in(kPlain, k)) {
        refuse(at, "uses '" + k + "', which is not supported" + (k == "oneOf" ? " (use anyOf)" : ""));
      }
    }
    check_values(s, where);
  }

  // $refs resolve inside the document and never reach themselves.
  void check_refs(const ojson& s, const std::string& where) {
    if (!s.is_object()) return;
    if (auto r = s.find("$ref"); r != s.end()) {
      if (!r->is_string()) refuse(where, "has a '$ref' that is not a string");
      const std::string ref = *r;
      if (ref != "#" && ref.rfind("#/", 0) != 0) refuse(where, "has '$ref': '" + ref + "'; only refs inside the schema (#/...) are supported");
      const std::string ptr = ref.substr(1);
      if (active_.count(ptr)) refuse(where, "is recursive ('$ref': '" + ref + "' reaches itself), which is not supported");
      if (!done_.count(ptr)) {
        const ojson* target = nullptr;
        try {
          target = &root_.at(ojson::json_pointer(ptr));
        } catch (const std::exception&) {
          refuse(where, "has '$ref': '" + ref + "', which names nothing in the schema");
        }
        active_.insert(ptr);
        check_refs(*target, ptr);
        active_.erase(ptr);
        done_.insert(ptr);
      }
    }
    for (const auto& [k, v] : s.items()) {
      if (k == "$defs" || k == "definitions") continue;  // reached through the refs that use them
      if (in(kOneSchema, k)) check_refs(v, where + "/" + k);
      if (in(kSchemaMaps, k) && v.is_object())
        for (const auto& [name, sub] : v.items()) check_refs(sub, where + "/" + k + "/" + name);
      if (in(kSchemaArrays, k) && v.is_array())
        for (size_t i = 0; i < v.size(); ++i) check_refs(v[i], where + "/" + k + "/" + std::to_string(i));
    }
  }

  std::set<std::string> active_{""};  // the refs being followed (the root is "")

 private:
  void check_values(const ojson& s, const std::string& where) {
    if (auto f = s.find("format"); f != s.end()) {
      if (!f->is_string() || !in(kFormats, f->get<std::string>()))
        refuse(where, "uses 'format': " + f->dump() + ", which is not supported");
      if (s.contains("minLength") || s.contains("maxLength")) refuse(where, "combines 'format' with a length limit, which is not supported");
    }
    if (s.contains("pattern") && (s.contains("minLength") || s.contains("maxLength")))
      refuse(where, "combines 'pattern' with a length limit, which is not supported");
    if (auto p = s.find("pattern"); p != s.end() && !p->is_string()) refuse(where, "has a 'pattern' that is not a string");
    if (s.contains("multipleOf") && !(has_type(s, "integer") && !has_type(s, "number")))
      refuse(where, "uses 'multipleOf' on a non-integer, which is not supported");
    if (auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) refuse(where, "has a 'required' that is not an array");
      for (const ojson& x : *r)
        if (!x.is_string()) refuse(where, "has a 'required' entry that is not a string");
    }
    if (auto e = s.find("enum"); e != s.end() && (!e->is_array() || e->empty()))
      refuse(where, "has an 'enum' that is not a non-empty array");
  }

  const ojson& root_;
  size_t nodes_ = 0;
  std::set<std::string> done_;
};
}  // namespace

void check_schema(const nlohmann::ordered_json& schema) {
  if (!schema.is_object()) throw ConstraintError("the schema must be a JSON object");
  Checker c(schema);
  c.walk(schema, "", 0);
  c.check_refs(schema, "");
}

}  // namespace mpkv
