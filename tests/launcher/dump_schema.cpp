// Prints the key tables of docs/configuration.md from the schema itself (check_docs.py compares them).
#include <cstdio>
#include <string>

#include "acc/config.hpp"

using namespace acc::config;

static std::string cell(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else out += c;
  }
  return out;
}

static void table(SchemaKind kind, const char* env_title) {
  std::printf("| Key | Type | Default | Accepted | %s | Meaning |\n|---|---|---|---|---|---|\n", env_title);
  for (const auto& k : schema_keys(kind)) {
    std::string accepted;
    for (size_t i = 0; i < k.choices.size(); ++i) accepted += (i ? ", " : "") + k.choices[i];
    if (!k.range.empty()) accepted += (accepted.empty() ? "" : "; ") + k.range;
    std::string help = k.help;
    if (!k.aliases.empty()) {
      help += " (also spelled";
      for (const auto& a : k.aliases) help += " `" + a + "`";
      help += ")";
    }
    std::printf("| `%s` | %s | `%s` | %s | %s | %s |\n", k.path.c_str(), cell(k.type).c_str(),
                cell(k.default_json).c_str(), cell(accepted).c_str(), k.env.empty() ? "" : ("`" + k.env + "`").c_str(),
                cell(help).c_str());
  }
}

int main(int argc, char** argv) {
  std::string which = argc > 1 ? argv[1] : "";
  if (which == "accelerator") table(SchemaKind::Accelerator, "Environment");
  else if (which == "launch") table(SchemaKind::Launch, "Exported as");
  else {
    std::fprintf(stderr, "usage: dump_schema accelerator|launch\n");
    return 2;
  }
  return 0;
}
