// A shared library of libacc's own that libacc.so loads on first use (libacc_text.so, libacc_data.so: Rust libraries
// kept off the path of programs that do not use them, the demo's among them). Shared by src/text/text_loader.cpp and
// src/data/files/data_loader.cpp.
#pragma once
#include <cstddef>
#include <string>

namespace acc::util {

// Opens `file` from the folder the library holding this code is in (libacc.so's), or the path in the environment
// variable `env` when set, and resolves names[i] into *slots[i] for i < n (slots are function pointers, written as
// POSIX's dlsym example writes them). Returns "" on success, else why not, naming the library, the `ninja` target that
// builds it and `env`; `what` names the library in that message ("text", "dataset file"). The library stays loaded.
std::string load_beside_libacc(const char* file, const char* env, const char* what, const char* const* names,
                               void** const* slots, size_t n);

}  // namespace acc::util
