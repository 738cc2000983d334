#include "models/hf/generate_text.hpp"

#include <ATen/ATen.h>

#include "acc/json.hpp"
#include "models/hf/generate.hpp"
#include "text/streamer.hpp"
#include "util/options.hpp"

namespace acc::core::hf {

std::string generate_text(Model& model, const text::Tokenizer& tok, std::string_view prompt, const char* options_json,
                          const TextCallback& on_text) {
  // The text keys are ours; the rest go to generate's parser, which names any unknown key.
  std::vector<std::string> stops;
  bool skip_special = true, add_special = true;
  json::Writer rest(json::Writer::Layout::Tight);
  rest.begin_object();
  if (options_json && *options_json) {
    json::Document doc(options_json, "generation options");
    if (!doc.root().is_object()) throw OptionsError("generation options: expected a JSON object");
    for (const auto& [k, v] : doc.root().items()) {
      if (k == "stop_strings") {
        if (!v.is_array()) throw OptionsError("generation options: 'stop_strings' must be a list of strings");
        for (const auto& s : v.elements()) {
          if (!s.is_string()) throw OptionsError("generation options: 'stop_strings' must be a list of strings");
          stops.push_back(s.as_string());
        }
      } else if (k == "skip_special_tokens" || k == "add_special_tokens") {
        if (!v.is_bool()) throw OptionsError("generation options: '" + k + "' must be true or false");
        (k == "skip_special_tokens" ? skip_special : add_special) = v.as_bool();
      } else {
        rest.key(k).value(v);
      }
    }
  }
  rest.end_object();

  text::EncodeOptions enc;
  enc.add_special_tokens = add_special;
  const text::Encoding e = tok.encode(prompt, enc);
  if (e.ids.empty()) throw std::invalid_argument("generate_text: the prompt encodes to no tokens");
  const at::Tensor ids = at::tensor(e.ids, at::kLong).unsqueeze(0);
  text::TextStream stream(tok, skip_special, stops);
  bool caller_stopped = false;
  generate(model, ids, at::Tensor(), rest.str().c_str(), [&](const at::Tensor& tokens) {
    const std::string piece = stream.put(tokens.item<int64_t>());
    if (on_text && !piece.empty() && !on_text(piece)) caller_stopped = true;
    return !caller_stopped && !stream.stopped();
  });
  const std::string last = stream.end();
  if (on_text && !last.empty() && !caller_stopped) on_text(last);
  return stream.text();
}

}  // namespace acc::core::hf
