// Port helpers for the rendezvous address.
#pragma once

namespace acc::launcher {

// A port the kernel considers free on 127.0.0.1: bind port 0, read it, close. Throws std::runtime_error.
int free_port();

// Whether something accepts connections on 127.0.0.1:port (Accelerate's is_port_in_use).
bool port_in_use(int port);

}  // namespace acc::launcher
