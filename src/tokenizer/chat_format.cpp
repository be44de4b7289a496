#include "tokenizer/chat_format.h"

#include <string_view>

namespace mpkv {
namespace {

// s without leading and trailing ASCII whitespace (" \t\n\v\f\r", C isspace).
std::string_view trim_space(std::string_view s) {
  constexpr std::string_view kSpace = " \t\n\v\f\r";
  const size_t begin = s.find_first_not_of(kSpace);
  if (begin == std::string_view::npos) return {};
  return s.substr(begin, s.find_last_not_of(kSpace) - begin + 1);
}

}  // namespace

ChatFormat detect_chat_format(const std::string& chat_template, bool vocab_has_start_of_turn) {
  if (chat_template.find("<start_of_turn>") != std::string::npos) return ChatFormat::gemma;
  if (chat_template.empty() && vocab_has_start_of_turn) return ChatFormat::gemma;
  return ChatFormat::chatml;
}

std::optional<std::string> chatml_default_system_prompt(const std::string& tmpl) {
  static const std::string kStart = "<|im_start|>system";
  static const std::string kEnd = "<|im_end|>";
  for (size_t at = tmpl.find(kStart); at != std::string::npos; at = tmpl.find(kStart, at + 1)) {
    size_t body = at + kStart.size();
    bool escaped = false;
    if (tmpl.compare(body, 1, "\n") == 0) {
      body += 1;
    } else if (tmpl.compare(body, 2, "\\n") == 0) {
      body += 2;
      escaped = true;
    } else {
      continue;
    }
    const size_t end = tmpl.find(kEnd, body);
    if (end == std::string::npos) break;
    const std::string text = tmpl.substr(body, end - body);
    if (text.empty() || text.find_first_of("'\"") != std::string::npos || text.find("{{") != std::string::npos ||
        text.find("{%") != std::string::npos || text.find("%}") != std::string::npos ||
        text.find("}}") != std::string::npos) {
      continue;
    }
    if (!escaped) return text;
    std::string out;  // the template string was written with Jinja escapes
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '\\' && i + 1 < text.size()) {
        const char n = text[++i];
        out += n == 'n' ? '\n' : n == 't' ? '\t' : n;
      } else {
        out += text[i];
      }
    }
    return out;
  }
  return std::nullopt;
}

std::string format_chatml(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                          const std::optional<std::string>& default_system_prompt) {
  std::string out;
  const auto add = [&](const std::string& role, const std::string& content) {
    out += "<|im_start|>" + role + "\n" + content + "<|im_end|>\n";
  };
  if (default_system_prompt && !messages.empty() && messages.front().role != "system") {
    add("system", *default_system_prompt);
  }
  for (const auto& m : messages) add(m.role, m.content);
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string format_gemma(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string out, system;
  for (const auto& m : messages) {
    if (m.role == "system") {
      system += trim_space(m.content);
      continue;
    }
    const std::string role = m.role == "assistant" ? "model" : m.role;
    out += "<start_of_turn>" + role + "\n";
    if (!system.empty() && role != "model") {
      out += system + "\n\n";
      system.clear();
    }
    out += trim_space(m.content);
    out += "<end_of_turn>\n";
  }
  if (add_generation_prompt) out += "<start_of_turn>model\n";
  return out;
}

}  // namespace mpkv
