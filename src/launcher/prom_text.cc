#include "launcher/prom_text.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

namespace hvd::launcher {

bool ParsePromSample(const std::string& line, PromSample* out) {
  size_t i = line.find_first_of("{ ");
  if (i == std::string::npos || i == 0) return false;
  out->name = line.substr(0, i);
  out->labels.clear();
  if (line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      const size_t eq = line.find('=', i);
      if (eq == std::string::npos || eq + 1 >= line.size() || line[eq + 1] != '"') return false;
      std::string value;
      size_t j = eq + 2;
      for (; j < line.size() && line[j] != '"'; ++j) {
        if (line[j] == '\\' && j + 1 < line.size()) ++j;
        value += line[j];
      }
      if (j >= line.size()) return false;
      out->labels[line.substr(i, eq - i)] = value;
      i = j + 1;
      if (i < line.size() && line[i] == ',') ++i;
    }
    if (i >= line.size()) return false;
    ++i;
  }
  const std::string v = line.substr(i);
  if (v.find("+Inf") != std::string::npos) {
    out->value = HUGE_VAL;
  } else {
    char* end = nullptr;
    out->value = std::strtod(v.c_str(), &end);
    if (end == v.c_str()) return false;
  }
  out->line = line;
  return true;
}

PromFamily& PromMerge::Family(const std::string& name) {
  auto it = index_.find(name);
  if (it != index_.end()) return families_[it->second];
  index_[name] = families_.size();
  families_.push_back(PromFamily{name, "", "untyped", {}});
  return families_.back();
}

void PromMerge::Add(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  PromFamily* current = nullptr;
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      const size_t sp = line.find(' ', 7);
      if (sp == std::string::npos) continue;
      current = &Family(line.substr(7, sp - 7));
      (line[2] == 'H' ? current->help : current->type) = line.substr(sp + 1);
      continue;
    }
    PromSample s;
    if (line.empty() || line[0] == '#' || current == nullptr || !ParsePromSample(line, &s)) continue;
    current->samples.push_back(std::move(s));
  }
}

std::string PromMerge::Text() const {
  std::string o;
  for (const PromFamily& f : families_) {
    o += "# HELP " + f.name + " " + f.help + "\n# TYPE " + f.name + " " + f.type + "\n";
    for (const PromSample& s : f.samples) o += s.line + "\n";
  }
  return o;
}

std::vector<const PromSample*> PromMerge::Samples(const std::string& name) const {
  std::vector<const PromSample*> out;
  for (const PromFamily& f : families_) {
    if (name.rfind(f.name, 0) != 0) continue;
    for (const PromSample& s : f.samples) {
      if (s.name == name) out.push_back(&s);
    }
  }
  return out;
}

int MergeReports(int ranks, const std::function<bool(int rank, std::string* text)>& read,
                 PromMerge* merge) {
  int reporting = 0;
  for (int r = 0; r < ranks; ++r) {
    std::string text;
    if (read(r, &text)) {
      merge->Add(text);
      ++reporting;
    }
  }
  return reporting;
}

}  // namespace hvd::launcher
