// Parity: runs a model over a reference file (the format of tests/data/fixtures/README.md) and
// measures how far its logits, greedy continuations and hidden states are from the reference.
#pragma once

#include <string>
#include <vector>

#include "model/model.h"

namespace kestrel {

struct ParityOptions {
  double tolerance = 1e-4;        // max |err| / rms(reference logits), per prompt
  double hidden_tolerance = 1e-4; // same, for hidden states
  int max_prompts = -1;           // -1: all
};

struct PromptParity {
  int len = 0;
  double max_abs_err = 0;       // full-prompt logits
  double rel_err = 0;           // max_abs_err / rms(reference logits)
  double step_rel_err = 0;      // greedy step logits up to the first divergence
  double hidden_rel_err = -1;   // worst layer; -1 when the reference has no hidden states
  bool greedy_match = false;
  int first_divergence = -1;    // step index, -1 when none
  double divergence_gap = 0;    // reference top-2 gap at that step
  bool near_tie = false;        // divergence at a step whose top-2 gap is within the measured error
  bool pass = false;
};

struct ParityReport {
  bool pass = false;
  std::vector<PromptParity> prompts;
};

ParityReport run_parity(Model& model, const std::string& reference_path, const ParityOptions& opts);

}  // namespace kestrel
