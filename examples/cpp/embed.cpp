// examples/c/embed.c in C++: embeds Tessera through include/tessera/tessera.hpp only (the RAII
// wrapper over the C API; failures arrive as tessera::api::Error).
// Usage: tessera-embed-cpp MODEL.gguf "question" [DEVICE]
#include <cstdio>
#include <tessera/tessera.hpp>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL.gguf PROMPT [DEVICE]\n", argv[0]);
    return 2;
  }
  try {
    const tessera::api::Model model = tessera::api::Model::load(argv[1], argc > 3 ? argv[3] : "auto");
    tessera::api::Context ctx(model);
    tessera::api::GenerateParams params = tessera::api::default_generate_params();
    params.temperature = 0.0f;  // greedy: reproducible
    params.max_tokens = 64;
    ctx.generate(argv[2], params, [](std::string_view text, int32_t) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
      return true;  // keep going
    });
    std::printf("\n");
  } catch (const tessera::api::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
