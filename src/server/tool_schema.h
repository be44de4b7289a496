// tool_choice "required" and a named function (docs/serving.md, "Tool calls"): the answer is
// generated under a JSON schema built from the tools, and the constrained output is turned into
// message.tool_calls. The shapes are vLLM's, so the same requests give the same kind of output:
//   named function f:  the schema is f's `parameters` (absent: any object); the output is the
//                      arguments of one call of f;
//   required:          an array of {"name": <one of the tools>, "parameters": <its parameters>}
//                      objects (each branch of an anyOf ties the name to its own schema), at least
//                      one item, at most one when parallel_tool_calls is false.
// Pure functions; the grammar engine that enforces the schema is not here.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "server/tool_call_parse.h"
#include "server/tool_request.h"

namespace mpkv::server {

// The JSON schema text for r (r.choice is required or named; InternalError otherwise: the caller
// asks only for those).
std::string forced_tool_call_schema(const ToolRequest& r);

// The calls in output generated under forced_tool_call_schema(r); ids are id_prefix + index.
// Output that does not have the schema's shape (the grammar should make that impossible; a length
// stop inside the JSON can) throws Error, an answer the server cannot give as tool calls.
std::vector<ParsedToolCall> tool_calls_from_forced_output(const ToolRequest& r, std::string_view output,
                                                          const std::string& id_prefix);

}  // namespace mpkv::server
