// Calibration statistics for GPTQ (models/quantize/gptq.h): runs a model over a text and collects,
// for every linear weight, H = sum over tokens of x x^T of the rows it multiplies.
//
// The model code is untouched: a Device decorator (calibrate.cpp) wraps the device the model runs
// on, marks the input of every matmul whose weight is a named model tensor as a graph output so
// it survives compute(), then downloads it and adds X^T X (a matmul on the same device, summed in
// double) into that weight's H. Weights that read the same activation (q/k/v, gate/up) share one
// H. MoE expert weights (matmul_id) are not collected; they keep round-to-nearest.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/device.h"
#include "models/quantize/gptq.h"

namespace tessera {

struct CalibrationStats {
  std::map<std::string, std::shared_ptr<Hessian>> by_weight;  // tensor name -> its input's H
  int64_t tokens = 0;   // calibration tokens run through the model
  int windows = 0;
  // The H of |name|, or null when the calibration never saw that weight in a matmul.
  const Hessian* find(const std::string& name) const {
    auto it = by_weight.find(name);
    return it == by_weight.end() ? nullptr : it->second.get();
  }
};

struct CalibrationOptions {
  int64_t max_tokens = 4096;  // of the text, from its start; 0: all of it
  int window = 512;           // tokens per independent forward pass (each starts a fresh context)
  // (tokens done, tokens total) after each window.
  std::function<void(int64_t, int64_t)> progress;
};

// Loads |model_path| (a .gguf or a checkpoint folder) on |device| behind the collecting decorator,
// tokenizes the UTF-8 text file |text_path| and runs it in windows. Errors name the file: a
// missing or empty text, one that tokenizes to fewer than 2 tokens.
Result<CalibrationStats> collect_calibration(const std::string& model_path, DevicePtr device,
                                             const std::string& text_path, const CalibrationOptions& o);

// The decorator itself, for tests: every compute() adds to |stats|.
DevicePtr make_calibrating_device(DevicePtr inner, CalibrationStats* stats);

}  // namespace tessera
