#include "grammar/constraint.h"

#include <nlohmann/json.hpp>

namespace mpkv {

const char* to_string(ConstraintKind k) {
  switch (k) {
    case ConstraintKind::json_schema: return "json_schema";
    case ConstraintKind::json_object: return "json_object";
    case ConstraintKind::regex: return "regex";
    case ConstraintKind::choice: return "choice";
    case ConstraintKind::grammar: return "grammar";
  }
  return "?";
}

std::string Constraint::key() const { return std::string(to_string(kind)) + '\n' + text; }

Constraint choice_constraint(const std::vector<std::string>& choices) {
  return {ConstraintKind::choice, nlohmann::json(choices).dump()};
}

}  // namespace mpkv
