// Tokenizing a text column, and TRL 1.16's SFTTrainer._prepare_dataset (trl/trainer/sft_trainer.py): the EOS added to
// text and completions, tokenize_fn, build_labels, the max_length truncation and the filter after it, then packing.
#include <algorithm>
#include <stdexcept>

#include "acc/json.hpp"
#include "data/prep/prep.hpp"
#include "data/prep/prep_internal.hpp"
#include "text/chat_template.hpp"

namespace acc::data {
namespace {

std::string where(std::string_view column, size_t row) {
  return "column '" + std::string(column) + "' row " + std::to_string(row);
}

// A cell that must be a string (JSON text of one).
std::string string_cell(const std::string& cell, std::string_view column, size_t row) {
  json::Document doc(cell, where(column, row));
  auto v = doc.root();
  if (!v.is_string())
    throw std::invalid_argument(where(column, row) + ": expected a string, got " +
                                (v.is_null() ? "null" : cell.substr(0, 80)));
  return v.as_string();
}

// TRL's is_conversational for one cell: a list whose first item is an object with a "role".
bool is_messages(const std::string& cell, std::string_view column, size_t row) {
  json::Document doc(cell, where(column, row));
  auto v = doc.root();
  return v.is_array() && v.size() > 0 && v.at(0).is_object() && v.at(0).has("role");
}

// A cell that must be a list of messages (the JSON text itself is what the template renders).
const std::string& messages_cell(const std::string& cell, std::string_view column, size_t row) {
  if (!is_messages(cell, column, row))
    throw std::invalid_argument(where(column, row) + ": expected a list of messages ({\"role\", \"content\"} objects)"
                                                     ", as the dataset's first row has");
  return cell;
}

// prompt + completion, two lists of messages joined as Python's list `+`.
std::string join_messages(const std::string& a, const std::string& b, size_t row) {
  json::Document da(a, where("prompt", row)), db(b, where("completion", row));
  json::Writer w(json::Writer::Layout::Tight);
  w.begin_array();
  for (const auto& e : da.root().elements()) w.value(e);
  for (const auto& e : db.root().elements()) w.value(e);
  w.end_array();
  return w.str();
}

size_t common_prefix_length(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

enum class Form { Text, Messages, PromptCompletion, PromptCompletionChat };

// TRL decides on the first example alone (next(iter(dataset))).
Form form_of(const Table& rows, const SftOptions& o) {
  if (rows.has("prompt")) {
    if (!rows.has("completion"))
      throw std::invalid_argument("a 'prompt' column without a 'completion' column (columns: " +
                                  join_names(rows.names) + ")");
    if (rows.rows() == 0) return Form::PromptCompletion;
    return is_messages(rows.column("prompt")[0], "prompt", 0) ? Form::PromptCompletionChat : Form::PromptCompletion;
  }
  if (rows.has("messages") && rows.rows() > 0 && is_messages(rows.column("messages")[0], "messages", 0))
    return Form::Messages;
  if (!rows.has(o.text_field))
    throw std::invalid_argument("no column '" + o.text_field +
                                "' (the text field), 'messages' or 'prompt' in the rows"
                                " (columns: " +
                                join_names(rows.names) + ")");
  return Form::Text;
}

std::string tools_of(const Table& rows, size_t row) {
  if (!rows.has("tools")) return "";
  const std::string& cell = rows.column("tools")[row];
  json::Document doc(cell, where("tools", row));
  auto v = doc.root();
  if (v.is_null()) return "";
  if (v.is_string()) return v.as_string();  // TRL json.loads a string of tools
  return cell;
}

}  // namespace

Examples tokenize(const text::Tokenizer& tok, const Table& rows, const TokenizeOptions& o, const RunOptions& run) {
  const auto& cells = rows.column(o.column);
  text::EncodeOptions e;
  e.offsets = false;  // ids only
  e.add_special_tokens = o.add_special_tokens;
  e.truncation = o.truncation ? text::Truncation::LongestFirst : text::Truncation::None;
  e.max_length = o.max_length;
  return run_chunked(cells.size(), run.threads, [&](size_t begin, size_t end, Examples& out) {
    std::vector<std::string> texts;
    for (size_t i = begin; i < end; ++i) texts.push_back(string_cell(cells[i], o.column, i));
    std::vector<std::string_view> views(texts.begin(), texts.end());
    auto encoded = tok.encode_batch(views, nullptr, e);
    auto& ids = out.add("input_ids");
    auto& mask = out.add("attention_mask");
    SeqColumn* types = o.return_token_type_ids ? &out.add("token_type_ids") : nullptr;
    for (const auto& enc : encoded) {
      ids.push(enc.ids);
      mask.push(enc.attention_mask);
      if (types) types->push(enc.type_ids);
    }
  });
}

namespace {

bool has_suffix(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// One example as tokenize_fn makes it: its ids, and the masks its labels come from (empty: none applies).
struct SftTokens {
  std::vector<int64_t> ids, completion_mask, assistant_mask;
};

// tokenize_fn for one dataset: its form (decided on the first row), the EOS added to non-conversational text and the
// chat options; the settings are checked when it is made.
class SftEncoder {
 public:
  SftEncoder(const text::Tokenizer& tok, const Table& rows, const SftOptions& o) : tok_(tok), rows_(rows), o_(o) {
    if (o.max_length && *o.max_length == 0) throw std::invalid_argument("max_length 0: no token would be left");
    if (o.padding_free && !o.packing && o.max_length)
      throw std::invalid_argument("padding_free without packing does not enforce max_length (TRL refuses it): enable"
                                  " packing, or unset max_length with inputs already short enough");
    form_ = form_of(rows, o);
    chat_ = form_ == Form::Messages || form_ == Form::PromptCompletionChat;
    if (o.assistant_only_loss && !chat_)
      throw std::invalid_argument("assistant_only_loss is set, but the dataset is not conversational (no 'messages' or"
                                  " conversational 'prompt' column): only conversational data has assistant turns");
    if (!chat_) {  // TRL's add_eos, for non-conversational data only
      auto t = o.eos_token ? o.eos_token : tok.special_token("eos_token");
      if (!t)
        throw std::invalid_argument("the tokenizer has no eos_token to end texts and completions with: set eos_token");
      eos_ = *t;
    }
    completion_only_ =
        o.completion_only_loss.value_or(form_ == Form::PromptCompletion || form_ == Form::PromptCompletionChat);
    copt_.chat_template = o.chat_template;
    copt_.now_unix = o.now_unix;
    plain_.offsets = false;  // tok(text): special tokens added, no truncation; ids only
  }

  // Row r's tokens (the masks cleared first); refused when assistant_only_loss finds no assistant token.
  void encode(size_t r, SftTokens& t) const {
    t.completion_mask.clear();
    t.assistant_mask.clear();
    text::ChatOptions c = copt_;
    if (chat_) c.tools_json = tools_of(rows_, r);
    switch (form_) {
      case Form::Text: {
        t.ids = tok_.encode(with_eos(string_cell(rows_.column(o_.text_field)[r], o_.text_field, r)), plain_).ids;
        break;
      }
      case Form::Messages: {
        auto enc = text::encode_chat(tok_, messages_cell(rows_.column("messages")[r], "messages", r), c);
        t.ids = std::move(enc.encoding.ids);
        if (o_.assistant_only_loss) t.assistant_mask = std::move(enc.assistant_masks);
        break;
      }
      case Form::PromptCompletion:
      case Form::PromptCompletionChat: encode_prompt_completion(r, c, t); break;
    }
    if (o_.assistant_only_loss &&
        std::find(t.assistant_mask.begin(), t.assistant_mask.end(), 1) == t.assistant_mask.end())
      throw std::invalid_argument(
          "assistant_only_loss: " + where(form_ == Form::Messages ? "messages" : "completion", r) +
          " has no assistant tokens: the chat template has no {% generation %} ... {% endgeneration %} blocks (or"
          " renders none for this row); pass a chat_template that marks the assistant's turns");
  }

  // build_labels: -100 where any applicable mask is 0.
  std::vector<int64_t> labels(const SftTokens& t) const {
    std::vector<int64_t> labels = t.ids;
    for (size_t i = 0; i < t.ids.size(); ++i) {
      const bool masked = (completion_only_ && !t.completion_mask.empty() && !t.completion_mask[i]) ||
                          (!t.assistant_mask.empty() && !t.assistant_mask[i]);
      if (masked) labels[i] = -100;
    }
    return labels;
  }

 private:
  const text::Tokenizer& tok_;
  const Table& rows_;
  const SftOptions& o_;
  Form form_;
  bool chat_ = false;
  bool completion_only_ = false;
  std::string eos_;
  text::ChatOptions copt_;
  text::EncodeOptions plain_;

  std::string with_eos(std::string s) const { return has_suffix(s, eos_) ? s : s + eos_; }

  void encode_prompt_completion(size_t r, const text::ChatOptions& c, SftTokens& t) const {
    std::vector<int64_t> prompt_ids;
    if (form_ == Form::PromptCompletion) {
      const std::string prompt = string_cell(rows_.column("prompt")[r], "prompt", r);
      std::string completion = string_cell(rows_.column("completion")[r], "completion", r);
      // TRL's add_eos is an if/elif: a text field in the row that does not end with eos takes the eos, and the
      // completion then gets none.
      const bool text_took_eos = rows_.has(o_.text_field) &&
                                 !has_suffix(string_cell(rows_.column(o_.text_field)[r], o_.text_field, r), eos_);
      if (!text_took_eos) completion = with_eos(std::move(completion));
      prompt_ids = tok_.encode(prompt, plain_).ids;
      t.ids = tok_.encode(prompt + completion, plain_).ids;
    } else {
      const auto& prompt = messages_cell(rows_.column("prompt")[r], "prompt", r);
      const auto& completion = messages_cell(rows_.column("completion")[r], "completion", r);
      text::ChatOptions gen = c;
      gen.add_generation_prompt = true;
      prompt_ids = text::encode_chat(tok_, prompt, gen).encoding.ids;
      auto enc = text::encode_chat(tok_, join_messages(prompt, completion, r), c);
      t.ids = std::move(enc.encoding.ids);
      if (o_.assistant_only_loss) t.assistant_mask = std::move(enc.assistant_masks);
    }
    // The completion starts where the prompt alone and prompt + completion diverge: not always after the
    // prompt (tokens merging across the boundary, templates rendering a prompt alone differently). TRL then
    // leaves the prompt's diverging tail out of the training sequence, and so does this.
    const size_t prompt_len = common_prefix_length(prompt_ids, t.ids);
    t.completion_mask.assign(t.ids.size(), 1);
    std::fill(t.completion_mask.begin(), t.completion_mask.begin() + prompt_len, 0);
  }
};

}  // namespace

Examples sft_prepare(const text::Tokenizer& tok, const Table& rows, const SftOptions& o, const RunOptions& run) {
  const SftEncoder encoder(tok, rows, o);
  Examples out = run_chunked(rows.rows(), run.threads, [&](size_t begin, size_t end, Examples& part) {
    auto& ids_col = part.add("input_ids");
    auto& labels_col = part.add("labels");
    SftTokens t;
    for (size_t r = begin; r < end; ++r) {
      encoder.encode(r, t);
      std::vector<int64_t>& ids = t.ids;
      std::vector<int64_t> labels = encoder.labels(t);
      // Truncation to max_length (not when packing: packing cuts), then TRL drops rows left without any label.
      if (o.max_length && !o.packing) {
        const size_t n = std::min(*o.max_length, ids.size());
        const size_t from = o.truncation_mode == TruncationMode::KeepStart ? 0 : ids.size() - n;
        ids = std::vector<int64_t>(ids.begin() + from, ids.begin() + from + n);
        labels = std::vector<int64_t>(labels.begin() + from, labels.begin() + from + n);
        if (std::all_of(labels.begin(), labels.end(), [](int64_t l) { return l == -100; })) continue;
      }
      ids_col.push(ids);
      labels_col.push(labels);
    }
  });
  if (!o.packing) return out;
  if (!o.max_length) throw std::invalid_argument("packing needs max_length (the packed rows' length)");
  return pack(out, *o.max_length, o.packing_strategy, o.map_batch_size);
}

}  // namespace acc::data
