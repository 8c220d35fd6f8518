// JSON text for the files and reports the library writes (timeline, flight
// record, metrics): strings are names and host names, so escaping quotes,
// backslashes and control characters is all that is needed.
#pragma once

#include <cstdio>
#include <string>

namespace hvd {

// Appends s with quotes, backslashes and control characters escaped; no
// surrounding quotes.
inline void AppendJsonEscaped(std::string* out, const std::string& s) {
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      *out += buf;
    } else {
      out->push_back(static_cast<char>(c));
    }
  }
}

// s as a JSON string, quotes included.
inline std::string JsonQuote(const std::string& s) {
  std::string out = "\"";
  AppendJsonEscaped(&out, s);
  out.push_back('"');
  return out;
}

}  // namespace hvd
