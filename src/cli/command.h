// The subcommand registry. Each command lives in its own cmd_<name>.cc and registers itself:
//
//   static const kestrel::cli::Registrar kReg{{.name = "info", .summary = "...",
//                                              .options = kOptions, .run = run_info}};
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cli/args.h"

namespace kestrel::cli {

struct Command {
  std::string name;
  std::string summary;   // one line for `kestrel --help`
  std::string usage;     // "kestrel info -m DIR"
  std::string details;   // paragraph after the usage line in `kestrel CMD --help`
  std::vector<OptionSpec> options;
  std::function<int(const Args&)> run;
};

struct Registrar {
  explicit Registrar(Command command);
};

const std::vector<Command>& commands();

}  // namespace kestrel::cli
