// HTTP for the trackers that talk to a server (MLflow's REST API): a thin layer over libcurl, one request at a time,
// with a timeout on every request so that no call waits forever on a server that stopped answering.
#pragma once
#include <string>
#include <string_view>

#include <acc/limits.hpp>

namespace acc::tracking::http {

struct Options {
  long timeout_s = 120;          // whole request (MLflow's MLFLOW_HTTP_REQUEST_TIMEOUT)
  long connect_timeout_s = 10;   // establishing the connection
  std::string bearer_token;      // "Authorization: Bearer <token>"
  std::string username, password;  // basic authentication, when both are set (before the token, as MLflow)
  bool insecure_tls = false;     // no certificate verification (MLFLOW_TRACKING_INSECURE_TLS)
  std::string ca_path;           // CA bundle to verify the server with (MLFLOW_TRACKING_SERVER_CERT_PATH)
  std::string client_cert_path;  // client certificate, PEM (MLFLOW_TRACKING_CLIENT_CERT_PATH)
};

struct Response {
  long status = 0;  // the HTTP status
  std::string body;
};

// One request (GET, or POST with a JSON body); any HTTP status is returned. Throws std::ios_base::failure
// "<what> <url>: <curl's reason>" when no response came (refused, unknown host, TLS, timeout); the URL in messages is
// redacted (), so a user:password@ in it is never shown.
Response request(const Options& o, const std::string& method, const std::string& url, const std::string& json_body,
                 const std::string& what);

// A URL with any user:password@ taken out, for messages.
std::string redacted(const std::string& url);
// Query-string escaping of one value.
std::string escape(const std::string& s);
// Text a server sent, for an error message: its first max_bytes bytes, control characters and bytes that are not
// UTF-8 written as \xNN (a terminal escape in a body must not reach the caller's terminal), and "... (N bytes)" where
// it was cut.
std::string quoted(std::string_view text, size_t max_bytes = limits::kQuotedTextBytes);

}  // namespace acc::tracking::http
