// The Prometheus text format as the ranks publish it (docs/metrics.md):
// families (# HELP, # TYPE, then their samples), parsed, and merged across
// ranks so that each family is listed once with every rank's samples.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace hvd::launcher {

struct PromSample {
  std::string name;                           // with a histogram's suffix
  std::map<std::string, std::string> labels;
  double value = 0;
  std::string line;                           // as published
};

struct PromFamily {
  std::string name, help, type;
  std::vector<PromSample> samples;
};

// Families in order of first appearance; samples of the same family from
// several texts are gathered under one header. Malformed lines are skipped.
class PromMerge {
 public:
  void Add(const std::string& text);
  std::string Text() const;
  const std::vector<PromFamily>& families() const { return families_; }
  // The samples named `name` (every rank's).
  std::vector<const PromSample*> Samples(const std::string& name) const;

 private:
  PromFamily& Family(const std::string& name);
  std::vector<PromFamily> families_;
  std::map<std::string, size_t> index_;
};

// Every rank's report that `read` returns, merged into *merge; how many ranks
// reported.
int MergeReports(int ranks, const std::function<bool(int rank, std::string* text)>& read,
                 PromMerge* merge);

bool ParsePromSample(const std::string& line, PromSample* out);

}  // namespace hvd::launcher
