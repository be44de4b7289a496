#include "server/constraint_fields.h"

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/request_fields.h"

namespace mpkv::server {

namespace {
using ojson = nlohmann::ordered_json;

using request_fields::bad;
using request_fields::field;

// A schema given as an object, or as a string holding one (vLLM's guided_json / structured_outputs.json).
Constraint schema_constraint(const ojson& v, const std::string& param) {
  if (v.is_string()) {
    const ojson parsed = ojson::parse(v.get<std::string>(), nullptr, false);
    if (parsed.is_discarded()) throw bad(param, "'" + param + "' is a string that is not valid JSON");
    return schema_constraint(parsed, param);
  }
  if (!v.is_object()) throw bad(param, "'" + param + "' must be a JSON schema (an object)");
  return {ConstraintKind::json_schema, v.dump()};
}

Constraint string_constraint(ConstraintKind kind, const ojson& v, const std::string& param) {
  if (!v.is_string() || v.get<std::string>().empty()) throw bad(param, "'" + param + "' must be a non-empty string");
  return {kind, v.get<std::string>()};
}

Constraint choice_field(const ojson& v, const std::string& param) {
  if (!v.is_array() || v.empty()) throw bad(param, "'" + param + "' must be a non-empty array of strings");
  std::vector<std::string> choices;
  for (const ojson& x : v) {
    if (!x.is_string() || x.get<std::string>().empty()) throw bad(param, "'" + param + "' must hold non-empty strings");
    choices.push_back(x.get<std::string>());
  }
  return choice_constraint(choices);
}

// response_format: text (no constraint), json_object (with llama-server's optional schema), json_schema.
std::optional<FieldConstraint> response_format(const ojson& v) {
  const std::string p = "response_format";
  if (!v.is_object()) throw bad(p, "'response_format' must be an object");
  const ojson* type = field(v, "type");
  if (!type || !type->is_string()) throw bad(p + ".type", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
  const std::string t = *type;
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    if (const ojson* s = field(v, "schema")) return FieldConstraint{schema_constraint(*s, p + ".schema"), p + ".schema"};
    FieldConstraint any_object;
    any_object.constraint.kind = ConstraintKind::json_object;
    any_object.field = p;
    return any_object;
  }
  if (t != "json_schema") throw bad(p + ".type", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got \"" + t + "\"");
  const ojson* js = field(v, "json_schema");
  if (!js || !js->is_object()) throw bad(p + ".json_schema", "'response_format.json_schema' must be an object {name, schema, strict}");
  if (const ojson* n = field(*js, "name"); n && !n->is_string()) throw bad(p + ".json_schema.name", "'response_format.json_schema.name' must be a string");
  if (const ojson* s = field(*js, "strict"); s && !s->is_boolean())
    throw bad(p + ".json_schema.strict", "'response_format.json_schema.strict' must be a boolean");
  const ojson* schema = field(*js, "schema");
  if (!schema) throw bad(p + ".json_schema.schema", "'response_format.json_schema.schema' is required");
  return FieldConstraint{schema_constraint(*schema, p + ".json_schema.schema"), p + ".json_schema.schema"};
}

// One key of structured_outputs; nullopt for json_object: false (no constraint).
std::optional<Constraint> structured_output(const std::string& k, const ojson& x, const std::string& kp) {
  if (k == "json") return schema_constraint(x, kp);
  if (k == "regex") return string_constraint(ConstraintKind::regex, x, kp);
  if (k == "choice") return choice_field(x, kp);
  if (k == "grammar") return string_constraint(ConstraintKind::grammar, x, kp);
  if (k != "json_object") throw bad(kp, "'" + kp + "' is not supported (json, regex, choice, grammar, json_object)");
  if (!x.is_boolean()) throw bad(kp, "'" + kp + "' must be a boolean");
  if (!x.get<bool>()) return std::nullopt;
  return Constraint{ConstraintKind::json_object, ""};
}

// structured_outputs: exactly one of json, regex, choice, grammar, json_object (true).
FieldConstraint structured_outputs(const ojson& v) {
  const std::string p = "structured_outputs";
  if (!v.is_object()) throw bad(p, "'structured_outputs' must be an object");
  std::optional<FieldConstraint> out;
  for (const auto& [k, x] : v.items()) {
    if (x.is_null()) continue;
    const std::string kp = p + "." + k;
    std::optional<Constraint> c = structured_output(k, x, kp);
    if (!c) continue;
    if (out) throw bad(kp, "'" + kp + "' and '" + out->field + "' both constrain the output; 'structured_outputs' sets one");
    out = FieldConstraint{std::move(*c), kp};
  }
  if (!out) throw bad(p, "'structured_outputs' sets none of json, regex, choice, grammar, json_object");
  return *out;
}
}  // namespace

const std::vector<std::string_view>& constraint_field_names() {
  static const std::vector<std::string_view> names = {"response_format", "structured_outputs", "guided_json", "guided_regex",
                                                      "guided_choice", "guided_grammar", "json_schema", "grammar"};
  return names;
}

std::optional<FieldConstraint> parse_constraint_fields(std::string_view body_text) {
  const ojson body = ojson::parse(body_text, nullptr, false);
  if (!body.is_object()) return std::nullopt;  // parse_completion_request answers that
  std::optional<FieldConstraint> out;
  auto set = [&](std::optional<FieldConstraint> c, const std::string& name) {
    if (!c) return;
    if (out) throw bad(name, "'" + name + "' and '" + out->field + "' both constrain the output; send one");
    out = std::move(c);
  };
  for (std::string_view n : constraint_field_names()) {
    const std::string name(n);
    const ojson* v = field(body, name);
    if (!v) continue;
    if (name == "response_format") set(response_format(*v), name);
    else if (name == "structured_outputs") set(structured_outputs(*v), name);
    else if (name == "guided_json" || name == "json_schema") set(FieldConstraint{schema_constraint(*v, name), name}, name);
    else if (name == "guided_regex") set(FieldConstraint{string_constraint(ConstraintKind::regex, *v, name), name}, name);
    else if (name == "guided_choice") set(FieldConstraint{choice_field(*v, name), name}, name);
    else set(FieldConstraint{string_constraint(ConstraintKind::grammar, *v, name), name}, name);  // guided_grammar, grammar
  }
  return out;
}

}  // namespace mpkv::server
