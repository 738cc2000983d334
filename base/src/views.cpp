// ViewReader: what the generated fill functions of acc/config_views.hpp (gen_views.cpp) read a resolved Config with.
#include <stdexcept>

#include "internal.hpp"

namespace acc::config::detail {
namespace {

[[noreturn]] void mismatch(const char* path, const Node& n, const char* want) {
  throw std::logic_error(std::string("config view: '") + path + "' holds " + brief_value(n) + ", not " + want +
                         " (the generated views and the schema disagree)");
}

}  // namespace

ViewReader::ViewReader(const Config& c, SchemaKind kind) : impl_(&Access::impl(c)) {
  if (c.kind() != kind)
    throw Error(std::string("a typed view of the ") + (kind == SchemaKind::Accelerator ? "Accelerator" : "Launch") +
                " schema was asked of a config of the other schema");
  read_.assign(impl_->schema->keys.size(), false);
}

const Node& ViewReader::take(const char* path) {
  auto it = impl_->schema->index.find(path);
  if (it == impl_->schema->index.end())
    throw std::logic_error(std::string("config view: '") + path + "' is not a key of the schema");
  if (read_[it->second]) throw std::logic_error(std::string("config view: '") + path + "' is read twice");
  read_[it->second] = true;
  return impl_->values[it->second];
}

void ViewReader::read_json(std::string& out, const char* path) {
  out.clear();
  write_json(out, take(path), -1);
}

void ViewReader::finish() const {
  for (size_t i = 0; i < read_.size(); ++i)
    if (!read_[i])
      throw std::logic_error("config view: '" + impl_->schema->keys[i].path +
                             "' has no member (rebuild: the generated views predate the schema)");
}

void ViewReader::convert(const Node& n, const char* path, bool& out) {
  if (n.kind != Kind::Bool) mismatch(path, n, "a boolean");
  out = n.b;
}

void ViewReader::convert(const Node& n, const char* path, int64_t& out) {
  if (n.kind != Kind::Int) mismatch(path, n, "an integer");
  out = n.i;
}

void ViewReader::convert(const Node& n, const char* path, double& out) {
  if (n.kind == Kind::Int) out = static_cast<double>(n.i);
  else if (n.kind == Kind::Double) out = n.d;
  else mismatch(path, n, "a number");
}

void ViewReader::convert(const Node& n, const char* path, std::string& out) {
  if (n.kind != Kind::String) mismatch(path, n, "a string");
  out = n.s;
}

void ViewReader::convert(const Node& n, const char* path, std::vector<std::string>& out) {
  if (n.kind != Kind::List) mismatch(path, n, "a list of strings");
  out.clear();
  for (const Node& e : n.list) {
    if (e.kind != Kind::String) mismatch(path, n, "a list of strings");
    out.push_back(e.s);
  }
}

void ViewReader::convert(const Node& n, const char* path, std::array<bool, 3>& out) {
  if (n.kind != Kind::List || n.list.size() != 3) mismatch(path, n, "three booleans");
  for (size_t i = 0; i < 3; ++i) {
    if (n.list[i].kind != Kind::Bool) mismatch(path, n, "three booleans");
    out[i] = n.list[i].b;
  }
}

}  // namespace acc::config::detail
