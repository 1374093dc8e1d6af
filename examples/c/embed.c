/* A minimal C program that embeds Tessera through include/tessera/tessera.h only.
 * Usage: tessera-embed-c MODEL.gguf "question" */
#include <stdio.h>
#include <tessera/tessera.h>

static int on_text(const char* text, size_t length, int32_t token, void* user_data) {
  (void)token;
  (void)user_data;
  fwrite(text, 1, length, stdout);
  fflush(stdout);
  return 0; /* keep going */
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODEL.gguf PROMPT [DEVICE]\n", argv[0]);
    return 2;
  }
  tessera_model* model = NULL;
  if (tessera_model_load(argv[1], argc > 3 ? argv[3] : NULL, &model) != TESSERA_OK) {
    fprintf(stderr, "error: %s\n", tessera_last_error());
    return 1;
  }
  tessera_context* ctx = NULL;
  tessera_context_params cp = tessera_context_default_params();
  if (tessera_context_create(model, &cp, &ctx) != TESSERA_OK) {
    fprintf(stderr, "error: %s\n", tessera_last_error());
    tessera_model_free(model);
    return 1;
  }
  tessera_generate_params gp = tessera_generate_default_params();
  gp.temperature = 0.0f; /* greedy: reproducible */
  gp.max_tokens = 64;
  tessera_status s = tessera_generate(ctx, argv[2], &gp, on_text, NULL);
  printf("\n");
  if (s != TESSERA_OK) fprintf(stderr, "error: %s\n", tessera_last_error());
  tessera_context_free(ctx);
  tessera_model_free(model);
  return s == TESSERA_OK ? 0 : 1;
}
