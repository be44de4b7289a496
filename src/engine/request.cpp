#include "engine/request.h"

namespace mpkv {

const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::none: return "none";
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
    case FinishReason::context: return "context";
    case FinishReason::abort: return "abort";
  }
  return "?";
}

}  // namespace mpkv
