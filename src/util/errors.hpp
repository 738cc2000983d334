// Error kinds thrown inside libacc that map to distinct ABI status codes (capi/guard.hpp). Plain
// std::invalid_argument / std::out_of_range mean a bad argument; std::ios_base::failure an I/O error.
#pragma once
#include <stdexcept>

namespace acc::core {

struct StateError : std::runtime_error {        // call order
  using std::runtime_error::runtime_error;
};
struct UnsupportedError : std::runtime_error {  // valid, but not in this build or on this machine
  using std::runtime_error::runtime_error;
};
struct DistributedError : std::runtime_error {  // rendezvous or a collective failed
  using std::runtime_error::runtime_error;
};
struct CallbackError : std::runtime_error {     // a caller callback returned non-zero
  using std::runtime_error::runtime_error;
};

}  // namespace acc::core
