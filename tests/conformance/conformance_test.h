// Parameterised conformance tests: one GoogleTest case per (device, case).
#pragma once
#include <gtest/gtest.h>

#include <memory>

#include "tests/conformance/harness.h"

namespace tessera::conformance {

struct Param {
  DevicePtr device;
  std::shared_ptr<Case> c;
};

// gtest prints parameters in failure messages and listings: name the case, not its bytes.
inline void PrintTo(const Param& p, std::ostream* os) { *os << p.device->info().id << " " << p.c->name; }

std::vector<Param> make_params(const std::vector<Case>& cases);
std::string param_name(const ::testing::TestParamInfo<Param>& info);

class ConformanceTest : public ::testing::TestWithParam<Param> {};

}  // namespace tessera::conformance

// Registers |cases_fn|'s cases for every device under test.
#define TESSERA_CONFORMANCE_SUITE(Family, cases_fn)                                                         \
  INSTANTIATE_TEST_SUITE_P(Family, ConformanceTest,                                \
                           ::testing::ValuesIn(::tessera::conformance::make_params(cases_fn())),           \
                           ::tessera::conformance::param_name)
