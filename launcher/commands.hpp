// The subcommands of `acc`, one module each.
#pragma once

#include <string>
#include <vector>

namespace acc::launcher {

int launch_main(const std::vector<std::string>& args);    // launch.cpp
int config_main(const std::vector<std::string>& args);    // config_cmd.cpp
int env_main(const std::vector<std::string>& args);       // env_cmd.cpp
int test_main(const std::vector<std::string>& args);      // test_cmd.cpp
int estimate_main(const std::vector<std::string>& args);  // estimate.cpp
int merge_main(const std::vector<std::string>& args);     // merge_cmd.cpp

}  // namespace acc::launcher
