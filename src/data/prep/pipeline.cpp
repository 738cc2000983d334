// A files dataset's options and preprocessing (pipeline.hpp).
#include "data/prep/pipeline.hpp"

#include <algorithm>
#include <filesystem>
#include <ios>
#include <stdexcept>
#include <thread>

#include "data/prep/from_files.hpp"

namespace acc::data {
namespace {

// What a key accepts, as the error says it ("must be ...").
struct Bad : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Parsed {
  PipelineOptions o;
  bool max_length_given = false;
  std::optional<size_t> max_length;
};

size_t positive(const json::Value& v, bool zero_ok = false) {
  if (!v.is_integer() || v.as_int() < (zero_ok ? 0 : 1))
    throw Bad(zero_ok ? "must be an integer >= 0" : "must be a positive integer");
  return static_cast<size_t>(v.as_int());
}
bool boolean(const json::Value& v) {
  if (!v.is_bool()) throw Bad("must be true or false");
  return v.as_bool();
}
std::string string(const json::Value& v, const char* what = "a string") {
  if (!v.is_string()) throw Bad(std::string("must be ") + what);
  return v.as_string();
}
std::vector<std::string> strings(const json::Value& v, bool one_ok) {
  std::vector<std::string> out;
  if (one_ok && v.is_string()) return {v.as_string()};
  if (!v.is_array()) throw Bad(one_ok ? "must be a path or a list of paths" : "must be a list of strings");
  for (const auto& e : v.elements()) {
    if (!e.is_string()) throw Bad(one_ok ? "must be a path or a list of paths" : "must be a list of strings");
    out.push_back(e.as_string());
  }
  return out;
}
template <class T>
T choice(const json::Value& v, std::initializer_list<std::pair<const char*, T>> choices) {
  std::string accepted;
  for (const auto& [name, value] : choices) {
    if (v.is_string() && v.as_string() == name) return value;
    accepted += std::string(accepted.empty() ? "" : ", ") + "\"" + name + "\"";
  }
  throw Bad("must be one of " + accepted + "; got " + v.text());
}

// One key. Null means the key's default wherever a key takes no null of its own.
void apply(Parsed& p, const std::string& k, const json::Value& v) {
  PipelineOptions& o = p.o;
  if (k == "max_length") {  // null: no max_length (the config's null, the mode's default, never gets here)
    p.max_length_given = true;
    p.max_length = v.is_null() ? std::nullopt : std::optional<size_t>(positive(v));
    return;
  }
  if (k == "completion_only_loss") {
    o.sft.completion_only_loss = v.is_null() ? std::nullopt : std::optional<bool>(boolean(v));
    return;
  }
  if (v.is_null()) {
    static const char* const kNullable[] = {"files",         "format",       "columns",
                                            "collator",      "padding_side", "pad_to_multiple_of",
                                            "chat_template", "eos_token",    "pad_token",
                                            "cache_dir"};
    if (std::find(std::begin(kNullable), std::end(kNullable), k) == std::end(kNullable)) {
      // A known key that takes no null: say what it takes.
      static const char* const kKnown[] = {
          "mode",           "text_column", "add_special_tokens", "truncation",          "truncation_mode", "block_size",
          "map_batch_size", "packing",     "packing_strategy",   "assistant_only_loss", "padding_free",    "threads"};
      if (std::find(std::begin(kKnown), std::end(kKnown), k) == std::end(kKnown)) throw Bad("is not an option");
      throw Bad("must not be null");
    }
    return;
  }
  if (k == "files") o.files = strings(v, true);
  else if (k == "format")
    o.open.format = choice<Format>(v, {{"auto", Format::Auto},
                                       {"jsonl", Format::Jsonl},
                                       {"json", Format::Jsonl},
                                       {"csv", Format::Csv},
                                       {"parquet", Format::Parquet},
                                       {"arrow", Format::ArrowStream},
                                       {"arrow_file", Format::ArrowFile}});
  else if (k == "columns") o.open.columns = strings(v, false);
  else if (k == "mode")
    o.mode = choice<PrepMode>(v, {{"tokenize", PrepMode::Tokenize},
                                  {"group_texts", PrepMode::GroupTexts},
                                  {"sft", PrepMode::Sft}});
  else if (k == "text_column") o.tokenize.column = o.sft.text_field = string(v, "a column name");
  else if (k == "add_special_tokens") o.tokenize.add_special_tokens = boolean(v);
  else if (k == "truncation") o.tokenize.truncation = boolean(v);
  else if (k == "truncation_mode")
    o.sft.truncation_mode =
        choice<TruncationMode>(v, {{"keep_start", TruncationMode::KeepStart}, {"keep_end", TruncationMode::KeepEnd}});
  else if (k == "block_size") o.group.block_size = positive(v);
  else if (k == "map_batch_size") o.group.map_batch_size = o.sft.map_batch_size = positive(v);
  else if (k == "packing") o.sft.packing = boolean(v);
  else if (k == "packing_strategy")
    o.sft.packing_strategy = choice<PackingStrategy>(v, {{"bfd", PackingStrategy::Bfd},
                                                         {"bfd_split", PackingStrategy::BfdSplit},
                                                         {"wrapped", PackingStrategy::Wrapped}});
  else if (k == "assistant_only_loss") o.sft.assistant_only_loss = boolean(v);
  else if (k == "chat_template") o.sft.chat_template = string(v, "a template or a template's name");
  else if (k == "eos_token") o.sft.eos_token = string(v, "a token");
  else if (k == "pad_token") o.sft.pad_token = string(v, "a token");
  else if (k == "padding_free") o.sft.padding_free = boolean(v);
  else if (k == "collator")
    o.collator = choice<CollatorKind>(v, {{"with_padding", CollatorKind::WithPadding},
                                          {"language_modeling", CollatorKind::LanguageModeling},
                                          {"default", CollatorKind::Default},
                                          {"trl", CollatorKind::Trl}});
  else if (k == "padding_side")
    o.padding_side = choice<PadSide>(v, {{"right", PadSide::Right}, {"left", PadSide::Left}});
  else if (k == "pad_to_multiple_of") o.pad_to_multiple_of = o.sft.pad_to_multiple_of = positive(v);
  else if (k == "threads") o.run.threads = std::min<size_t>(positive(v), 256);
  else if (k == "cache_dir") o.cache_dir = string(v, "a directory");
  else throw Bad("is not an option");
}

PipelineOptions finish(Parsed p) {
  PipelineOptions o = std::move(p.o);
  if (p.max_length_given) o.tokenize.max_length = o.sft.max_length = p.max_length;
  else o.tokenize.max_length = std::nullopt;  // transformers' default: the tokenizer's model_max_length when truncating
  // SFTConfig's max_length stays 1024 unless given.
  return o;
}

const char* const kOptionKeys[] = {"files",
                                   "format",
                                   "columns",
                                   "mode",
                                   "text_column",
                                   "add_special_tokens",
                                   "truncation",
                                   "max_length",
                                   "truncation_mode",
                                   "block_size",
                                   "map_batch_size",
                                   "packing",
                                   "packing_strategy",
                                   "completion_only_loss",
                                   "assistant_only_loss",
                                   "chat_template",
                                   "eos_token",
                                   "pad_token",
                                   "padding_free",
                                   "collator",
                                   "padding_side",
                                   "pad_to_multiple_of",
                                   "threads",
                                   "cache_dir"};

}  // namespace

CollatorKind PipelineOptions::collator_kind() const {
  if (collator) return *collator;
  switch (mode) {
    case PrepMode::Sft: return CollatorKind::Trl;
    case PrepMode::GroupTexts: return CollatorKind::Default;
    case PrepMode::Tokenize: break;
  }
  return CollatorKind::LanguageModeling;
}

PipelineOptions parse_pipeline_options(const json::Value* root, const char* what) {
  Parsed p;
  if (!root) return finish(std::move(p));
  if (!root->is_object()) throw config::Error(std::string(what) + ": expected a JSON object");
  for (const auto& [key, v] : root->items()) {
    const std::string& k = key;
    try {
      apply(p, k, v);
    } catch (const Bad& e) {
      std::string msg = std::string(what) + ": '" + k + "' " + e.what();
      if (std::string_view(e.what()) == "is not an option") {
        msg = std::string(what) + ": unknown key '" + k + "' (keys:";
        for (const char* name : kOptionKeys) msg += std::string(" ") + name;
        msg += ")";
      }
      throw config::Error(msg);
    }
  }
  return finish(std::move(p));
}

PipelineOptions pipeline_options_from_config(const config::Config& c) {
  // Every key of the data section, by its dotted path (the schema's: base/src/schema.cpp).
  static const char* const kConfigKeys[] = {"data.files",
                                            "data.format",
                                            "data.columns",
                                            "data.mode",
                                            "data.text_column",
                                            "data.add_special_tokens",
                                            "data.truncation",
                                            "data.max_length",
                                            "data.truncation_mode",
                                            "data.block_size",
                                            "data.map_batch_size",
                                            "data.packing",
                                            "data.packing_strategy",
                                            "data.completion_only_loss",
                                            "data.assistant_only_loss",
                                            "data.chat_template",
                                            "data.padding_free",
                                            "data.collator",
                                            "data.padding_side",
                                            "data.pad_to_multiple_of",
                                            "data.threads",
                                            "data.cache_dir"};
  Parsed p;
  auto shown = [&](const char* key) {
    const config::Provenance pr = c.provenance(key);
    return "'" + std::string(key) + "' = " + c.get_json(key) + " (from " +
           (pr.origin == config::Origin::Default ? std::string("the default")
                                                 : std::string(config::origin_name(pr.origin)) + " " + pr.where) +
           ")";
  };
  for (const char* key : kConfigKeys) {
    if (!c.has_key(key)) throw std::logic_error(std::string("the config schema has no key ") + key);
    const std::string value = c.get_json(key);
    // The config's null is the key's default; for max_length, the mode's (SFTConfig's 1024, none for tokenize).
    if (value == "null" && std::string_view(key) == "data.max_length") continue;
    json::Document d(value, key);
    try {
      apply(p, std::string(key).substr(5), d.root());
    } catch (const Bad& e) {
      throw config::Error(shown(key) + ": " + e.what());
    }
  }
  if (p.o.files.empty())
    throw config::Error(shown("data.files") + ": the data section names no files (set data.files to a file, a folder "
                                              "or a list of them)");
  return finish(std::move(p));
}

namespace {

// The files a fingerprint covers: a folder's regular files, by name, recursively.
std::vector<std::string> files_under(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) {
    std::error_code ec;
    if (!std::filesystem::is_directory(p, ec)) {
      out.push_back(p);
      continue;
    }
    std::vector<std::string> inner;
    for (const auto& e : std::filesystem::recursive_directory_iterator(p, ec))
      if (e.is_regular_file(ec)) inner.push_back(e.path().string());
    std::sort(inner.begin(), inner.end());
    out.insert(out.end(), inner.begin(), inner.end());
  }
  return out;
}

std::string open_key(const OpenOptions& o) {
  std::string s = "format=" + std::to_string(static_cast<int>(o.format)) + " columns=";
  for (const auto& c : o.columns) s += json::quote(c) + ",";
  return s;
}

}  // namespace

Examples build_examples(const text::Tokenizer& tok, const PipelineOptions& o) {
  if (o.files.empty()) throw std::invalid_argument("dataset options: no files given (a path, or \"files\")");
  auto build = [&]() {
    Table rows;
    try {
      Reader reader = o.files.size() == 1 ? Reader::open(o.files[0], o.open) : Reader::open(o.files, o.open);
      rows = read_table(reader);
    } catch (const config::Error&) {
      throw;
    } catch (const std::runtime_error& e) {
      // The readers' errors name the file (and line): a column that is not there is the caller's mistake, the rest
      // is what the files hold or whether they can be read.
      const std::string m = e.what();
      if (m.find(": no column '") != std::string::npos) throw std::invalid_argument(m);
      throw std::ios_base::failure(m);
    }
    switch (o.mode) {
      case PrepMode::Tokenize: return tokenize(tok, rows, o.tokenize, o.run);
      case PrepMode::GroupTexts: {
        TokenizeOptions t;  // run_clm_no_trainer.py tokenizes the text column whole, then groups
        t.column = o.tokenize.column;
        t.add_special_tokens = o.tokenize.add_special_tokens;
        return group_texts(tokenize(tok, rows, t, o.run), o.group);
      }
      case PrepMode::Sft: break;
    }
    return sft_prepare(tok, rows, o.sft, o.run);
  };
  if (o.cache_dir.empty()) return build();
  std::string key = "acc dataset from files\n" + fingerprint_files(files_under(o.files)) + open_key(o.open) + "\n" +
                    fingerprint_tokenizer(tok);
  switch (o.mode) {
    case PrepMode::Tokenize: key += settings_key(o.tokenize); break;
    case PrepMode::GroupTexts: {
      TokenizeOptions t;
      t.column = o.tokenize.column;
      t.add_special_tokens = o.tokenize.add_special_tokens;
      key += settings_key(t) + "\n" + settings_key(o.group);
      break;
    }
    case PrepMode::Sft: key += settings_key(o.sft); break;
  }
  return cached(o.cache_dir, key, build);
}

PipelineCollator::PipelineCollator(const text::Tokenizer& tok, const PipelineOptions& o) : kind_(o.collator_kind()) {
  if (kind_ == CollatorKind::WithPadding || kind_ == CollatorKind::LanguageModeling) {
    pad_ = pad_options(tok);
    if (o.sft.pad_token) {  // transformers' `tok.pad_token = ...` before the collator
      auto id = tok.token_to_id(*o.sft.pad_token);
      if (!id)
        throw std::invalid_argument("dataset options: the pad_token '" + *o.sft.pad_token +
                                    "' is not in the tokenizer's vocabulary");
      pad_.pad_token_id = *id;
    }
    if (o.padding_side) pad_.padding_side = *o.padding_side;
    pad_.pad_to_multiple_of = o.pad_to_multiple_of;
  } else if (kind_ == CollatorKind::Trl) {
    trl_ = trl_collator_options(tok, o.sft);
    trl_.pad_to_multiple_of = o.pad_to_multiple_of;
    trl_.padding_side = o.padding_side.value_or(PadSide::Right);
  }
}

Batch PipelineCollator::operator()(const Examples& ex, std::span<const size_t> rows) const {
  switch (kind_) {
    case CollatorKind::WithPadding: return collate_with_padding(ex, rows, pad_);
    case CollatorKind::LanguageModeling: return collate_language_modeling(ex, rows, pad_);
    case CollatorKind::Default: return collate_default(ex, rows);
    case CollatorKind::Trl: break;
  }
  return collate_trl(ex, rows, trl_);
}

}  // namespace acc::data
