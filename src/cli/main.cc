// kestrel: the command-line entry point. Dispatches to the registered subcommands and turns
// errors into a one-line message and a non-zero exit status.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "cli/command.h"
#include "core/error.h"

namespace {

void print_usage() {
  std::printf("kestrel: an inference engine for hybrid large language models\n\n");
  std::printf("usage: kestrel COMMAND [options]   (kestrel COMMAND --help for its options)\n\n");
  std::printf("commands:\n");
  for (const auto& cmd : kestrel::cli::commands()) {
    std::printf("  %-16s %s\n", cmd.name.c_str(), cmd.summary.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  std::string name = argv[1];
  for (const auto& cmd : kestrel::cli::commands()) {
    if (cmd.name != name) continue;
    try {
      kestrel::cli::Args args(cmd.options, argc, argv, 2);
      if (args.help()) {
        std::printf("usage: %s\n\n", cmd.usage.c_str());
        if (!cmd.details.empty()) std::printf("%s\n\n", cmd.details.c_str());
        std::printf("options:\n%s", kestrel::cli::format_options(cmd.options).c_str());
        return 0;
      }
      return cmd.run(args);
    } catch (const kestrel::Error& e) {
      std::fprintf(stderr, "kestrel %s: %s: %s\n", name.c_str(),
                   std::string(kestrel::error_kind_name(e.kind())).c_str(), e.what());
      return e.kind() == kestrel::ErrorKind::kBadInput ? 2 : 1;
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "kestrel %s: out of host memory\n", name.c_str());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kestrel %s: error: %s\n", name.c_str(), e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "kestrel: unknown command '%s' (see kestrel --help)\n", name.c_str());
  return 2;
}
