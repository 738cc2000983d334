// libcurl under the trackers' HTTP requests (http.hpp), loaded when the first request is made: libacc does not link
// it, so a program that never names a tracking server loads neither libcurl nor the TLS and Kerberos libraries
// behind it, and the release bundle does not carry (and freeze) them: the system's libcurl.so.4 is used.
#include "tracking/http.hpp"

#include <curl/curl.h>
#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <ios>
#include <memory>
#include <mutex>
#include <stdexcept>

namespace acc::tracking::http {

namespace {

// The libcurl functions used here, from the system's libcurl.so.4 (its ABI since 2006).
struct Curl {
  decltype(&curl_global_init) global_init;
  decltype(&curl_easy_init) easy_init;
  decltype(&curl_easy_setopt) setopt;
  decltype(&curl_easy_perform) perform;
  decltype(&curl_easy_getinfo) getinfo;
  decltype(&curl_easy_cleanup) cleanup;
  decltype(&curl_easy_strerror) strerror;
  decltype(&curl_slist_append) slist_append;
  decltype(&curl_slist_free_all) slist_free_all;
};

template <class F>
void bind(void* lib, const char* name, F& f) {
  f = reinterpret_cast<F>(::dlsym(lib, name));
  if (!f) throw std::ios_base::failure(std::string("libcurl.so.4 lacks ") + name);
}

// Loaded and initialised once; a failure is an error of this request, and the next request tries again.
const Curl& curl() {
  static std::mutex mu;
  static Curl* loaded = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (loaded) return *loaded;
  void* lib = ::dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    throw std::ios_base::failure(std::string("talking to a tracking server needs libcurl (Debian/Ubuntu: apt install "
                                             "libcurl4; RHEL: dnf install libcurl): ") +
                                 ::dlerror());
  static Curl c;
  bind(lib, "curl_global_init", c.global_init);
  bind(lib, "curl_easy_init", c.easy_init);
  bind(lib, "curl_easy_setopt", c.setopt);
  bind(lib, "curl_easy_perform", c.perform);
  bind(lib, "curl_easy_getinfo", c.getinfo);
  bind(lib, "curl_easy_cleanup", c.cleanup);
  bind(lib, "curl_easy_strerror", c.strerror);
  bind(lib, "curl_slist_append", c.slist_append);
  bind(lib, "curl_slist_free_all", c.slist_free_all);
  if (c.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw std::ios_base::failure("libcurl: curl_global_init failed");
  loaded = &c;
  return c;
}

size_t collect(char* data, size_t size, size_t n, void* out) {
  auto* body = static_cast<std::string*>(out);
  constexpr size_t kMaxBody = 64u << 20;  // an answer of the REST API is small; never grow without bound
  if (body->size() + size * n > kMaxBody) return 0;  // curl then fails the transfer (CURLE_WRITE_ERROR)
  body->append(data, size * n);
  return size * n;
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl().cleanup(c); }
};
struct SlistDeleter {
  void operator()(curl_slist* l) const { curl().slist_free_all(l); }
};

}  // namespace

std::string redacted(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return url;
  const size_t host = scheme + 3;
  const size_t end = url.find_first_of("/?#", host);
  const size_t at = url.rfind('@', end == std::string::npos ? url.size() : end);
  if (at == std::string::npos || at < host) return url;
  return url.substr(0, host) + "***@" + url.substr(at + 1);
}

std::string escape(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string quoted(std::string_view text, size_t max_bytes) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  size_t i = 0;
  while (i < text.size() && out.size() < max_bytes) {
    const auto u = static_cast<unsigned char>(text[i]);
    // The length of a well-formed UTF-8 sequence starting here (RFC 3629: no overlongs or surrogates), 0 if none.
    size_t n = u < 0x80 ? 1 : u >= 0xC2 && u <= 0xDF ? 2 : u >= 0xE0 && u <= 0xEF ? 3 : u >= 0xF0 && u <= 0xF4 ? 4 : 0;
    if (n > text.size() - i) n = 0;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) n = 0;
    if (n >= 3) {
      const auto b = static_cast<unsigned char>(text[i + 1]);
      if ((u == 0xE0 && b < 0xA0) || (u == 0xED && b > 0x9F) || (u == 0xF0 && b < 0x90) || (u == 0xF4 && b > 0x8F))
        n = 0;
    }
    // C0 controls, DEL, and C1 controls (U+0080..U+009F: 0xC2 0x80..0x9F, which terminals read as escapes too).
    const bool control = (n == 1 && (u < 0x20 || u == 0x7F)) ||
                         (n == 2 && u == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0);
    if (n == 0 || control) {
      for (size_t k = 0; k < std::max<size_t>(n, 1); ++k) {
        const auto c = static_cast<unsigned char>(text[i + k]);
        out += "\\x";
        out += hex[c >> 4];
        out += hex[c & 15];
      }
      i += std::max<size_t>(n, 1);
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  if (i < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

Response request(const Options& o, const std::string& method, const std::string& url, const std::string& json_body,
                 const std::string& what) {
  const Curl& f = curl();
  std::unique_ptr<CURL, CurlDeleter> handle(f.easy_init());
  if (!handle) throw std::ios_base::failure(what + " " + redacted(url) + ": libcurl could not start a request");
  CURL* c = handle.get();
  Response r;
  char error[CURL_ERROR_SIZE] = {0};
  curl_slist* raw = nullptr;
  raw = f.slist_append(raw, "Content-Type: application/json");
  raw = f.slist_append(raw, "Accept: application/json");
  const bool basic = !o.username.empty() && !o.password.empty();
  if (!basic && !o.bearer_token.empty()) raw = f.slist_append(raw, ("Authorization: Bearer " + o.bearer_token).c_str());
  std::unique_ptr<curl_slist, SlistDeleter> headers(raw);
  f.setopt(c, CURLOPT_URL, url.c_str());
  f.setopt(c, CURLOPT_HTTPHEADER, headers.get());
  f.setopt(c, CURLOPT_ERRORBUFFER, error);
  f.setopt(c, CURLOPT_NOSIGNAL, 1L);  // timeouts without SIGALRM (threads of the host program)
  f.setopt(c, CURLOPT_TIMEOUT, o.timeout_s);
  f.setopt(c, CURLOPT_CONNECTTIMEOUT, o.connect_timeout_s < o.timeout_s ? o.connect_timeout_s : o.timeout_s);
  f.setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");  // never file:, ftp:, ... whatever the URI says
  f.setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  f.setopt(c, CURLOPT_WRITEFUNCTION, collect);
  f.setopt(c, CURLOPT_WRITEDATA, &r.body);
  if (basic) {
    f.setopt(c, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    f.setopt(c, CURLOPT_USERNAME, o.username.c_str());
    f.setopt(c, CURLOPT_PASSWORD, o.password.c_str());
  }
  if (o.insecure_tls) {
    f.setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
    f.setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (!o.ca_path.empty()) f.setopt(c, CURLOPT_CAINFO, o.ca_path.c_str());
  if (!o.client_cert_path.empty()) f.setopt(c, CURLOPT_SSLCERT, o.client_cert_path.c_str());
  if (method == "POST") {
    f.setopt(c, CURLOPT_POST, 1L);
    f.setopt(c, CURLOPT_POSTFIELDS, json_body.c_str());
    f.setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(json_body.size()));
  } else if (method != "GET") {
    throw std::invalid_argument("http: unsupported method " + method);
  }
  const CURLcode rc = f.perform(c);
  if (rc != CURLE_OK) {
    std::string why = error[0] ? std::string(error) : std::string(f.strerror(rc));
    throw std::ios_base::failure(what + " " + redacted(url) + ": " + why);
  }
  f.getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  return r;
}

}  // namespace acc::tracking::http
