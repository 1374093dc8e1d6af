#include "backends/null/null_device.h"
#include "core/registry.h"

namespace tessera {

// Every backend defines probe_<name> (the tessera_backend() line in backends/CMakeLists.txt
// names it): it appends one entry per device found, nothing (the registry then lists the backend
// as unavailable: "no device found"), or an unavailable entry saying why (no driver).
void probe_null(std::vector<DeviceEntry>& out) {
  DeviceInfo claims;
  claims.type = DeviceType::kAccelerator;
  claims.by_name_only = true;  // never "auto": it runs nothing
  out.push_back({"null", "null", std::make_shared<null_backend::NullDevice>(claims), OkStatus()});
}

}  // namespace tessera
