#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "models/model.hpp"
#include "precision/fp8.hpp"
#include "util/options.hpp"

namespace acc {

void Model::to(const c10::Device& device) {
  c10::NoGradGuard no_grad;
  for (auto& [name, t] : state())
    if (t.device() != device) t.set_data(t.to(device));
}

NamedTensors Model::state() const {
  NamedTensors all = named_parameters();
  for (auto& b : named_buffers()) all.push_back(b);
  return all;
}

at::Tensor compute_loss(const std::string& kind, const at::Tensor& output, const at::Tensor& targets) {
  if (kind == "mse") {
    if (output.sizes() != targets.sizes())
      throw std::invalid_argument("mse loss: targets shape " + c10::str(targets.sizes()) +
                                  " differs from output shape " + c10::str(output.sizes()));
    return at::mse_loss(output, targets.to(output.scalar_type()));
  }
  if (kind == "cross_entropy") {
    // Class scores [N, C] (or [..., C]) against integer classes [N] (or [...]); -1 is ignored.
    auto logits = output.reshape({-1, output.size(-1)});
    auto classes = targets.reshape({-1}).to(at::kLong);
    if (classes.size(0) != logits.size(0))
      throw std::invalid_argument("cross_entropy loss: " + std::to_string(classes.size(0)) +
                                  " targets for " + std::to_string(logits.size(0)) + " predictions");
    return at::cross_entropy_loss(logits, classes, {}, at::Reduction::Mean, -1);
  }
  throw std::invalid_argument("this model has no loss (loss: \"none\"); pass no targets");
}

namespace {

class ParamStore {
 public:
  at::Tensor& add(const std::string& name, at::Tensor t) {
    t.set_requires_grad(true);
    params_.emplace_back(name, std::move(t));
    return params_.back().second;
  }
  const at::Tensor& operator[](size_t i) const { return params_[i].second; }
  const NamedTensors& all() const { return params_; }

 private:
  NamedTensors params_;
};

at::Tensor uniform(std::vector<int64_t> shape, double bound) {
  return at::empty(shape, at::kFloat).uniform_(-bound, bound);
}

at::Tensor activation(const std::string& kind, const at::Tensor& x) {
  if (kind == "relu") return at::relu(x);
  if (kind == "gelu") return at::gelu(x);
  return at::tanh(x);
}

// Linear layers with an activation between them; initialised like torch.nn.Linear.
class Mlp final : public Model {
 public:
  explicit Mlp(const Options& o)
      : sizes_(o.get_int_list("sizes")),
        activation_(o.get_string("activation", "relu", {"relu", "gelu", "tanh"})),
        loss_(o.get_string("loss", "mse", {"mse", "cross_entropy", "none"})) {
    if (sizes_.size() < 2) throw OptionsError("mlp spec: 'sizes' needs at least [in, out]");
    for (size_t i = 0; i + 1 < sizes_.size(); ++i) {
      double bound = 1.0 / std::sqrt(static_cast<double>(sizes_[i]));
      p_.add("layers." + std::to_string(i) + ".weight", uniform({sizes_[i + 1], sizes_[i]}, bound));
      p_.add("layers." + std::to_string(i) + ".bias", uniform({sizes_[i + 1]}, bound));
    }
  }
  ForwardResult forward(const at::Tensor& input, const at::Tensor& targets) override {
    if (input.dim() < 1 || input.size(-1) != sizes_.front())
      throw std::invalid_argument("mlp forward: input's last dimension must be " +
                                  std::to_string(sizes_.front()) + "; got shape " +
                                  c10::str(input.sizes()));
    at::Tensor x = input.to(p_[0].scalar_type());
    size_t layers = sizes_.size() - 1;
    for (size_t i = 0; i < layers; ++i) {
      x = model_linear(x, p_[2 * i], p_[2 * i + 1]);
      if (i + 1 < layers) x = activation(activation_, x);
    }
    ForwardResult r{x, {}};
    if (targets.defined()) r.loss = compute_loss(loss_, x, targets);
    return r;
  }
  NamedTensors named_parameters() const override { return p_.all(); }

 private:
  std::vector<int64_t> sizes_;
  std::string activation_, loss_;
  ParamStore p_;
};

// A GPT-2 style decoder-only transformer LM: token + position embeddings, pre-norm blocks of causal
// self-attention (scaled-dot-product attention) and a GELU MLP, a final layer norm, and a head tied
// to the token embedding. Parameter names follow GPT-2's.
class Gpt final : public Model {
 public:
  explicit Gpt(const Options& o)
      : vocab_(o.get_int("vocab_size", std::nullopt, 1)),
        block_(o.get_int("block_size", std::nullopt, 1)),
        layers_(o.get_int("n_layer", std::nullopt, 1)),
        heads_(o.get_int("n_head", std::nullopt, 1)),
        embd_(o.get_int("n_embd", std::nullopt, 1)),
        dropout_(o.get_double("dropout", 0.0)),
        bias_(o.get_bool("bias", true)) {
    if (embd_ % heads_ != 0)
      throw OptionsError("gpt spec: 'n_embd' (" + std::to_string(embd_) +
                         ") must be a multiple of 'n_head' (" + std::to_string(heads_) + ")");
    if (dropout_ < 0 || dropout_ >= 1) throw OptionsError("gpt spec: 'dropout' must be in [0, 1)");
    const double std = 0.02, proj_std = 0.02 / std::sqrt(2.0 * layers_);
    auto normal = [](std::vector<int64_t> shape, double s) { return at::empty(shape).normal_(0, s); };
    p_.add("wte.weight", normal({vocab_, embd_}, std));
    p_.add("wpe.weight", normal({block_, embd_}, std));
    for (int64_t l = 0; l < layers_; ++l) {
      std::string h = "h." + std::to_string(l) + ".";
      layer_norm(h + "ln_1");
      linear(h + "attn.c_attn", 3 * embd_, embd_, std);
      linear(h + "attn.c_proj", embd_, embd_, proj_std);
      layer_norm(h + "ln_2");
      linear(h + "mlp.c_fc", 4 * embd_, embd_, std);
      linear(h + "mlp.c_proj", embd_, 4 * embd_, proj_std);
    }
    layer_norm("ln_f");
  }

  ForwardResult forward(const at::Tensor& input, const at::Tensor& targets) override {
    if (input.dim() != 2 || at::isFloatingType(input.scalar_type()))
      throw std::invalid_argument("gpt forward: input must be integer token ids of shape [batch, time]; got " +
                                  c10::str(input.scalar_type()) + " " + c10::str(input.sizes()));
    const int64_t B = input.size(0), T = input.size(1);
    if (T > block_)
      throw std::invalid_argument("gpt forward: sequence length " + std::to_string(T) +
                                  " exceeds block_size " + std::to_string(block_));
    const at::Tensor& wte = p_[0];
    at::Tensor idx = input.to(at::kLong);
    at::Tensor pos = at::arange(T, idx.options());
    at::Tensor x = at::embedding(wte, idx) + at::embedding(p_[1], pos);
    x = at::dropout(x, dropout_, training_);
    size_t k = 2;
    auto next = [&]() -> const at::Tensor& { return p_[k++]; };
    auto lin = [&](const at::Tensor& in) {
      const at::Tensor& w = next();
      return bias_ ? model_linear(in, w, next()) : model_linear(in, w);
    };
    auto norm = [&](const at::Tensor& in) {
      const at::Tensor& w = next();
      return bias_ ? at::layer_norm(in, {embd_}, w, next()) : at::layer_norm(in, {embd_}, w);
    };
    const int64_t hd = embd_ / heads_;
    for (int64_t l = 0; l < layers_; ++l) {
      at::Tensor qkv = lin(norm(x));
      auto parts = qkv.split(embd_, 2);
      auto heads = [&](const at::Tensor& t) { return t.view({B, T, heads_, hd}).transpose(1, 2); };
      at::Tensor y = at::scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]),
                                                      {}, training_ ? dropout_ : 0.0, /*is_causal=*/true);
      y = y.transpose(1, 2).contiguous().view({B, T, embd_});
      x = x + at::dropout(lin(y), dropout_, training_);
      at::Tensor m = lin(at::gelu(lin(norm(x))));
      x = x + at::dropout(m, dropout_, training_);
    }
    x = norm(x);
    ForwardResult r{at::linear(x, wte), {}};
    if (targets.defined()) {
      if (targets.sizes() != input.sizes())
        throw std::invalid_argument("gpt forward: targets shape " + c10::str(targets.sizes()) +
                                    " differs from input shape " + c10::str(input.sizes()));
      r.loss = compute_loss("cross_entropy", r.output, targets);
    }
    return r;
  }
  NamedTensors named_parameters() const override { return p_.all(); }

 private:
  void linear(const std::string& name, int64_t out, int64_t in, double std) {
    p_.add(name + ".weight", at::empty({out, in}).normal_(0, std));
    if (bias_) p_.add(name + ".bias", at::zeros({out}));
  }
  void layer_norm(const std::string& name) {
    p_.add(name + ".weight", at::ones({embd_}));
    if (bias_) p_.add(name + ".bias", at::zeros({embd_}));
  }
  int64_t vocab_, block_, layers_, heads_, embd_;
  double dropout_;
  bool bias_;
  ParamStore p_;
};

}  // namespace

std::unique_ptr<Model> make_builtin_model(const char* spec_json) {
  // Read "type" first, then validate the keys of that family.
  std::string type = Options(spec_json, "model spec",
                             {"type", "sizes", "activation", "loss", "vocab_size", "block_size",
                              "n_layer", "n_head", "n_embd", "dropout", "bias"})
                         .get_string("type", "", {"mlp", "gpt"});
  if (type == "mlp") return std::make_unique<Mlp>(Options(spec_json, "mlp spec",
                                                           {"type", "sizes", "activation", "loss"}));
  if (type == "gpt")
    return std::make_unique<Gpt>(Options(spec_json, "gpt spec",
                                         {"type", "vocab_size", "block_size", "n_layer", "n_head",
                                          "n_embd", "dropout", "bias"}));
  throw OptionsError("model spec: 'type' is required: \"mlp\" or \"gpt\"");
}

}  // namespace acc
