#include <gtest/gtest.h>

#include "core/sched/ngram_proposer.h"

namespace tessera {
namespace {

TEST(NgramProposer, ProposesWhatFollowedTheLatestEarlierOccurrence) {
  NgramConfig c;
  c.min_n = 2;
  c.max_n = 3;
  //                                0  1  2  3  4  5  6  7  8  9
  const std::vector<int32_t> toks = {1, 2, 3, 9, 9, 1, 2, 3, 4, 5, 7, 1, 2, 3};
  // The suffix (1, 2, 3) occurs at 5 (followed by 4 5 7) and at 0 (followed by 9 9): the latest wins.
  EXPECT_EQ(NgramProposer::lookup(toks, 3, c), (std::vector<int32_t>{4, 5, 7}));
  EXPECT_EQ(NgramProposer::lookup(toks, 1, c), (std::vector<int32_t>{4}));
}

TEST(NgramProposer, FallsBackToShorterNgramsAndStopsAtTheEnd) {
  NgramConfig c;
  c.min_n = 1;
  c.max_n = 3;
  // No earlier (8, 6, 4) or (6, 4); 4 occurs at 1, followed by 8 6 4.
  const std::vector<int32_t> toks = {2, 4, 8, 6, 4};
  EXPECT_EQ(NgramProposer::lookup(toks, 5, c), (std::vector<int32_t>{8, 6, 4}));
  c.min_n = 2;
  EXPECT_TRUE(NgramProposer::lookup(toks, 5, c).empty());
  EXPECT_TRUE(NgramProposer::lookup(std::vector<int32_t>{3}, 4, c).empty());
}

TEST(NgramProposer, SearchesOnlyTheWindow) {
  NgramConfig c;
  c.min_n = 2;
  c.max_n = 2;
  c.window = 4;
  const std::vector<int32_t> toks = {1, 2, 3, 0, 0, 0, 1, 2};
  EXPECT_TRUE(NgramProposer::lookup(toks, 2, c).empty());
  c.window = 8;
  EXPECT_EQ(NgramProposer::lookup(toks, 2, c), (std::vector<int32_t>{3, 0}));
}

}  // namespace
}  // namespace tessera
