#include "core/observability/timeline.h"

#include <cerrno>
#include <cstring>

#include "common/json.h"

namespace hvd {

namespace {
std::string JsonEscape(const std::string& s) {
  std::string o;
  AppendJsonEscaped(&o, s);
  return o;
}
}  // namespace

Status Timeline::Open(const std::string& path) {
  Close();
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) {
    return Error(HVD_ERR_INVALID_ARGUMENT,
                 "cannot write the timeline to '" + path + "': " + std::strerror(errno));
  }
  origin_ = std::chrono::steady_clock::now();
  std::fputs("[\n", file_);
  first_ = true;
  return Status::Ok();
}

double Timeline::Micros(TimePoint t) const {
  return std::chrono::duration<double, std::micro>(t - origin_).count();
}

int Timeline::Row(const std::string& tensor) {
  const bool scoped = scope_ != nullptr && !scope_->empty();
  const std::string scoped_name = scoped ? *scope_ + ": " + tensor : std::string();
  const std::string& name = scoped ? scoped_name : tensor;
  auto it = rows_.find(name);
  if (it != rows_.end()) return it->second;
  int row = static_cast<int>(rows_.size()) + 1;
  rows_[name] = row;
  std::fprintf(file_, "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
               first_ ? "" : ",\n", row, JsonEscape(name).c_str());
  first_ = false;
  return row;
}

void Timeline::Span(const std::string& tensor, const char* phase, TimePoint begin, TimePoint end,
                    const std::string& args_json) {
  if (file_ == nullptr) return;
  int row = Row(tensor);
  std::fprintf(file_, ",\n{\"name\":\"%s\",\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f%s%s%s}",
               phase, row, Micros(begin), Micros(end) - Micros(begin),
               args_json.empty() ? "" : ",\"args\":", args_json.c_str(), "");
}

void Timeline::Instant(const char* name, TimePoint at) {
  if (file_ == nullptr) return;
  std::fprintf(file_, "%s{\"name\":\"%s\",\"ph\":\"i\",\"s\":\"g\",\"pid\":1,\"tid\":0,\"ts\":%.3f}",
               first_ ? "" : ",\n", name, Micros(at));
  first_ = false;
}

void Timeline::Flush() {
  if (file_ != nullptr) std::fflush(file_);
}

void Timeline::Close() {
  if (file_ == nullptr) return;
  std::fputs("\n]\n", file_);
  std::fclose(file_);
  file_ = nullptr;
  rows_.clear();
}

}  // namespace hvd
