#include "backends/vulkan/loader.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>

namespace tessera::vulkan {

const char* vk_result_name(VkResult r) {
  switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_INCOMPLETE: return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    default: return "VkResult";
  }
}

Status vk_status(VkResult r, const std::string& what) {
  const std::string msg = "vulkan: " + what + " failed: " + vk_result_name(r) + " (" + std::to_string(int(r)) + ")";
  switch (r) {
    case VK_ERROR_OUT_OF_HOST_MEMORY:
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
    case VK_ERROR_TOO_MANY_OBJECTS: return ResourceExhausted(msg);
    case VK_ERROR_INITIALIZATION_FAILED:
    case VK_ERROR_INCOMPATIBLE_DRIVER:
    case VK_ERROR_LAYER_NOT_PRESENT:
    case VK_ERROR_EXTENSION_NOT_PRESENT:
    case VK_ERROR_FEATURE_NOT_PRESENT:
    case VK_ERROR_DEVICE_LOST: return Unavailable(msg);
    default: return Internal(msg);
  }
}

Result<std::shared_ptr<Instance>> Instance::create() {
  std::shared_ptr<Instance> inst(new Instance());
  TS_RETURN_IF_ERROR(inst->init());
  return inst;
}

namespace {
bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}
#if TESSERA_SANITIZE
// LeakSanitizer names the module of each leak only while it is mapped, and the loader unloads the
// driver and layers in vkDestroyInstance: pin them (RTLD_NODELETE) so that the suppressions in
// tests/sanitizers/lsan.supp can match lavapipe's and the validation layer's own leaks by name.
void pin_vulkan_modules() {
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> paths;
  std::string line;
  while (std::getline(maps, line)) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    if (path.find("libvulkan_") != std::string::npos || path.find("libVkLayer") != std::string::npos ||
        path.find("libLLVM") != std::string::npos)
      paths.insert(path);
  }
  for (const std::string& p : paths) dlopen(p.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}
#endif
}  // namespace

Status Instance::init() {
  const char* env_name = std::getenv("TESSERA_VULKAN_LOADER");
  const std::string name = env_name && *env_name ? env_name : "libvulkan.so.1";
  lib_ = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib_) return Unavailable("no Vulkan loader (" + name + ")");
  get_instance_proc_ = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib_, "vkGetInstanceProcAddr"));
  if (!get_instance_proc_) return Unavailable(name + " has no vkGetInstanceProcAddr");
  auto create_instance =
      reinterpret_cast<PFN_vkCreateInstance>(get_instance_proc_(VK_NULL_HANDLE, "vkCreateInstance"));
  auto enum_version =
      reinterpret_cast<PFN_vkEnumerateInstanceVersion>(get_instance_proc_(VK_NULL_HANDLE, "vkEnumerateInstanceVersion"));
  uint32_t version = VK_API_VERSION_1_0;
  if (enum_version) enum_version(&version);
  if (!create_instance || version < VK_API_VERSION_1_2)
    return Unavailable("the Vulkan loader supports only version " + std::to_string(VK_API_VERSION_MAJOR(version)) + "." +
                       std::to_string(VK_API_VERSION_MINOR(version)) + " (1.2 needed)");

  const bool validate = env_on("TESSERA_VULKAN_VALIDATION");
  std::vector<const char*> layers, extensions;
  if (validate) {
    auto enum_layers = reinterpret_cast<PFN_vkEnumerateInstanceLayerProperties>(
        get_instance_proc_(VK_NULL_HANDLE, "vkEnumerateInstanceLayerProperties"));
    uint32_t n = 0;
    enum_layers(&n, nullptr);
    std::vector<VkLayerProperties> props(n);
    enum_layers(&n, props.data());
    bool found = false;
    for (const auto& p : props) found |= std::strcmp(p.layerName, "VK_LAYER_KHRONOS_validation") == 0;
    if (!found)
      return Unavailable("TESSERA_VULKAN_VALIDATION=1 but VK_LAYER_KHRONOS_validation is not installed");
    layers.push_back("VK_LAYER_KHRONOS_validation");
    extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
  }
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "tessera";
  app.pEngineName = "tessera";
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.pApplicationInfo = &app;
  ci.enabledLayerCount = uint32_t(layers.size());
  ci.ppEnabledLayerNames = layers.data();
  ci.enabledExtensionCount = uint32_t(extensions.size());
  ci.ppEnabledExtensionNames = extensions.data();
  const VkResult r = create_instance(&ci, nullptr, &instance_);
  if (r != VK_SUCCESS) return vk_status(r, "vkCreateInstance");
#if TESSERA_SANITIZE
  pin_vulkan_modules();
#endif

#define TS_VK_LOAD_INSTANCE(fn)                                                             \
  api_.fn = reinterpret_cast<PFN_##fn>(get_instance_proc_(instance_, #fn));                 \
  if (!api_.fn) return Unavailable("the Vulkan loader lacks " #fn);
  TS_VK_INSTANCE_FUNCS(TS_VK_LOAD_INSTANCE)
#undef TS_VK_LOAD_INSTANCE

  if (validate) {
    auto create_messenger = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
        get_instance_proc_(instance_, "vkCreateDebugUtilsMessengerEXT"));
    destroy_messenger_ = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
        get_instance_proc_(instance_, "vkDestroyDebugUtilsMessengerEXT"));
    if (!create_messenger || !destroy_messenger_) return Unavailable("VK_EXT_debug_utils is missing");
    VkDebugUtilsMessengerCreateInfoEXT mi{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
    mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    mi.pfnUserCallback = &Instance::on_message;
    mi.pUserData = this;
    TS_VK_RETURN_IF_ERROR(create_messenger(instance_, &mi, nullptr, &messenger_), "vkCreateDebugUtilsMessengerEXT");
  }
  return OkStatus();
}

VkBool32 Instance::on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT,
                              const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
  auto* self = static_cast<Instance*>(user);
  const char* text = data && data->pMessage ? data->pMessage : "(no message)";
  std::fprintf(stderr, "vulkan validation (%s): %s\n",
               severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? "error" : "warning", text);
  {
    std::lock_guard<std::mutex> lock(self->mu_);
    if (self->first_message_.empty()) self->first_message_ = text;
  }
  self->messages_.fetch_add(1);
  return VK_FALSE;
}

std::string Instance::first_message() const {
  std::lock_guard<std::mutex> lock(mu_);
  return first_message_;
}

Instance::~Instance() {
  if (messenger_ != VK_NULL_HANDLE) destroy_messenger_(instance_, messenger_, nullptr);
  if (instance_ != VK_NULL_HANDLE && api_.vkDestroyInstance) api_.vkDestroyInstance(instance_, nullptr);
  // NOTE: the loader stays loaded: drivers register atexit handlers and thread-locals that
  // would point into unmapped code after dlclose.
}

}  // namespace tessera::vulkan
