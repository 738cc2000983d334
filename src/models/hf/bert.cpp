// BertForSequenceClassification as transformers' modeling_bert defines it: an encoder (absolute positions,
// token types, post-LayerNorm blocks), the pooler (tanh of the first token) and a linear classifier, with
// the loss transformers picks from problem_type (regression, single- or multi-label classification).
#include <ATen/ATen.h>

#include "models/hf/families.hpp"
#include "models/hf/layers.hpp"

namespace acc::core::hf {

namespace {

using torch::nn::Module;

struct BertConfig {
  int64_t vocab = 0, hidden = 0, layers = 0, heads = 0, intermediate = 0, positions = 0, types = 0, labels = 0;
  int64_t padding_idx = -1;  // word_embeddings' (config.pad_token_id; -1: none)
  double eps = 1e-12, std = 0.02, hidden_dropout = 0.1, attention_dropout = 0.1, classifier_dropout = 0.1;
  std::string act, problem_type;
};

struct Embeddings : Module {
  Embeddings(const BertConfig& c, const at::TensorOptions& o) : Module("BertEmbeddings") {
    word_embeddings =
        register_module("word_embeddings", std::make_shared<Embedding>(c.vocab, c.hidden, c.std, o, c.padding_idx));
    position_embeddings =
        register_module("position_embeddings", std::make_shared<Embedding>(c.positions, c.hidden, c.std, o));
    token_type_embeddings =
        register_module("token_type_embeddings", std::make_shared<Embedding>(c.types, c.hidden, c.std, o));
    LayerNorm_ = register_module("LayerNorm", std::make_shared<LayerNorm>(c.hidden, c.eps, o));
  }
  std::shared_ptr<Embedding> word_embeddings, position_embeddings, token_type_embeddings;
  std::shared_ptr<LayerNorm> LayerNorm_;
};

struct SelfAttention : Module {
  SelfAttention(const BertConfig& c, const at::TensorOptions& o) {
    query = register_module("query", std::make_shared<Linear>(c.hidden, c.hidden, true, c.std, o));
    key = register_module("key", std::make_shared<Linear>(c.hidden, c.hidden, true, c.std, o));
    value = register_module("value", std::make_shared<Linear>(c.hidden, c.hidden, true, c.std, o));
  }
  std::shared_ptr<Linear> query, key, value;
};

struct DenseNorm : Module {  // BertSelfOutput and BertOutput: LayerNorm(dropout(dense(h)) + residual)
  DenseNorm(int64_t in, const BertConfig& c, const at::TensorOptions& o) {
    dense = register_module("dense", std::make_shared<Linear>(in, c.hidden, true, c.std, o));
    LayerNorm_ = register_module("LayerNorm", std::make_shared<LayerNorm>(c.hidden, c.eps, o));
  }
  at::Tensor forward(const at::Tensor& h, const at::Tensor& residual, double p, bool train) {
    return LayerNorm_->forward(at::dropout(dense->forward(h), p, train) + residual);
  }
  std::shared_ptr<Linear> dense;
  std::shared_ptr<LayerNorm> LayerNorm_;
};

struct AttentionBlock : Module {
  AttentionBlock(const BertConfig& c, const at::TensorOptions& o) {
    self = register_module("self", std::make_shared<SelfAttention>(c, o));
    output = register_module("output", std::make_shared<DenseNorm>(c.hidden, c, o));
  }
  std::shared_ptr<SelfAttention> self;
  std::shared_ptr<DenseNorm> output;
};

struct Intermediate : Module {
  Intermediate(const BertConfig& c, const at::TensorOptions& o) {
    dense = register_module("dense", std::make_shared<Linear>(c.hidden, c.intermediate, true, c.std, o));
  }
  std::shared_ptr<Linear> dense;
};

struct Layer : Module {
  Layer(const BertConfig& c, const at::TensorOptions& o) : Module("BertLayer") {
    attention = register_module("attention", std::make_shared<AttentionBlock>(c, o));
    intermediate = register_module("intermediate", std::make_shared<Intermediate>(c, o));
    output = register_module("output", std::make_shared<DenseNorm>(c.intermediate, c, o));
  }
  std::shared_ptr<AttentionBlock> attention;
  std::shared_ptr<Intermediate> intermediate;
  std::shared_ptr<DenseNorm> output;
};

struct Encoder : Module {
  Encoder(const BertConfig& c, const at::TensorOptions& o) {
    layer = register_module("layer", std::make_shared<ModuleList<Layer>>());
    for (int64_t l = 0; l < c.layers; ++l) layer->add(std::make_shared<Layer>(c, o));
  }
  std::shared_ptr<ModuleList<Layer>> layer;
};

struct Pooler : Module {
  Pooler(const BertConfig& c, const at::TensorOptions& o) {
    dense = register_module("dense", std::make_shared<Linear>(c.hidden, c.hidden, true, c.std, o));
  }
  std::shared_ptr<Linear> dense;
};

struct BertModel : Module {
  BertModel(const BertConfig& c, const at::TensorOptions& o) : Module("BertModel") {
    embeddings = register_module("embeddings", std::make_shared<Embeddings>(c, o));
    encoder = register_module("encoder", std::make_shared<Encoder>(c, o));
    pooler = register_module("pooler", std::make_shared<Pooler>(c, o));
  }
  std::shared_ptr<Embeddings> embeddings;
  std::shared_ptr<Encoder> encoder;
  std::shared_ptr<Pooler> pooler;
};

class BertForSequenceClassification final : public NnModel, public Pretrained {
 public:
  BertForSequenceClassification(BertConfig c, const at::TensorOptions& o)
      : NnModel(std::make_shared<Module>("BertForSequenceClassification")), c_(std::move(c)) {
    bert_ = module_->register_module("bert", std::make_shared<BertModel>(c_, o));
    classifier_ =
        module_->register_module("classifier", std::make_shared<Linear>(c_.hidden, c_.labels, true, c_.std, o));
  }
  std::vector<std::string> reported_units() const override { return numbered_units("bert.encoder.layer.", c_.layers); }
  void reset_parameters() override { reset_tree(*module_); }
  void to_empty(const c10::Device& device) override { materialize_tree(*module_, device); }
  std::string input_name() const override { return "input_ids"; }
  std::string target_name() const override { return "labels"; }
  std::vector<std::string> no_split_modules() const override { return {"BertEmbeddings", "BertLayer"}; }
  // transformers' dropout and activation modules, the classifier's dropout before it, and BertEmbeddings'
  // non-persistent int64 buffers position_ids and token_type_ids [1, max_position_embeddings] (this model makes
  // them per batch).
  std::vector<WeightlessModule> weightless_modules() const override {
    const ModuleTree::Tensor ids{c_.positions, 8, true};
    std::vector<WeightlessModule> w{{"bert.embeddings", "", "", {{"position_ids", ids}, {"token_type_ids", ids}}},
                                    {"bert.embeddings.dropout", "Dropout", "", {}}};
    const std::string act = activation_class(c_.act);
    for (int64_t l = 0; l < c_.layers; ++l) {
      const std::string layer = "bert.encoder.layer." + std::to_string(l);
      w.push_back({layer + ".attention.self.dropout", "Dropout", "", {}});
      w.push_back({layer + ".attention.output.dropout", "Dropout", "", {}});
      w.push_back({layer + ".intermediate.intermediate_act_fn", act, "", {}});
      w.push_back({layer + ".output.dropout", "Dropout", "", {}});
    }
    w.push_back({"bert.pooler.activation", "Tanh", "", {}});
    w.push_back({"dropout", "Dropout", "classifier", {}});
    return w;
  }

  TensorDict forward(const TensorDict& batch) override {
    for (const auto& [name, t] : batch.items())
      if (name != "input_ids" && name != "attention_mask" && name != "token_type_ids" && name != "position_ids" &&
          name != "labels")
        throw std::invalid_argument("BertForSequenceClassification forward: unexpected batch entry '" + name +
                                    "' (it takes input_ids, attention_mask, token_type_ids, position_ids, labels)");
    const at::Tensor& input = batch.at("input_ids");
    if (input.dim() != 2 || at::isFloatingType(input.scalar_type()))
      throw std::invalid_argument("BertForSequenceClassification forward: input_ids must be integer token ids of shape "
                                  "[batch, time]; got " +
                                  c10::str(input.scalar_type()) + " " + c10::str(input.sizes()));
    const int64_t B = input.size(0), T = input.size(1), H = c_.hidden, hd = H / c_.heads;
    if (T > c_.positions)
      throw std::invalid_argument("BertForSequenceClassification forward: " + std::to_string(T) +
                                  " tokens, past max_position_embeddings " + std::to_string(c_.positions));
    Embeddings& e = *bert_->embeddings;
    const c10::Device dev = e.word_embeddings->param("weight").device();
    const auto ids_on = [&](const at::Tensor& t) { return t.to(dev, at::kLong); };
    at::Tensor ids = ids_on(input);
    at::Tensor pos = batch.contains("position_ids") ? ids_on(batch.at("position_ids"))
                                                    : at::arange(T, ids.options()).unsqueeze(0).expand({B, T});
    at::Tensor types = batch.contains("token_type_ids") ? ids_on(batch.at("token_type_ids")) : at::zeros_like(ids);
    const bool train = module_->is_training();
    at::Tensor x =
        e.word_embeddings->forward(ids) + e.token_type_embeddings->forward(types) + e.position_embeddings->forward(pos);
    x = at::dropout(e.LayerNorm_->forward(x), c_.hidden_dropout, train);
    // Every query sees every present key: padding masked, nothing causal.
    std::optional<at::Tensor> mask;  // none without an attention_mask (SDPA refuses an undefined tensor)
    if (at::Tensor m = batch.get("attention_mask"); m.defined()) {
      if (!m.sizes().equals(input.sizes()))
        throw std::invalid_argument("attention_mask has shape " + c10::str(m.sizes()) + "; input_ids has " +
                                    c10::str(input.sizes()));
      check_attention_mask(m);
      mask = padding_mask(m.to(dev), x.options());
    }
    for (size_t l = 0; l < bert_->encoder->layer->items.size(); ++l) {
      x = run_unit("bert.encoder.layer." + std::to_string(l), x,
                   [layer = bert_->encoder->layer->items[l], B, T, H, hd, heads = c_.heads, mask, train,
                    attention_dropout = c_.attention_dropout, hidden_dropout = c_.hidden_dropout,
                    act = c_.act](at::Tensor x) {
                     auto split = [&](const at::Tensor& t) { return t.view({B, T, heads, hd}).transpose(1, 2); };
                     SelfAttention& a = *layer->attention->self;
                     at::Tensor y = at::scaled_dot_product_attention(split(a.query->forward(x)),
                                                                     split(a.key->forward(x)),
                                                                     split(a.value->forward(x)), mask,
                                                                     train ? attention_dropout : 0.0, false);
                     x = layer->attention->output->forward(y.transpose(1, 2).reshape({B, T, H}), x, hidden_dropout,
                                                           train);
                     at::Tensor h = activation(act, layer->intermediate->dense->forward(x));
                     return layer->output->forward(h, x, hidden_dropout, train);
                   });
    }
    at::Tensor pooled = at::tanh(bert_->pooler->dense->forward(x.select(1, 0)));
    at::Tensor logits = classifier_->forward(at::dropout(pooled, c_.classifier_dropout, train));
    TensorDict out{{"logits", logits}};
    if (at::Tensor labels = batch.get("labels"); labels.defined()) out.set("loss", loss(logits, labels.to(dev)));
    return out;
  }

 private:
  // transformers' choice: regression for one label, single-label classification for integer labels,
  // multi-label (BCE with logits) otherwise; config.json's problem_type, when set, decides.
  at::Tensor loss(const at::Tensor& logits, const at::Tensor& labels) const {
    std::string kind = c_.problem_type;
    if (kind.empty())
      kind = c_.labels == 1                              ? "regression"
             : !at::isFloatingType(labels.scalar_type()) ? "single_label_classification"
                                                         : "multi_label_classification";
    if (kind == "regression") {
      at::Tensor l = logits.to(at::kFloat), t = labels.to(at::kFloat);
      return c_.labels == 1 ? at::mse_loss(l.squeeze(), t.squeeze()) : at::mse_loss(l, t);
    }
    if (kind == "single_label_classification")
      return at::cross_entropy_loss(logits.reshape({-1, c_.labels}).to(at::kFloat), labels.reshape({-1}).to(at::kLong));
    return at::binary_cross_entropy_with_logits(logits.to(at::kFloat), labels.to(at::kFloat));
  }

  BertConfig c_;
  std::shared_ptr<BertModel> bert_;
  std::shared_ptr<Linear> classifier_;
};

}  // namespace

std::unique_ptr<Model> make_bert_classifier(const json::Value& j, const at::TensorOptions& options,
                                            const std::string& source) {
  BertConfig c;
  c.vocab = j.get_int("vocab_size");
  c.hidden = j.get_int("hidden_size");
  c.layers = j.get_int("num_hidden_layers");
  c.heads = j.get_int("num_attention_heads");
  c.intermediate = j.get_int("intermediate_size");
  c.positions = j.get_int_or("max_position_embeddings", 512);
  c.types = j.get_int_or("type_vocab_size", 2);
  c.labels = j.has_value("id2label") ? static_cast<int64_t>(j.get("id2label").size()) : j.get_int_or("num_labels", 2);
  c.eps = j.get_double_or("layer_norm_eps", 1e-12);
  c.std = j.get_double_or("initializer_range", 0.02);
  c.hidden_dropout = j.get_double_or("hidden_dropout_prob", 0.1);
  c.attention_dropout = j.get_double_or("attention_probs_dropout_prob", 0.1);
  c.classifier_dropout = j.get_double_or("classifier_dropout", c.hidden_dropout);
  c.act = j.get_string_or("hidden_act", "gelu");
  c.problem_type = j.get_string_or("problem_type", "");
  check_activation(c.act, source);
  if (j.get_string_or("position_embedding_type", "absolute") != "absolute")
    throw std::invalid_argument(source + ": position_embedding_type '" + j.get_string("position_embedding_type") +
                                "' is not one libacc has (absolute)");
  if (c.vocab <= 0 || c.hidden <= 0 || c.layers <= 0 || c.heads <= 0 || c.intermediate <= 0 || c.labels <= 0 ||
      c.hidden % c.heads != 0)
    throw std::invalid_argument(source + ": sizes must be positive and hidden_size a multiple of num_attention_heads");
  c.padding_idx = padding_idx(j, c.vocab, /*absent: BertConfig's default*/ 0, source);
  auto model = std::make_unique<BertForSequenceClassification>(c, options);
  if (options.device() != c10::kMeta) model->reset_parameters();
  return model;
}

}  // namespace acc::core::hf
