// `tessera info`: the devices found and, for each backend compiled in but unusable, why.
#include <cstdio>
#include <string>

#include "core/registry.h"
#include "examples/cli/commands.h"

namespace tessera::cli {

namespace {
int g_exit_code = 0;

void print_devices() {
  const Registry& reg = Registry::global();
  const auto best = reg.best();
  std::printf("Devices:\n");
  for (const DeviceEntry& e : reg.entries()) {
    if (e.device) {
      const DeviceInfo& i = e.device->info();
      std::printf("  %-10s %s%s\n", i.id.c_str(), i.name.c_str(), e.device == best ? "  [default]" : "");
      if (!i.features.empty()) std::printf("  %-10s features: %s\n", "", i.features.c_str());
      if (i.memory_bytes) std::printf("  %-10s memory: %.1f GiB%s\n", "", double(i.memory_bytes) / (1 << 30),
                                      i.emulated ? " (emulated on the CPU; never chosen by default)" : "");
    } else {
      std::printf("  %-10s unavailable: %s\n", e.id.c_str(), e.why.message().c_str());
    }
  }
  for (const std::string& b : backends_not_built())
    std::printf("  %-10s not built: this binary was configured without the %s backend\n", b.c_str(), b.c_str());
}
}  // namespace

void set_exit_code(int code) { g_exit_code = code; }
int exit_code() { return g_exit_code; }

void add_info_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "List the devices found and why any compiled-in backend is unusable");
  cmd->callback([] { print_devices(); });
}

}  // namespace tessera::cli
